"""Serving benchmark: our model server against in-process Paddle Inference and a plain kserve.Model.

On one ERNIE 3.0-medium-sized classifier (hidden 768, 6 layers, 12 heads, intermediate 3072,
vocabulary 40 000, random weights) at sequence length 64 it measures, in one run:

  (a) batch-1 latency (p50/p99): one client, keep-alive, one text per request, against
      `ExportedModel.predict([text])` called in-process      -> `latency ratio`
  (b) throughput of 16 concurrent keep-alive clients, against the in-process predictor's best
      batched throughput over batch sizes 1..32 (the machine's limit) -> `throughput ratio`
  (c) both figures for the plain one-request-one-inference `kserve.Model` a user would write.
  (d) batch-1 latency of the floor: a bare ASGI app around the same predictor under the same uvicorn (read the
      body, call the model, write the answer)                 -> `latency ratio against the floor`

All of them use ONE loaded predictor: a host process loads the model once and serves it through our
server, the plain kserve.Model and the bare app (all on one event loop in one thread, each on its own
127.0.0.1 socket); the in-process batch-1 calls are handed to that same thread, so every batch-1
call runs on one thread, and the in-process batches run on our server's model thread, where its
batches run. This process only sends commands and HTTP requests. Separate processes loading the
same model run it at different speeds, and so do two threads of one process calling one predictor,
for the life of the process (docs/benchmarks.md, "Why one host" and serving item 10); either would
swamp a serving overhead of a few per cent. Sharing the predictor and the thread leaves only the
serving path to measure.

On a shared machine the speed of every contender dips for a few seconds at a time (other guests;
docs/benchmarks.md gives the size of the dips), so the contenders are interleaved as finely as each
measurement allows: batch-1 latency one request at a time, each contender in turn, so that a dip falls
on all three alike; throughput in many short rounds whose order rotates, with a pause before each round for the
previous contender's OpenMP threads to stop spinning. Each contender's texts/s is the median of its
rounds, and the throughput ratio is the median over the rotations of its round's texts/s over the
in-process round's in the same rotation (a rotation caught in a dip is an outlier, not half the
sample). All traffic goes to 127.0.0.1; every process started here is stopped before the script
exits.

    python -m benchmarks.serving                  # the full benchmark (~8 minutes on 2 cores)
    python -m benchmarks.serving --quick          # a smoke run on a tiny model
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import logging
import os
import random
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx

from benchmarks import load
from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from paddle_mlops.config.serving import ServingConfig
from steps.runtime.processes import stop_group

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
MODEL_NAME = "ernie-bench"
BASELINE_NAME = "plain-ernie"
# CJK ranges that ErnieTokenizer splits into one token per character.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF))


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    seq_len: int

    def describe(self) -> str:
        return (
            f"hidden {self.hidden}, {self.layers} layers, {self.heads} heads, intermediate {self.intermediate}, "
            f"vocab {self.vocab}, seq {self.seq_len}"
        )


MEDIUM = Shape(hidden=768, layers=6, heads=12, intermediate=3072, vocab=40_000, seq_len=64)
TINY = Shape(hidden=32, layers=1, heads=2, intermediate=64, vocab=2_000, seq_len=64)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("serving", __doc__)
    parser.add_argument(
        "--requests", type=int, default=None, help="batch-1 requests per contender (default 320; 24 with --quick)"
    )
    parser.add_argument("--rounds", type=int, default=80, help="interleaved throughput rounds (default 80)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients for throughput (default 16)")
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="Paddle math threads for every contender (default: the CPU count, at most 4)",
    )
    parser.add_argument("--max-batch-size", type=int, default=None, help="our server's serving.max_batch_size")
    parser.add_argument("--max-wait-ms", type=float, default=None, help="our server's serving.max_wait_ms")
    parser.add_argument(
        "--engine", default=None, help="the engine variant every contender runs (default paddle-fp32; its files must "
        "be beside the export: benchmarks.engines builds them)",
    )  # fmt: skip
    # Internal: the host process that loads the model and serves it.
    parser.add_argument("--host-model", metavar="MODEL_DIR", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--reply-fd", type=int, default=None, help=argparse.SUPPRESS)
    args = parse_benchmark_args(parser, argv, quick_help="smoke run: tiny model, few requests")
    if args.requests is None:
        args.requests = 24 if args.quick else 320
    if args.cpu_threads is None:
        args.cpu_threads = max(1, min(4, os.cpu_count() or 1))
    if args.requests < 2 or args.rounds < 1 or args.clients < 1:
        parser.error("--requests must be at least 2, and --rounds and --clients at least 1")
    return args


# --------------------------------------------------------------------------- model and texts


def cjk_chars(n: int) -> list[str]:
    chars: list[str] = []
    for lo, hi in CJK_RANGES:
        chars.extend(chr(cp) for cp in range(lo, min(hi + 1, lo + n - len(chars))))
        if len(chars) >= n:
            break
    return chars


def export_model(shape: Shape, directory: Path) -> Path:
    """A random-weight ERNIE classifier of `shape`, exported the way the train step exports."""
    import paddle

    from paddle_mlops.config.inputs import ModelConfig
    from steps.runtime import data, ernie

    directory.mkdir(parents=True, exist_ok=True)
    vocab_file = directory.parent / "vocab.txt"
    tokens = [*data.SPECIAL_TOKENS, *cjk_chars(shape.vocab - len(data.SPECIAL_TOKENS))]
    vocab_file.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    cfg = ModelConfig(
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_seq_len=shape.seq_len,
        dropout=0.0,
    )
    paddle.seed(0)
    tokenizer = ernie.load_tokenizer(vocab_file)
    model = ernie.build_model(cfg, len(tokenizer.vocab), 2, tokenizer.pad_token_id)
    return ernie.export(model, tokenizer, {0: "negative", 1: "positive"}, cfg, directory)


def make_texts(n: int, length: int, seed: int = 0) -> list[str]:
    """Texts of `length` common CJK characters: `length` + [CLS] + [SEP] tokens."""
    rng = random.Random(seed)
    pool = cjk_chars(3000)
    return ["".join(rng.choices(pool, k=length)) for _ in range(n)]


# --------------------------------------------------------------------------- contenders


@dataclass
class Result:
    name: str
    latencies: list[float] = field(default_factory=list)  # seconds, batch 1
    texts: int = 0
    seconds: float = 0.0
    note: str = ""
    per_round: list[float] = field(default_factory=list)  # texts/s in each throughput round

    def add_round(self, done: int, seconds: float) -> None:
        self.texts += done
        self.seconds += seconds
        self.per_round.append(done / seconds)

    def pct(self, q: float) -> float:
        return (
            statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]
            if len(self.latencies) > 1
            else self.latencies[0]
        )

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def throughput(self) -> float:
        """Texts/s: the median round (a round caught in one of the machine's slow spells is an outlier)."""
        return statistics.median(self.per_round) if self.per_round else 0.0

    @property
    def total_throughput(self) -> float:
        """Texts/s over all rounds together."""
        return self.texts / self.seconds if self.seconds else 0.0

    def paired_ratio(self, other: Result) -> float:
        """Median over the rotations of this contender's round / `other`'s round in the same rotation.

        The rounds of one rotation run within a few seconds of each other, so each pair shares the
        machine's state; a ratio of the two medians instead compares two samples of a machine that
        switches between a fast and a slow state, and each median lands in either.
        """
        return statistics.median(mine / theirs for mine, theirs in zip(self.per_round, other.per_round, strict=True))


class InProcess:
    """The in-process contender: the host process calls its predictor directly, and times itself."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def open(self, text: str) -> None:
        self.time_one(text)

    def time_one(self, text: str) -> float:
        return self.host.call(op="time", texts=[text])["seconds"]

    def throughput(self, texts: Sequence[str], batch: int) -> tuple[int, float]:
        """`texts` in batches of `batch`, back to back, on our server's model thread."""
        reply = self.host.call(op="throughput", texts=list(texts), batch=batch)
        return reply["done"], reply["seconds"]

    def predict_many(self, texts: Sequence[str]) -> None:
        self.host.call(op="predict", texts=list(texts))


class HttpContender:
    """A load generator that costs the shared CPUs as little as possible.

    Batch-1 latency uses one keep-alive `http.client` connection (its CPU cost per request is in
    docs/benchmarks.md); throughput uses benchmarks/load.py's closed loop (one keep-alive asyncio
    connection per concurrent client, requests encoded before the clock starts, answers parsed by
    httptools), and `throughput_aiohttp` the same loop with aiohttp, the client evaluate's selection uses
    (steps/runtime/serving/loopback.py), which costs the shared CPUs more per request. All send the body
    in one write with the headers.
    """

    def __init__(self, url: str, model_name: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.path = f"/v1/models/{model_name}:predict"
        self.url = f"{url}{self.path}"
        self.ready_url = f"{url}/v1/models/{model_name}"
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def close(self) -> None:
        self.conn.close()

    @staticmethod
    def body(text: str) -> bytes:
        return json.dumps({"instances": [text]}, ensure_ascii=False).encode()

    def _post(self, text: str) -> None:
        self._send(self.body(text))

    def _send(self, body: bytes) -> None:
        self.conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"{self.url} answered {response.status}: {payload[:200]!r}")

    def predict_many(self, texts: Sequence[str]) -> None:
        """One request with all `texts` as instances: one model call of that batch size."""
        self.conn.close()
        self._send(json.dumps({"instances": list(texts)}, ensure_ascii=False).encode())

    def open(self, text: str) -> None:
        """A fresh keep-alive connection (servers close idle ones after a few seconds), opened by one untimed
        request."""
        self.conn.close()
        self._post(text)

    def time_one(self, text: str) -> float:
        start, end = self.stamped(text)
        return end - start

    def stamped(self, text: str) -> tuple[float, float]:
        """One request with `text`: `time.perf_counter()` when it was sent and when its whole answer was read."""
        start = time.perf_counter()
        self._post(text)
        return start, time.perf_counter()

    def throughput(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
        """`texts`, one per request, from `clients` closed-loop keep-alive clients: (answered, seconds)."""
        requests = [load.post_request(self.host, self.port, self.path, self.body(text)) for text in texts]
        ready = load.get_request(self.host, self.port, urllib.parse.urlsplit(self.ready_url).path)
        return load.run_closed_loop(self.host, self.port, requests, clients, ready)

    def throughput_aiohttp(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
        """`throughput` with aiohttp clients."""
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self._concurrent(texts, clients))

    async def _concurrent(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
        import aiohttp

        pending = iter(texts)
        headers = {"Content-Type": "application/json"}
        connector = aiohttp.TCPConnector(limit=clients, force_close=False)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

            async def post(text: str) -> None:
                async with session.post(self.url, data=self.body(text), headers=headers) as response:
                    payload = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{self.url} answered {response.status}: {payload[:200]!r}")

            async def worker() -> int:
                sent = 0
                for text in pending:
                    await post(text)
                    sent += 1
                return sent

            # Open every connection first (with the model's readiness check, no inference), so
            # connection set-up is not part of the measurement.
            async def ready() -> None:
                async with session.get(self.ready_url) as response:
                    await response.read()

            await asyncio.gather(*(ready() for _ in range(clients)))
            start = time.perf_counter()
            counts = await asyncio.gather(*(worker() for _ in range(clients)))
            return sum(counts), time.perf_counter() - start


# --------------------------------------------------------------------------- the host process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env() -> dict[str, str]:
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
                env=_env(),
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
    import orjson

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
    from steps.runtime import openmp, serving
    from steps.runtime.ernie import ExportedModel

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

    # kserve parses sys.argv when imported (parse_known_args at module level): hand it none of ours.
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


# --------------------------------------------------------------------------- measuring


def batch_rates(inproc: InProcess, texts: list[str], quick: bool) -> dict[int, float]:
    """Texts/s of the in-process predictor for each batch size, one quick sweep."""
    sizes = (1, 2, 4, 8, 16, 32)
    rates = {}
    for size in sizes:
        inproc.throughput(texts[:size], size)  # a first run per shape pays one-off set-up costs
        n = size * (1 if quick else max(2, 64 // size))
        done, seconds = inproc.throughput(texts[:n], size)
        rates[size] = done / seconds
    return rates


OPENMP_DEFAULT_SPIN_MS = 200  # Intel OpenMP's KMP_BLOCKTIME default
SETTLE_S = 0.25  # > Intel OpenMP's 200 ms spin after a parallel region (KMP_BLOCKTIME)


def settle() -> None:
    """Let the previous contender's OpenMP threads stop spinning before the next one is timed."""
    time.sleep(SETTLE_S)


def batch_sizes(url: str) -> dict[int, int]:
    """How many model calls of each size our server has made so far, from its `/metrics`."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        if family.name == "paddle_mlops_serving_batch_size":
            buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))
    # cumulative buckets (1, 2, 4, ... 16, ...) -> calls with size in (previous bound, bound]
    out, below = {}, 0.0
    for bound, cumulative in buckets:
        if bound != float("inf"):
            out[int(bound)] = int(cumulative - below)
            below = cumulative
    return out


def rotated(items: Sequence[T], r: int) -> list[T]:
    k = r % len(items)
    return [*items[k:], *items[:k]]


def warm_up(
    inproc: InProcess, ours: HttpContender, base: HttpContender, floor: HttpContender, texts: list[str], clients: int
) -> None:
    """The first runs of every batch shape on every calling thread allocate and pick kernels
    (oneDNN caches are per thread). Our server sees batches of up to `clients` texts here; every
    contender runs one such batch too, so all carry the same history into the batch-1 timings."""
    for contender in (inproc, ours, base, floor):
        contender.open(texts[0])
        for text in texts[1:4]:
            contender.time_one(text)
    for contender in (ours, base):
        contender.throughput(texts[: 2 * clients], clients)
    for contender in (inproc, ours, base):
        contender.predict_many(texts[:clients])


def measure_latency(
    contenders: Sequence[tuple[str, Any]], results: dict[str, Result], texts: list[str], requests: int
) -> None:
    """Batch-1 latency one request at a time, each contender in turn (the order rotating), so that
    the machine's slow spells (seconds long on a shared host) fall on all of them alike. Every call
    runs on the host's one loop thread with its OpenMP team still spinning from the call before,
    whichever contender made it: the steady state of back-to-back requests."""
    for _, contender in contenders:
        contender.open(texts[0])
    for i in range(requests):
        text = texts[i % len(texts)]
        for name, contender in rotated(contenders, i):
            results[name].latencies.append(contender.time_one(text))


def throughput_rounds(
    args: argparse.Namespace,
    measured: Sequence[tuple[Result, Callable[[list[str]], tuple[int, float]]]],
    round_texts: Callable[[int], list[str]],
    servers: tuple[HttpContender, HttpContender],
    ours_url: str,
) -> dict[int, int]:
    """`args.rounds` rotations of one round per contender; our server's model calls by size meanwhile."""
    # One untimed round for each server first: after the batch-1 requests and the in-process
    # sweep, our batcher expects lone clients, and the first wave of 16 is split (its first
    # request runs alone, then the few already parsed, then the rest): a transition worth two
    # model calls that the steady state under 16 clients does not have.
    for contender in servers:
        contender.throughput(round_texts(0), args.clients)
    batches_before = batch_sizes(ours_url)
    for r in range(args.rounds):
        chunk = round_texts(r)
        for result, run in rotated(measured, r):
            settle()
            result.add_round(*run(chunk))
    return {size: n - batches_before.get(size, 0) for size, n in batch_sizes(ours_url).items()}


def measure_throughput(
    args: argparse.Namespace,
    texts: list[str],
    rates: dict[int, float],
    contenders: tuple[InProcess, HttpContender, HttpContender],
    results: dict[str, Result],
    ours_url: str,
) -> None:
    """Fill `results` with every contender's throughput rounds; in-process: the machine's limit."""
    inproc, ours, base = contenders
    # The machine's limit: the in-process predictor at the fastest batch size of the sweep and at
    # the batch our server forms under `clients` clients, each measured in the same rotating
    # rounds as the servers; the better of them is the denominator. (One sweep alone is too
    # noisy to pick a single size: its fastest size is often not the fastest a minute later.)
    server_batch = min(args.clients, args.max_batch_size or ServingConfig().max_batch_size)
    sizes = sorted({max(rates, key=rates.__getitem__), server_batch})
    limit = {size: Result(f"in-process@{size}") for size in sizes}
    # Short rounds (two waves of `clients` requests), many of them: a slow spell of the machine
    # spoils one round of one contender, and the median round leaves it out.
    tp_round = max(2 * args.clients, max(sizes))
    measured: list[tuple[Result, Callable[[list[str]], tuple[int, float]]]] = [
        *((limit[size], lambda c, size=size: inproc.throughput(c, size)) for size in sizes),
        (results["ours"], lambda c: ours.throughput(c, args.clients)),
        (results["ours-aiohttp"], lambda c: ours.throughput_aiohttp(c, args.clients)),
        (results["baseline"], lambda c: base.throughput(c, args.clients)),
    ]

    def round_texts(r: int) -> list[str]:
        return [texts[(r * tp_round + i) % len(texts)] for i in range(tp_round)]

    ours_batches = throughput_rounds(args, measured, round_texts, (ours, base), ours_url)
    # Each round is tp_round / clients waves (two rounds per rotation: either client); a wave that is not
    # gathered into one batch shows here.
    results["ours"].note = (
        f"{args.clients} clients; {sum(ours_batches.values())} model calls for "
        f"{2 * args.rounds * tp_round // args.clients} waves of either client; sizes "
        + ", ".join(f"<={size}: {n}" for size, n in sorted(ours_batches.items()) if n)
    )
    results["ours-aiohttp"].note = f"{args.clients} aiohttp clients"
    best = max(sizes, key=lambda size: limit[size].throughput)
    # The batch our server forms under `clients` clients, on its own (#32: the throughput target is against it).
    results["in-process@batch"] = replace(limit[server_batch], name=f"in-process@{server_batch}")
    results["in-process"] = replace(
        limit[best],
        name="in-process",
        latencies=results["in-process"].latencies,
        note=f"batch {best}"
        + (" of " + ", ".join(f"{s}: {limit[s].throughput:.1f}" for s in sizes) if len(sizes) > 1 else ""),
    )


def measure(args: argparse.Namespace, shape: Shape, work: Path, model_dir: Path | None = None) -> dict:
    """Every measurement on `shape`'s model (exported here unless `model_dir` holds it already)."""
    if model_dir is None:
        started = time.perf_counter()
        model_dir = export_model(shape, work / "model")
        print(f"exported {shape.describe()} in {time.perf_counter() - started:.0f}s", flush=True)
    texts = make_texts(max(args.requests, 64), shape.seq_len - 2)
    with ExitStack() as stack:
        host = Host(stack, model_dir, work, args)
        urls = host.ready()
        inproc = InProcess(host)
        ours, base = HttpContender(urls["ours"], MODEL_NAME), HttpContender(urls["baseline"], BASELINE_NAME)
        floor = HttpContender(urls["floor"], MODEL_NAME)
        for contender in (ours, base, floor):
            stack.callback(contender.close)
        results = {name: Result(name) for name in ("in-process", "ours", "ours-aiohttp", "baseline", "floor")}
        warm_up(inproc, ours, base, floor, texts, args.clients)
        latency = (("in-process", inproc), ("ours", ours), ("baseline", base), ("floor", floor))
        measure_latency(latency, results, texts, args.requests)
        rates = batch_rates(inproc, texts, args.quick)
        print("in-process texts/s by batch size: " + ", ".join(f"{b}: {v:.1f}" for b, v in rates.items()), flush=True)
        measure_throughput(args, texts, rates, (inproc, ours, base), results, urls["ours"])

    return report(args, shape, results, rates)


def report(args: argparse.Namespace, shape: Shape, results: dict[str, Result], rates: dict[int, float]) -> dict:
    inproc, ours, base, floor = results["in-process"], results["ours"], results["baseline"], results["floor"]
    at_batch, ours_aiohttp = results["in-process@batch"], results["ours-aiohttp"]
    print(
        f"model: {shape.describe()}; engine {args.engine or 'paddle-fp32'}; cpu_threads {args.cpu_threads}; "
        f"{os.cpu_count()} CPUs; {args.requests} requests x {args.rounds} rounds; {args.clients} clients"
    )
    for r in (inproc, ours, base):
        extra = f" ({r.note})" if r.note else f" ({args.clients} clients)"
        print(
            f"  {r.name:<12} batch-1 p50 {r.p50 * 1e3:7.2f} ms  p99 {r.pct(99) * 1e3:7.2f} ms  "
            f"throughput {r.throughput:7.2f} texts/s (all rounds together {r.total_throughput:6.2f}){extra}"
        )
    print(
        f"  {ours_aiohttp.name:<12} throughput {ours_aiohttp.throughput:7.2f} texts/s (all rounds together "
        f"{ours_aiohttp.total_throughput:6.2f}) ({ours_aiohttp.note})"
    )
    print(
        f"  {floor.name:<12} batch-1 p50 {floor.p50 * 1e3:7.2f} ms  p99 {floor.pct(99) * 1e3:7.2f} ms  "
        "(the bare ASGI app around the same predictor under the same uvicorn)"
    )
    figures = {
        "floor_latency_ratio": ours.p50 / floor.p50,
        "floor_over_in_process_latency": floor.p50 / inproc.p50,
        "batch_throughput_ratio": ours.paired_ratio(at_batch),
        "aiohttp_batch_throughput_ratio": ours_aiohttp.paired_ratio(at_batch),
        "latency_ratio": ours.p50 / inproc.p50,
        "throughput_ratio": ours.paired_ratio(inproc),
        "baseline_latency_ratio": base.p50 / inproc.p50,
        "baseline_throughput_ratio": base.paired_ratio(inproc),
        "median_round_throughput_ratio": ours.throughput / inproc.throughput,
        "baseline_median_round_throughput_ratio": base.throughput / inproc.throughput,
        "total_throughput_ratio": ours.total_throughput / inproc.total_throughput,
        "baseline_total_throughput_ratio": base.total_throughput / inproc.total_throughput,
    }
    print(
        f"latency ratio: {figures['latency_ratio']:.3f}  (target <= 1.05; baseline "
        f"{figures['baseline_latency_ratio']:.3f})"
    )
    print(
        f"throughput ratio: {figures['throughput_ratio']:.3f}  (target >= 0.95; baseline "
        f"{figures['baseline_throughput_ratio']:.3f}; median over {args.rounds} rotations of round / in-process round)"
    )
    print(
        f"throughput ratio of the median rounds: {figures['median_round_throughput_ratio']:.3f}  "
        f"(baseline {figures['baseline_median_round_throughput_ratio']:.3f})"
    )
    print(
        f"throughput ratio of all rounds together: {figures['total_throughput_ratio']:.3f}  "
        f"(baseline {figures['baseline_total_throughput_ratio']:.3f})"
    )
    print(
        f"latency ratio against the floor: {figures['floor_latency_ratio']:.3f}  (target <= 1.02; floor / in-process "
        f"{figures['floor_over_in_process_latency']:.3f})"
    )
    print(
        f"throughput ratio against {at_batch.name}: {figures['batch_throughput_ratio']:.3f}  "
        "(target >= 0.95; the largest batch the clients form)"
    )
    print(
        f"the same with aiohttp clients: {figures['aiohttp_batch_throughput_ratio']:.3f}  "
        "(a client that costs the shared CPUs more per request)"
    )
    print(f"baseline latency ratio: {figures['baseline_latency_ratio']:.3f}")
    print(f"baseline throughput ratio: {figures['baseline_throughput_ratio']:.3f}")
    return {
        "model": shape.__dict__,
        "engine": args.engine or "paddle-fp32",
        "cpu_threads": args.cpu_threads,
        "cpus": os.cpu_count(),
        "requests": args.requests,
        "clients": args.clients,
        "in_process_by_batch": rates,
        "contenders": {
            r.name: {
                "p50_ms": r.p50 * 1e3,
                "p99_ms": r.pct(99) * 1e3,
                "texts_per_s": r.throughput,
                "all_rounds_texts_per_s": r.total_throughput,
                "note": r.note,
                "texts_per_s_by_round": r.per_round,
            }
            for r in (inproc, ours, base)
        }
        | {
            ours_aiohttp.name: {
                "texts_per_s": ours_aiohttp.throughput,
                "all_rounds_texts_per_s": ours_aiohttp.total_throughput,
                "note": ours_aiohttp.note,
                "texts_per_s_by_round": ours_aiohttp.per_round,
            }
        }
        | {floor.name: {"p50_ms": floor.p50 * 1e3, "p99_ms": floor.pct(99) * 1e3}},
        **figures,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    # paddlenlp configures the root logger at INFO; httpx would then log every request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.host_model:
        return run_host(args)
    shape = TINY if args.quick else MEDIUM
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        try:
            results = measure(args, shape, Path(tmp))
        except RuntimeError as exc:
            print(f"[benchmarks.serving] error: {exc}", file=sys.stderr)
            return 1
    write_results(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
