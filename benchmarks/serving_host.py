"""The serving benchmark's host process: one loaded predictor served by our server, a plain kserve.Model and a
bare ASGI app, and the commands that run it in process.

Separate processes loading the same model run it at different speeds, and so do two threads of one process
calling one predictor, for the life of the process (docs/benchmarks.md, "Why one host" and serving item 10);
either would swamp a serving overhead of a few per cent. So one host process loads the model once and serves it
three ways on one event loop in one thread (each on its own 127.0.0.1 socket), runs the in-process batch-1 calls
on that same thread and the in-process batches on our server's model thread, where its batches run. Both sides
of its pipe live here: `Host`, the benchmark's handle that starts it and sends it commands, and `run_host`,
what `python -m benchmarks.serving --host-model DIR` (internal) runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson

from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving.processes import stop_group

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
MODEL_NAME = "ernie-bench"
BASELINE_NAME = "plain-ernie"
OPENMP_DEFAULT_SPIN_MS = 200  # Intel OpenMP's KMP_BLOCKTIME default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for kserve's server, which takes a port, not a socket)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env() -> dict[str, str]:
    """The environment of a benchmark's child process: this checkout importable, warnings off, no pipeline home."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    env.pop("PADDLE_MLOPS_HOME", None)
    return env


class Host:
    """The process that holds the predictor: both servers run in it, and it answers our commands.

    Commands go to its stdin and replies come back on a pipe of their own, one JSON object per
    line (its stdout and stderr, where Paddle and kserve log, go to `host.log`). It is started in
    its own process group, not a new session: with scheduler autogroups (Linux default) a new
    session gets its own CPU share and would be favoured over this process's load generator.
    """

    def __init__(self, stack: ExitStack, model_dir: Path, work: Path, args: argparse.Namespace) -> None:
        read_fd, write_fd = os.pipe()
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.serving",
            "--host-model",
            str(model_dir),
            "--reply-fd",
            str(write_fd),
            "--cpu-threads",
            str(args.cpu_threads),
        ]
        if args.max_batch_size is not None:
            cmd += ["--max-batch-size", str(args.max_batch_size)]
        if args.max_wait_ms is not None:
            cmd += ["--max-wait-ms", str(args.max_wait_ms)]
        if args.engine:
            cmd += ["--engine", args.engine]
        self.log_path = work / "host.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=child_env(),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                process_group=0,
            )
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, encoding="utf-8")
        stack.callback(self.replies.close)
        stack.callback(stop_group, self.proc, 15)

    def _died(self, what: str) -> RuntimeError:
        self.proc.poll()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        return RuntimeError(f"the benchmark host {what} (exit {self.proc.returncode}):\n{tail}")

    def _reply(self, timeout: float | None = None) -> dict:
        if timeout is not None and not select.select([self.replies], [], [], timeout)[0]:
            raise self._died(f"did not answer within {timeout:.0f}s")
        line = self.replies.readline()
        if not line:
            raise self._died("exited")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the benchmark host failed: {reply['error']}")
        return reply

    def ready(self, timeout: float = 600) -> dict[str, str]:
        """The two servers' URLs, once the model is loaded and both are listening."""
        return self._reply(timeout)

    def call(self, **command: object) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(command, ensure_ascii=False) + "\n").encode())
        self.proc.stdin.flush()
        return self._reply()


def bare_app(clf: Any) -> Any:
    """The floor: read the JSON body, call the model, write the JSON answer; nothing else. The least any Python ASGI
    server adds to a model call under uvicorn, httptools and uvloop (#32: the batch-1 target is against it)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        answer = orjson.dumps({"predictions": clf.predict(orjson.loads(body)["instances"])})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def _baseline_server(clf: object, port: int) -> Any:
    """The plain predictor a user would write, on kserve's own REST server: one request, one inference.

    What `kserve.ModelServer().start([model])` does for REST, minus gRPC and signal handlers: register
    the model, then kserve's `RESTServer` (its FastAPI application and middlewares under uvicorn);
    `start()` serves it on the running event loop. kserve binds 0.0.0.0 (not configurable in
    0.21); the benchmark only ever talks to 127.0.0.1.
    """
    import kserve
    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
    from kserve.protocol.rest.server import RESTServer

    class PlainErnie(kserve.Model):
        def load(self) -> bool:
            self.clf = clf
            self.ready = True
            return True

        def predict(self, payload: dict, headers: dict[str, str] | None = None) -> dict:
            return {"predictions": self.clf.predict(payload["instances"])}  # type: ignore[attr-defined]

    server = kserve.ModelServer(http_port=port, enable_grpc=False)
    model = PlainErnie(BASELINE_NAME)
    model.load()
    server.register_model(model)
    model.enable_latency_logging = server.enable_latency_logging
    return RESTServer(FASTAPI_APP_IMPORT_STRING, server.dataplane, server.model_repository_extension, port)


def _wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200 and response.json().get("ready"):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready within {timeout:.0f}s")


@dataclass
class Servers:
    """What the host process serves: one predictor, through ours, the baseline and the floor, on one event loop."""

    clf: Any  # the ExportedModel both servers call
    ours: Any  # our serving.ErnieModel around `clf`
    loop: asyncio.AbstractEventLoop
    urls: dict[str, str]

    def on_loop_thread(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the servers' event loop thread (blocking the loop meanwhile)."""

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()

    def on_model_thread(self, fn: Callable[[], T]) -> T:
        """Run `fn` on our server's model thread, where its batches run (none are running now)."""
        return self.ours.batcher.run_on_model_thread(fn).result()


def _host_serving_config(args: argparse.Namespace) -> ServingConfig:
    settings: dict[str, object] = {"cpu_threads": args.cpu_threads}
    if args.max_batch_size is not None:
        settings["max_batch_size"] = args.max_batch_size
    if args.max_wait_ms is not None:
        settings["max_wait_ms"] = args.max_wait_ms
    return ServingConfig.model_validate(settings)


def _start_servers(args: argparse.Namespace) -> Servers:
    """Load the predictor once and serve it as ours, as the baseline and as the floor, once all are listening."""
    from steps.runtime.serving import model_server as serving
    from steps.runtime.serving import openmp
    from steps.runtime.weights.ernie import ExportedModel

    clf = ExportedModel(args.host_model, cpu_threads=args.cpu_threads, engine=args.engine, fall_back=False)
    cfg = _host_serving_config(args)
    ours = serving.ErnieModel(MODEL_NAME, cfg, model_dir=args.host_model, classifier_factory=lambda _d, _c: clf)
    ours.load()
    sock = serving.bind_socket("127.0.0.1", 0)
    started, floor_started = threading.Event(), threading.Event()
    ours_server = serving.uvicorn_server(serving.create_app([ours], cfg.max_request_bytes))
    base_port = free_port()
    base_server = _baseline_server(clf, base_port)
    floor_sock = serving.bind_socket("127.0.0.1", 0)
    floor_server = serving.uvicorn_server(bare_app(clf))
    loop_ready: list[asyncio.AbstractEventLoop] = []

    # Both servers on one event loop in one thread; the in-process batch-1 calls are handed to
    # that same thread, and the in-process batches to our model thread. So every batch-1 call,
    # whoever makes it, runs on one thread with one OpenMP team and its per-thread buffers, and
    # every batch of ours and of the in-process limit on another: the same predictor called
    # from two threads differed by more than the serving overhead being measured
    # (docs/benchmarks.md, serving item 10). (The plain kserve.Model runs its batches on the loop
    # thread, as kserve calls a synchronous predict.)
    async def both() -> None:
        # The in-process calls get what a process of their own would: Intel OpenMP's default
        # spin (200 ms). This process has more OpenMP threads than CPUs (the loop's team and
        # our model thread's), where the runtime would otherwise drop it to 0 on this thread.
        openmp.set_blocktime(OPENMP_DEFAULT_SPIN_MS)
        loop_ready.append(asyncio.get_running_loop())
        await asyncio.gather(
            serving.run_server(ours_server, sock, started.set),
            base_server.start(),
            serving.run_server(floor_server, floor_sock, floor_started.set),
        )

    def run_loop() -> None:
        with asyncio.Runner(loop_factory=ours_server.config.get_loop_factory()) as runner:
            runner.run(both())

    threading.Thread(target=run_loop, name="servers", daemon=True).start()
    # Ours is listening (with its model loaded) once `started` is set; kserve's server only
    # says so over HTTP.
    if not started.wait(120) or not floor_started.wait(120):
        raise RuntimeError("our server or the floor did not start within 120 s")
    urls = {
        "ours": f"http://127.0.0.1:{sock.getsockname()[1]}",
        "baseline": f"http://127.0.0.1:{base_port}",
        "floor": f"http://127.0.0.1:{floor_sock.getsockname()[1]}",
    }
    _wait_http(f"{urls['baseline']}/v1/models/{BASELINE_NAME}")
    return Servers(clf, ours, loop_ready[0], urls)


def _time_one(clf: Any, texts: list[str]) -> float:
    start = time.perf_counter()
    clf.predict(texts)
    return time.perf_counter() - start


def _throughput(clf: Any, texts: list[str], batch: int) -> dict:
    start = time.perf_counter()
    for i in range(0, len(texts) - batch + 1, batch):
        clf.predict(texts[i : i + batch])
    return {"done": (len(texts) // batch) * batch, "seconds": time.perf_counter() - start}


def _host_command(servers: Servers, command: dict) -> dict:
    """Run one command of the orchestrator's where its contender's calls run; the reply to send."""
    texts = command.get("texts", [])
    try:
        if command["op"] == "time":
            return {"seconds": servers.on_loop_thread(partial(_time_one, servers.clf, texts))}
        if command["op"] == "throughput":
            return servers.on_model_thread(partial(_throughput, servers.clf, texts, command["batch"]))
        if command["op"] == "predict":
            servers.on_loop_thread(partial(servers.clf.predict, texts))
            return {}
        return {"error": f"unknown command {command['op']!r}"}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_host(args: argparse.Namespace) -> int:
    """Load the predictor once; serve it as ours and as the baseline; run in-process commands."""
    reply = os.fdopen(args.reply_fd, "w", encoding="utf-8")

    def answer(obj: dict) -> None:
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    # kserve parses sys.argv when imported (parse_known_args at module level): hand it none of ours. (So kserve,
    # our server and Paddle are imported in the functions this calls, after this line.)
    sys.argv = sys.argv[:1]
    try:
        servers = _start_servers(args)
    except Exception as exc:  # noqa: BLE001 — the orchestrator reports it with this log's tail
        answer({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    answer(servers.urls)
    for line in sys.stdin:
        answer(_host_command(servers, json.loads(line)))
    return 0
