"""Where a served batch-1 request's time goes, stage by stage, against the least any Python ASGI server can do.

benchmarks/serving.py compares batch-1 HTTP latency with the same predictor called in process; this script
takes the difference apart. A host process loads the model once and serves it on one event loop thread
twice: through our app (`serving.create_app`: guard, V1 fast path, batcher, kserve's stage timers), and
through a bare ASGI app that only reads the JSON body, calls the model and writes the JSON answer (the
floor: uvicorn, httptools and uvloop as our server runs them, nothing else). One `http.client` keep-alive
client sends one-text requests, alternating between the two. Both processes stamp one clock
(`time.perf_counter`, CLOCK_MONOTONIC on Linux): the client's send, the ASGI entry (uvicorn has parsed the
request), the model call's start and end, the response body handed to uvicorn, the client's whole answer.

Printed per server: each stage's median, the round trip's, and the median per-request ratio of round trip to
model call (`batch-1 p50 served / in-process` of benchmarks/serving.py, without that benchmark's in-process
timing conditions). On a CPU whose caches the model call has just swept, every stage runs cold.

    python -m benchmarks.serving_path                                            # medium export, paddle-fp32
    python -m benchmarks.serving_path --engine openvino-int8                     # builds the variants first
    python -m benchmarks.serving_path --model-dir DIR --engine openvino-int8     # an export with variants
    python -m benchmarks.serving_path --quick                                    # tiny model, smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from benchmarks.engines import calibration_batches
from benchmarks.serving_contenders import HttpContender
from benchmarks.serving_host import MODEL_NAME, ROOT, bare_app, child_env
from benchmarks.serving_measure import rotated
from benchmarks.workload import MEDIUM, TINY, export_model, make_texts
from paddle_mlops_core.config.serving import ServingConfig
from steps.runtime.serving.engines.variants import build_variants
from steps.runtime.serving.processes import stop_group

SERVERS = ("ours", "floor")
STAMPS_PATH = "/__stamps"
# (name, from, to): the stages of one request, between the stamps of the client (send, recv) and the host.
STAGES = (
    ("client -> ASGI entry", "send", "entry"),
    ("app before the model", "entry", "model0"),
    ("model call", "model0", "model1"),
    ("app after the model", "model1", "body"),
    ("body -> client has it", "body", "recv"),
    ("round trip", "send", "recv"),
)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("serving_path", __doc__)
    parser.add_argument("--requests", type=int, default=None, help="timed requests per server (default 400)")
    parser.add_argument("--engine", default="paddle-fp32", help="the engine variant both servers run")
    parser.add_argument("--cpu-threads", type=int, default=None, help="the engine's threads (default: CPUs, max 4)")
    parser.add_argument("--model-dir", default=None, help="an export to serve (default: export one here)")
    parser.add_argument("--host", metavar="MODEL_DIR", default=None, help=argparse.SUPPRESS)  # internal
    args = parse_benchmark_args(parser, argv, quick_help="smoke run: tiny model, few requests")
    if args.requests is None:
        args.requests = 20 if args.quick else 400
    if args.cpu_threads is None:
        args.cpu_threads = max(1, min(4, os.cpu_count() or 1))
    if args.requests < 2 or args.cpu_threads < 1:
        parser.error("--requests must be at least 2 and --cpu-threads at least 1")
    return args


# --------------------------------------------------------------------------- the host process


class StampedPredictor:
    """The loaded predictor, stamping each call's start and end into the request being served."""

    def __init__(self, clf: Any, current: list[dict[str, float]]) -> None:
        self._clf = clf
        self._current = current

    def predict(self, instances: list[Any]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        results = self._clf.predict(instances)
        self._current[-1].update(model0=start, model1=time.perf_counter())
        return results

    def __getattr__(self, name: str) -> Any:  # task_type, labels, engine_name, ... of the real one
        return getattr(self._clf, name)


def stamped(app: Any, records: list[dict[str, float]], current: list[dict[str, float]], every: dict) -> Any:
    """`app` with each POST's ASGI entry and body hand-over stamped into a record of `records`."""

    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == STAMPS_PATH:  # hand the records over, and start afresh
            answer = orjson.dumps(every)
            for kept in every.values():
                kept.clear()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": answer})
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        record = {"entry": time.perf_counter()}
        records.append(record)
        current[:] = [record]

        async def send_stamped(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                record["body"] = time.perf_counter()
            await send(message)

        await app(scope, receive, send_stamped)

    return wrapper


def run_host(args: argparse.Namespace) -> int:
    """Serve one predictor through our app and the bare one on one loop; print their ports, serve until killed."""
    # Our server (kserve) and the predictor (Paddle) take seconds to import; only the host process needs them.
    from steps.runtime.serving import model_server as serving
    from steps.runtime.weights.ernie import ExportedModel

    current: list[dict[str, float]] = []
    clf = StampedPredictor(
        ExportedModel(args.host, cpu_threads=args.cpu_threads, engine=args.engine, fall_back=False), current
    )
    cfg = ServingConfig.model_validate({"cpu_threads": args.cpu_threads})
    ours = serving.ErnieModel(MODEL_NAME, cfg, model_dir=args.host, classifier_factory=lambda _d, _c: clf)
    ours.load()
    every: dict[str, list[dict[str, float]]] = {name: [] for name in SERVERS}
    apps = {
        "ours": stamped(serving.create_app([ours], cfg.max_request_bytes), every["ours"], current, every),
        "floor": stamped(bare_app(clf), every["floor"], current, every),
    }
    sockets = {name: serving.bind_socket("127.0.0.1", 0) for name in SERVERS}
    servers = {name: serving.uvicorn_server(app) for name, app in apps.items()}

    async def both() -> None:
        waiting = [asyncio.Event() for _ in SERVERS]
        tasks = [
            asyncio.create_task(serving.run_server(servers[name], sockets[name], event.set))
            for name, event in zip(SERVERS, waiting, strict=True)
        ]
        for event in waiting:
            await event.wait()
        print(json.dumps({name: sock.getsockname()[1] for name, sock in sockets.items()}), flush=True)
        await asyncio.gather(*tasks)

    with asyncio.Runner(loop_factory=servers["ours"].config.get_loop_factory()) as runner:
        runner.run(both())
    return 0


# --------------------------------------------------------------------------- the client


def _stamps(contender: HttpContender) -> dict[str, list[dict[str, float]]]:
    """The host's records so far (and it starts afresh)."""
    contender.conn.request("GET", STAMPS_PATH)
    return json.loads(contender.conn.getresponse().read())


def measure(args: argparse.Namespace, model_dir: Path, work: Path) -> dict[str, Any]:
    texts = make_texts(max(args.requests, 64), (TINY if args.quick else MEDIUM).seq_len - 2)
    cmd = [sys.executable, "-m", "benchmarks.serving_path", "--host", str(model_dir), "--engine", args.engine]
    cmd += ["--cpu-threads", str(args.cpu_threads)]
    with ExitStack() as stack, open(work / "host.log", "wb") as log:
        host = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=log, process_group=0)
        stack.callback(stop_group, host, 15)
        assert host.stdout is not None
        line = host.stdout.readline()
        if not line:
            raise RuntimeError(f"the host exited:\n{(work / 'host.log').read_text(errors='replace')[-2000:]}")
        contenders = {
            name: HttpContender(f"http://127.0.0.1:{port}", MODEL_NAME) for name, port in json.loads(line).items()
        }
        for contender in contenders.values():
            stack.callback(contender.close)
        for text in texts[:10]:  # warm-up, then the host's records start afresh
            for contender in contenders.values():
                contender.stamped(text)
        _stamps(contenders["ours"])
        client: dict[str, list[tuple[float, float]]] = {name: [] for name in SERVERS}
        for i in range(args.requests):
            for name in rotated(SERVERS, i):
                client[name].append(contenders[name].stamped(texts[i % len(texts)]))
        host_records = _stamps(contenders["ours"])
    return {name: _stages(client[name], host_records[name]) for name in SERVERS}


def _stages(client: list[tuple[float, float]], host: list[dict[str, float]]) -> dict[str, Any]:
    if len(client) != len(host):
        raise RuntimeError(f"{len(client)} requests sent, {len(host)} served")
    records = [dict(record, send=sent, recv=received) for (sent, received), record in zip(client, host, strict=True)]
    stages = {name: statistics.median(r[end] - r[start] for r in records) * 1e6 for name, start, end in STAGES}
    ratio = statistics.median((r["recv"] - r["send"]) / (r["model1"] - r["model0"]) for r in records)
    return {"stages_us": stages, "overhead_us": stages["round trip"] - stages["model call"], "ratio": ratio}


def report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    print(f"engine {args.engine}; {args.cpu_threads} threads; {os.cpu_count()} CPUs; {args.requests} requests each")
    print(f"  {'stage (median, us)':<24}" + "".join(f"{name:>10}" for name in SERVERS))
    for name, _, _ in STAGES:
        print(f"  {name:<24}" + "".join(f"{results[s]['stages_us'][name]:10.0f}" for s in SERVERS))
    for name in SERVERS:
        print(
            f"{name}: round trip - model call {results[name]['overhead_us']:.0f} us; "
            f"round trip / model call: {results[name]['ratio']:.3f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.host:
        return run_host(args)
    with tempfile.TemporaryDirectory(prefix="bench-serving-path-") as tmp:
        work = Path(tmp)
        try:
            model_dir = Path(args.model_dir) if args.model_dir else _export(args, work)
            results = measure(args, model_dir, work)
        except RuntimeError as exc:
            print(f"[benchmarks.serving_path] error: {exc}", file=sys.stderr)
            return 1
    report(args, results)
    write_results(args.json_out, {"engine": args.engine, "cpu_threads": args.cpu_threads, **results})
    return 0


def _export(args: argparse.Namespace, work: Path) -> Path:
    """The benchmark's model, exported here; with its engine variants when a converted one is asked for."""
    shape = TINY if args.quick else MEDIUM
    model_dir = export_model(shape, work / "model")
    if args.engine != "paddle-fp32":
        build_variants(model_dir, calibration=calibration_batches(model_dir, shape))
    return model_dir


if __name__ == "__main__":
    sys.exit(main())
