"""Serving benchmark: our model server against in-process Paddle Inference and a plain kserve.Model.

On one ERNIE 3.0-medium-sized classifier (hidden 768, 6 layers, 12 heads, intermediate 3072,
vocabulary 40 000, random weights) at sequence length 64 it measures, in one run:

  (a) batch-1 latency (p50/p99): one client, keep-alive, one text per request, against
      `ExportedClassifier.predict([text])` called in-process      -> `latency ratio`
  (b) throughput of 16 concurrent keep-alive clients, against the in-process predictor's best
      batched throughput over batch sizes 1..32 (the machine's limit) -> `throughput ratio`
  (c) both figures for the plain one-request-one-inference `kserve.Model` a user would write.

The contenders are measured in interleaved blocks whose order rotates, with a pause before each
block for the previous contender's OpenMP threads to stop spinning, so a change in background
load hits all of them alike and the ratios stay meaningful on a shared machine. All traffic goes to 127.0.0.1;
every process started here is stopped before the script exits.

    python -m benchmarks.serving                  # the full benchmark (~3-5 minutes on 2 cores)
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
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per contender for latency and for throughput (default 240; 24 with --quick)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved measuring rounds (default 4)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients for throughput (default 16)")
    parser.add_argument("--cpu-threads", type=int, default=None,
                        help="Paddle math threads for every contender (default: the CPU count, at most 4)")
    parser.add_argument("--max-batch-size", type=int, default=None, help="our server's serving.max_batch_size")
    parser.add_argument("--max-wait-ms", type=float, default=None, help="our server's serving.max_wait_ms")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny model, few requests")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results to this JSON file")
    # Internal: the subprocess that serves the baseline.
    parser.add_argument("--kserve-baseline", metavar="MODEL_DIR", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--grpc-port", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.requests is None:
        args.requests = 24 if args.quick else 240
    if args.cpu_threads is None:
        args.cpu_threads = max(1, min(4, os.cpu_count() or 1))
    if args.requests < args.rounds or args.rounds < 1 or args.clients < 1:
        parser.error("--requests must be at least --rounds, and --rounds and --clients at least 1")
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

    from paddle_mlops.config.models import ModelConfig
    from steps.runtime import data, ernie

    directory.mkdir(parents=True, exist_ok=True)
    vocab_file = directory.parent / "vocab.txt"
    tokens = [*data.SPECIAL_TOKENS, *cjk_chars(shape.vocab - len(data.SPECIAL_TOKENS))]
    vocab_file.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    cfg = ModelConfig(hidden_size=shape.hidden, num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                      intermediate_size=shape.intermediate, max_seq_len=shape.seq_len, dropout=0.0)
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

    def pct(self, q: float) -> float:
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1] if len(self.latencies) > 1 else self.latencies[0]

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def throughput(self) -> float:
        return self.texts / self.seconds if self.seconds else 0.0


class InProcess:
    def __init__(self, model_dir: Path, cpu_threads: int) -> None:
        from steps.runtime.ernie import ExportedClassifier

        self.clf = ExportedClassifier(model_dir, cpu_threads=cpu_threads)

    def latency(self, texts: Sequence[str]) -> list[float]:
        self.clf.predict([texts[0]])  # untimed, as the HTTP contenders' connection-opening request
        out = []
        for text in texts:
            start = time.perf_counter()
            self.clf.predict([text])
            out.append(time.perf_counter() - start)
        return out

    def throughput(self, texts: Sequence[str], batch: int) -> tuple[int, float]:
        start = time.perf_counter()
        for i in range(0, len(texts) - batch + 1, batch):
            self.clf.predict(list(texts[i : i + batch]))
        done = (len(texts) // batch) * batch
        return done, time.perf_counter() - start


class HttpContender:
    """A load generator that costs the shared CPUs as little as possible.

    Batch-1 latency uses one keep-alive `http.client` connection (the leanest client in Python:
    ~0.1 ms a request, against ~0.7 ms for httpx); throughput uses aiohttp with one keep-alive
    connection per concurrent client. Both send the body in one write with the headers.
    """

    def __init__(self, url: str, model_name: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.path = f"/v1/models/{model_name}:predict"
        self.url = f"{url}{self.path}"
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

    def latency(self, texts: Sequence[str]) -> list[float]:
        # A fresh connection per round (servers close idle keep-alive connections after a few
        # seconds), opened by one untimed request.
        self.conn.close()
        self._post(texts[0])
        out = []
        for text in texts:
            start = time.perf_counter()
            self._post(text)
            out.append(time.perf_counter() - start)
        return out

    def throughput(self, texts: Sequence[str], clients: int) -> tuple[int, float]:
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

            # Open every connection first, so connection set-up is not part of the measurement.
            await asyncio.gather(*(post(t) for t in texts[:clients]))
            start = time.perf_counter()
            counts = await asyncio.gather(*(worker() for _ in range(clients)))
            return sum(counts), time.perf_counter() - start


# --------------------------------------------------------------------------- server processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    env.pop("PADDLE_MLOPS_HOME", None)
    return env


@contextmanager
def process(cmd: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start `cmd` in its own process group; always stop it (TERM, then KILL) on the way out.

    A process group, not a new session: with scheduler autogroups (Linux default) a new session
    gets its own CPU share, and the servers would then be favoured over the in-process contender.
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, process_group=0)
    try:
        yield proc
    finally:
        stop_group(proc, 15)


def _wait(check: Callable[[], str | None], proc: subprocess.Popen[bytes], log_path: Path, what: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{tail}")
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready within {timeout:.0f}s; see {log_path}")


def start_ours(stack: ExitStack, model_dir: Path, work: Path, args: argparse.Namespace) -> Callable[[], str]:
    ready = work / "ours.ready.json"
    overrides = [f"serving.cpu_threads={args.cpu_threads}"]
    if args.max_batch_size is not None:
        overrides.append(f"serving.max_batch_size={args.max_batch_size}")
    if args.max_wait_ms is not None:
        overrides.append(f"serving.max_wait_ms={args.max_wait_ms}")
    cmd = [sys.executable, "-m", "steps.serve", "--model-dir", str(model_dir), "--host", "127.0.0.1", "--port", "0",
           "--model-name", MODEL_NAME, "--ready-file", str(ready), "--overrides", json.dumps(overrides)]
    log_path = work / "ours.log"
    proc = stack.enter_context(process(cmd, log_path))

    def check() -> str | None:
        return json.loads(ready.read_text())["url"] if ready.exists() else None

    return lambda: _wait(check, proc, log_path, "our model server")


def start_baseline(stack: ExitStack, model_dir: Path, work: Path, args: argparse.Namespace) -> Callable[[], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.serving", "--kserve-baseline", str(model_dir), "--port", str(port),
           "--grpc-port", str(free_port()), "--cpu-threads", str(args.cpu_threads)]
    log_path = work / "baseline.log"
    proc = stack.enter_context(process(cmd, log_path))
    url = f"http://127.0.0.1:{port}"

    def check() -> str | None:
        try:
            response = httpx.get(f"{url}/v1/models/{BASELINE_NAME}", timeout=2)
        except httpx.TransportError:
            return None
        return url if response.status_code == 200 and response.json().get("ready") else None

    return lambda: _wait(check, proc, log_path, "the kserve.Model baseline")


def serve_baseline(model_dir: str, port: int, grpc_port: int, cpu_threads: int) -> int:
    """The plain predictor a user would write: one request, one inference, on kserve.ModelServer."""
    # kserve parses sys.argv when imported; hand it exactly its own flags. ModelServer binds
    # 0.0.0.0 (not configurable in kserve 0.21); the benchmark only ever talks to 127.0.0.1.
    sys.argv = [sys.argv[0], "--http_port", str(port), "--grpc_port", str(grpc_port), "--enable_grpc", "false"]
    import kserve

    from steps.runtime.ernie import ExportedClassifier

    class PlainErnie(kserve.Model):
        def load(self) -> bool:
            self.clf = ExportedClassifier(model_dir, cpu_threads=cpu_threads)
            self.ready = True
            return True

        def predict(self, payload: dict, headers: dict[str, str] | None = None) -> dict:
            return {"predictions": self.clf.predict(payload["instances"])}

    model = PlainErnie(BASELINE_NAME)
    model.load()
    kserve.ModelServer().start([model])
    return 0


# --------------------------------------------------------------------------- measuring


def best_batch(inproc: InProcess, texts: list[str], quick: bool) -> tuple[int, dict[int, float]]:
    """Texts/s of the in-process predictor for each batch size; the fastest size."""
    sizes = (1, 2, 4, 8, 16, 32)
    rates = {}
    for size in sizes:
        inproc.clf.predict(texts[:size])  # a first run per shape pays one-off set-up costs
        n = size * (1 if quick else max(2, 64 // size))
        done, seconds = inproc.throughput(texts[:n], size)
        rates[size] = done / seconds
    return max(rates, key=rates.__getitem__), rates


LATENCY_BLOCK = 10  # requests per contender per latency block
SETTLE_S = 0.25  # > Intel OpenMP's 200 ms spin after a parallel region (KMP_BLOCKTIME)


def settle() -> None:
    """Let the previous contender's OpenMP threads stop spinning before the next one is timed."""
    time.sleep(SETTLE_S)


def rotated(items: Sequence[T], r: int) -> list[T]:
    k = r % len(items)
    return [*items[k:], *items[:k]]


def measure(args: argparse.Namespace, shape: Shape, work: Path) -> dict:
    started = time.perf_counter()
    model_dir = export_model(shape, work / "model")
    print(f"exported {shape.describe()} in {time.perf_counter() - started:.0f}s", flush=True)
    texts = make_texts(max(args.requests, 64), shape.seq_len - 2)
    with ExitStack() as stack:
        # Both servers start at once (and load while this process loads its predictor).
        ours_ready = start_ours(stack, model_dir, work, args)
        base_ready = start_baseline(stack, model_dir, work, args)
        inproc = InProcess(model_dir, args.cpu_threads)
        ours_url, base_url = ours_ready(), base_ready()
        ours, base = HttpContender(ours_url, MODEL_NAME), HttpContender(base_url, BASELINE_NAME)
        stack.callback(ours.close)
        stack.callback(base.close)
        results = {name: Result(name) for name in ("in-process", "ours", "baseline")}
        contenders = (("in-process", inproc), ("ours", ours), ("baseline", base))

        # Warm-up: first runs of every batch shape allocate and pick kernels. Our server sees
        # batches of up to `clients` texts here; every contender runs one such batch too, so that
        # all three predictors carry the same allocation history into the batch-1 timings.
        for contender in (inproc, ours, base):
            contender.latency(texts[:3])
        for contender in (ours, base):
            contender.throughput(texts[: 2 * args.clients], args.clients)
            contender.predict_many(texts[: args.clients])
        inproc.clf.predict(texts[: args.clients])

        # Latency in short blocks, the contenders' order rotating from block to block, so that a
        # drift in the machine's speed (shared hosts) falls on all of them alike.
        blocks = max(args.rounds, args.requests // LATENCY_BLOCK)
        per_block = args.requests // blocks
        for r in range(blocks):
            chunk = texts[(r * per_block) % len(texts) :][:per_block]
            for name, contender in rotated(contenders, r):
                settle()
                results[name].latencies += contender.latency(chunk)

        batch, rates = best_batch(inproc, texts, args.quick)
        print("in-process texts/s by batch size: " + ", ".join(f"{b}: {v:.1f}" for b, v in rates.items()), flush=True)
        results["in-process"].note = f"batch {batch}"
        tp_round = max(args.requests // args.rounds, 8 * args.clients, 4 * batch)
        measured = (
            ("in-process", lambda c: inproc.throughput(c, batch)),
            ("ours", lambda c: ours.throughput(c, args.clients)),
            ("baseline", lambda c: base.throughput(c, args.clients)),
        )
        for r in range(args.rounds):
            chunk = [texts[(r * tp_round + i) % len(texts)] for i in range(tp_round)]
            for name, run in rotated(measured, r):
                settle()
                done, seconds = run(chunk)
                results[name].texts += done
                results[name].seconds += seconds

    return report(args, shape, results, rates)


def report(args: argparse.Namespace, shape: Shape, results: dict[str, Result], rates: dict[int, float]) -> dict:
    inproc, ours, base = results["in-process"], results["ours"], results["baseline"]
    print(f"model: {shape.describe()}; cpu_threads {args.cpu_threads}; {os.cpu_count()} CPUs; "
          f"{args.requests} requests x {args.rounds} rounds; {args.clients} clients")
    for r in (inproc, ours, base):
        extra = f" ({r.note})" if r.note else f" ({args.clients} clients)"
        print(f"  {r.name:<11} batch-1 p50 {r.p50 * 1e3:7.2f} ms  p99 {r.pct(99) * 1e3:7.2f} ms  "
              f"throughput {r.throughput:7.2f} texts/s{extra}")
    figures = {
        "latency_ratio": ours.p50 / inproc.p50,
        "throughput_ratio": ours.throughput / inproc.throughput,
        "baseline_latency_ratio": base.p50 / inproc.p50,
        "baseline_throughput_ratio": base.throughput / inproc.throughput,
    }
    print(f"latency ratio: {figures['latency_ratio']:.2f}  (target <= 1.05; baseline {figures['baseline_latency_ratio']:.2f})")
    print(f"throughput ratio: {figures['throughput_ratio']:.2f}  (target >= 0.95; baseline {figures['baseline_throughput_ratio']:.2f})")
    print(f"baseline latency ratio: {figures['baseline_latency_ratio']:.2f}")
    print(f"baseline throughput ratio: {figures['baseline_throughput_ratio']:.2f}")
    return {
        "model": shape.__dict__,
        "cpu_threads": args.cpu_threads,
        "cpus": os.cpu_count(),
        "requests": args.requests,
        "clients": args.clients,
        "in_process_by_batch": rates,
        "contenders": {
            r.name: {"p50_ms": r.p50 * 1e3, "p99_ms": r.pct(99) * 1e3, "texts_per_s": r.throughput, "note": r.note}
            for r in (inproc, ours, base)
        },
        **figures,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    # paddlenlp configures the root logger at INFO; httpx would then log every request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.kserve_baseline:
        return serve_baseline(args.kserve_baseline, args.port, args.grpc_port, args.cpu_threads)
    shape = TINY if args.quick else MEDIUM
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        try:
            results = measure(args, shape, Path(tmp))
        except RuntimeError as exc:
            print(f"[benchmarks.serving] error: {exc}", file=sys.stderr)
            return 1
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
