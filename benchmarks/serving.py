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

# The run is put together here; its pieces are modules of their own: benchmarks/workload.py (the model and the
# texts), serving_host.py (the host process and its handle), serving_contenders.py (what the measurements call),
# serving_measure.py (the interleaved measurements) and serving_report.py (the printed lines and the JSON).
import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from benchmarks.serving_contenders import HttpContender, InProcess, Result
from benchmarks.serving_host import BASELINE_NAME, MODEL_NAME, Host, run_host
from benchmarks.serving_measure import batch_rates, measure_latency, measure_throughput, warm_up
from benchmarks.serving_report import report
from benchmarks.workload import MEDIUM, TINY, Shape, export_model, make_texts


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
