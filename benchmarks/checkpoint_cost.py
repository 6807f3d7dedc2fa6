"""What checkpoints cost training, how fast a SIGTERM ends a job, and how much work a SIGKILL loses.

1. Throughput: `steps.train` in-process on the pipeline's local model, in alternating rounds with no checkpoints,
   with the local default (one per epoch) and with a dense cadence (every `--interval` seconds, far denser than
   production's 600 s, so that a short run takes several); samples/s of the optimisation loop (`training.json`),
   the capture on the training thread included, the serialisation and upload in the background. The cost per
   checkpoint, scaled to production's cadence: 1 - (seconds lost per checkpoint) / 600.
2. The production model's checkpoint: an ERNIE 3.0 medium-sized state (6 x 768, vocabulary 40000: 75 M parameters,
   AdamW moments after one step, the best-on-dev copy) captured, written and uploaded to a directory and to S3
   (moto's server here; MinIO in production): the time from a stop request to a complete checkpoint, from which
   `training.checkpoint.grace_seconds` is sized (x GRACE_SAFETY_FACTOR + 10 s).
3. SIGTERM: a two-process job under `python -m steps.runtime.training.launch`, signalled mid-training; seconds to exit
   143.
4. SIGKILL: the same job with a checkpoint every `--interval` seconds, rank 0 killed at random times; the training
   time lost (from the newest complete checkpoint's step to the kill) against the interval.

    python -m benchmarks.checkpoint_cost                  # 3 rounds, 120 steps; a few minutes on 2 cores
    python -m benchmarks.checkpoint_cost --quick          # tiny, seconds (tests/test_benchmarks.py)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

# The steps' code is imported where it is used (benchmarks/__init__.py says why).
from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from benchmarks.train_throughput import CONFIG, ROOT, write_data
from paddle_mlops_core.config import load_config
from paddle_mlops_core.config.inputs import ModelConfig

PROD_MODEL = {"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 3072,
              "max_seq_len": 2048}  # fmt: skip
PROD_VOCAB = 40000
PROD_INTERVAL = 600.0
PARTS = ("throughput", "production_checkpoint", "sigterm", "sigkill")


def _overrides(steps: int, checkpoint: list[str], quick: bool) -> list[str]:
    model = ["model.hidden_size=32", "model.num_hidden_layers=1", "model.intermediate_size=64"] if quick else []
    return [*model, "training.epochs=100", f"training.max_steps={steps}", "training.nproc=1",
            "training.metrics_port=0", *checkpoint]  # fmt: skip


def throughput(base: Path, steps: int, rounds: int, interval: float, quick: bool) -> dict[str, Any]:
    from steps import train

    cadences = {
        "none": ["training.checkpoint.epoch_end=false"],
        "per-epoch": [],
        "dense": [f"training.checkpoint.every_seconds={interval}"],
    }
    rates: dict[str, list[float]] = {name: [] for name in cadences}
    seconds: dict[str, list[float]] = {name: [] for name in cadences}  # the loop, dev evaluations, checkpoints
    # CPU seconds of the process (every thread: the background upload's included), for the same steps: what a
    # checkpoint costs, much less disturbed than wall time by other work on a shared machine.
    cpu: dict[str, list[float]] = {name: [] for name in cadences}
    checkpoints: dict[str, int] = {}
    captures: list[float] = []  # seconds the training thread spent copying a checkpoint's state
    writes: list[float] = []  # seconds the writer thread spent serialising, hashing and storing one
    for round_ in range(rounds):
        for name, extra in cadences.items():
            ws = base / f"tp-{name}-{round_}"
            (ws / "data").mkdir(parents=True)
            for f in (base / "data").iterdir():
                (ws / "data" / f.name).write_bytes(f.read_bytes())
            args = ["--config", str(CONFIG), "--env", "local", "--workspace", str(ws),
                    "--overrides", json.dumps(_overrides(steps, extra, quick))]  # fmt: skip
            with _count_checkpoints() as counted:
                assert train.main(args) == 0, name
            training = json.loads((ws / "model" / "training.json").read_text())
            rates[name].append(float(training["train_samples_per_second"]))
            seconds[name].append(float(training["train_seconds"]))
            cpu[name].append(float(training["train_cpu_seconds"]))
            checkpoints[name] = counted["count"]
            captures += counted["capture"]
            writes += counted["write"]
    best = {name: max(values) for name, values in rates.items()}
    median = {name: statistics.median(values) for name, values in rates.items()}
    fastest = {name: min(values) for name, values in seconds.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu.items()}
    lost = (1 / best["dense"] - 1 / best["none"]) * steps * 32 / max(checkpoints["dense"], 1)  # s per checkpoint
    return {"samples_per_second": best, "median_samples_per_second": median, "rounds": rates,
            "checkpoints": checkpoints, "seconds_lost_per_checkpoint": lost, "train_seconds": fastest,
            "seconds_ratio_per_epoch": fastest["per-epoch"] / fastest["none"],
            "median_ratio_per_epoch": median["per-epoch"] / median["none"],
            "median_ratio_dense": median["dense"] / median["none"], "cpu_seconds": cpu,
            "cpu_ratio_per_epoch": cpu_median["none"] / cpu_median["per-epoch"],
            "cpu_ratio_dense": cpu_median["none"] / cpu_median["dense"],
            "ratio_per_epoch": best["per-epoch"] / best["none"], "ratio_dense": best["dense"] / best["none"],
            "ratio_at_prod_cadence": 1 - max(lost, 0.0) / PROD_INTERVAL,
            "capture_s": statistics.median(captures) if captures else 0.0,
            "write_s": statistics.median(writes) if writes else 0.0}  # fmt: skip


class _count_checkpoints:
    """While the block runs: how many checkpoints the trainer's writer completes, the seconds the training thread
    spends capturing them (`capture`) and the seconds the writer thread spends writing them (`write`)."""

    def __enter__(self) -> dict[str, Any]:
        from steps.runtime.training import checkpoint_writer
        from steps.runtime.training import snapshot as train_snapshot

        self.found: dict[str, Any] = {"count": 0, "capture": [], "write": []}
        self.originals = (checkpoint_writer.CheckpointWriter._write, train_snapshot.capture)
        write, capture = self.originals
        found = self.found

        def timed_write(writer: Any, snapshot: Any) -> None:
            started = time.perf_counter()
            write(writer, snapshot)
            found["write"].append(time.perf_counter() - started)
            found["count"] += 1

        def timed_capture(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            snapshot = capture(*args, **kwargs)
            found["capture"].append(time.perf_counter() - started)
            return snapshot

        checkpoint_writer.CheckpointWriter._write = timed_write  # type: ignore[method-assign]
        train_snapshot.capture = timed_capture  # type: ignore[assignment]
        return self.found

    def __exit__(self, *exc: object) -> None:
        from steps.runtime.training import checkpoint_writer
        from steps.runtime.training import snapshot as train_snapshot

        checkpoint_writer.CheckpointWriter._write, train_snapshot.capture = self.originals  # type: ignore[method-assign]


def production_checkpoint(base: Path, quick: bool) -> dict[str, Any]:
    """Capture, write and upload one checkpoint of a production-sized model's state; seconds per stage."""
    import paddle

    from steps.runtime.training import optimization
    from steps.runtime.training import snapshot as train_snapshot
    from steps.runtime.training.checkpoint_store import CheckpointStore
    from steps.runtime.weights import ernie
    from tests.s3server import moto_s3_server

    size = {**PROD_MODEL, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2} if quick else PROD_MODEL
    mcfg = ModelConfig(**size)
    model = ernie.build_model(mcfg, 4000 if quick else PROD_VOCAB, 2)
    cfg = _config()
    optimizer, scheduler = optimization.make_optimizer(cfg, model, 100)
    ids = paddle.randint(1, 100, [2, 16])
    paddle.nn.functional.cross_entropy(model(ids), paddle.to_tensor([0, 1])).mean().backward()
    optimization.apply_step(optimizer, scheduler, None)
    best = {k: v.numpy() for k, v in model.state_dict().items()}
    started = time.perf_counter()
    snapshot = train_snapshot.capture(1, model, optimizer, None, best, {"layout": {}}, use_gpu=False)
    figures: dict[str, Any] = {"capture_s": time.perf_counter() - started,
                               "parameters": sum(int(p.size) for p in model.parameters())}  # fmt: skip
    folder = base / "prod-checkpoint"
    started = time.perf_counter()
    snapshot.write(folder)
    figures["write_s"] = time.perf_counter() - started
    figures["bytes"] = sum(f.stat().st_size for f in folder.iterdir())
    started = time.perf_counter()
    CheckpointStore(str(base / "prod-store")).write(1, folder)
    figures["store_directory_s"] = time.perf_counter() - started
    with moto_s3_server() as endpoint:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
        started = time.perf_counter()
        CheckpointStore("s3://bench/run/checkpoints", endpoint).write(1, folder)
        figures["store_s3_s"] = time.perf_counter() - started
    figures["stop_s"] = figures["capture_s"] + figures["write_s"] + figures["store_s3_s"]
    return figures


def _config() -> Any:
    return load_config(CONFIG, env="local")


def _job(base: Path, name: str, extra: list[str], quick: bool) -> tuple[subprocess.Popen, Path, Path]:
    ws = base / name
    (ws / "data").mkdir(parents=True)
    for f in (base / "data").iterdir():
        (ws / "data" / f.name).write_bytes(f.read_bytes())
    trace = base / f"{name}-trace"
    overrides = [*_overrides(100000, extra, quick), "training.nproc=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PADDLE_MLOPS_TRAIN_TRACE": str(trace),
           "MLFLOW_TRACKING_URI": f"sqlite:///{base / 'mlflow.db'}"}  # fmt: skip
    cmd = [sys.executable, "-m", "steps.runtime.training.launch", "--nnodes", "1", "--nproc_per_node", "2",
           "--log_dir", str(base / f"{name}-log"), "steps/train.py", "--config", str(CONFIG), "--env", "local",
           "--overrides", json.dumps(overrides), "--workspace", str(ws)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, ws, trace


def _steps(trace: Path) -> dict[int, float]:
    """Step -> wall time its update started, from rank 0's trace."""
    path = Path(f"{trace}.0")
    lines = path.read_text().splitlines() if path.is_file() else []
    return {row["step"]: row["time"] for row in (json.loads(line) for line in lines if line.endswith("}"))}


def _wait_steps(proc: subprocess.Popen, trace: Path, count: int) -> None:
    while len(_steps(trace)) < count:
        if proc.poll() is not None:
            raise SystemExit(f"the job ended early ({proc.returncode}); see {trace}")
        time.sleep(0.05)


def sigterm(base: Path, quick: bool) -> dict[str, Any]:
    proc, _, trace = _job(base, "sigterm", [], quick)
    _wait_steps(proc, trace, 20)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=600)
    return {"exit_code": code, "seconds_to_exit": time.monotonic() - started, "grace_seconds": _config().training.
            checkpoint.grace_seconds}  # fmt: skip


def sigkill(base: Path, interval: float, kills: int, quick: bool) -> dict[str, Any]:
    """Lost training seconds per kill: from the newest complete checkpoint's step to the last step trained."""
    from steps.runtime.training.checkpoint_store import CheckpointStore

    lost: list[float] = []
    rng = random.Random(7)
    for attempt in range(kills):
        proc, ws, trace = _job(base, f"sigkill-{attempt}", [f"training.checkpoint.every_seconds={interval}"], quick)
        _wait_steps(proc, trace, 10)
        time.sleep(rng.uniform(interval, 3 * interval))
        workers = _worker_pids(base / f"sigkill-{attempt}-log")
        os.kill(workers[0], signal.SIGKILL)
        proc.wait(timeout=600)
        steps = _steps(trace)
        stores = list((ws / "train").glob("*/*/checkpoints"))
        done = CheckpointStore(str(stores[0])).complete() if stores else []
        since = steps.get(done[-1], min(steps.values())) if done else min(steps.values())
        lost.append(steps[max(steps)] - since)
    return {"interval_seconds": interval, "lost_seconds": lost, "max_lost_seconds": max(lost)}


def _worker_pids(log_dir: Path) -> list[int]:
    """The job's worker pids by rank (the launcher gives each its PADDLE_LOG_DIR and PADDLE_TRAINER_ID)."""
    found: dict[int, int] = {}
    for process in psutil.process_iter(["cmdline"]):
        try:
            if "steps/train.py" in " ".join(process.info["cmdline"] or []):
                env = process.environ()
                if env.get("PADDLE_LOG_DIR") == str(log_dir):
                    found[int(env.get("PADDLE_TRAINER_ID", "-1"))] = process.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [found[rank] for rank in sorted(found)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = benchmark_parser("checkpoint_cost", __doc__)
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps per throughput round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=4.0, help="seconds between checkpoints (dense cadence)")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which measurements (default: {','.join(PARTS)})")
    args = parse_benchmark_args(parser, argv, "tiny model and few steps: checks that the benchmark runs")
    if args.quick:
        args.steps, args.rounds, args.interval, args.kills = 12, 1, 0.5, 1
    base = Path(tempfile.mkdtemp(prefix="checkpoint-cost-"))
    write_data(base / "data", n_train=1600 if not args.quick else 200, n_dev=200 if not args.quick else 20)
    parts = args.parts.split(",")
    runs = {
        "throughput": lambda: throughput(base, args.steps, args.rounds, args.interval, args.quick),
        "production_checkpoint": lambda: production_checkpoint(base, args.quick),
        "sigterm": lambda: sigterm(base, args.quick),
        "sigkill": lambda: sigkill(base, args.interval, args.kills, args.quick),
    }
    try:
        results = {name: run() for name, run in runs.items() if name in parts}
    finally:
        shutil.rmtree(base, ignore_errors=True)  # the production-sized checkpoints alone are 2.3 GB
    _report(results)
    write_results(args.json_out, results)
    return 0


def _report(results: dict[str, Any]) -> None:
    if "throughput" in results:
        _report_throughput(results["throughput"])
    if "production_checkpoint" in results:
        prod = results["production_checkpoint"]
        print(f"production-sized checkpoint: {prod['parameters'] / 1e6:.1f} M parameters, "
              f"{prod['bytes'] / 2**20:.0f} MiB; capture {prod['capture_s']:.2f} s, write {prod['write_s']:.2f} s, "
              f"to a directory {prod['store_directory_s']:.2f} s, to S3 {prod['store_s3_s']:.2f} s; stop to "
              f"complete {prod['stop_s']:.1f} s")  # fmt: skip
    if "sigterm" in results:
        term = results["sigterm"]
        print(f"SIGTERM to exit: {term['seconds_to_exit']:.1f} s (exit {term['exit_code']}, grace "
              f"{term['grace_seconds']} s)")  # fmt: skip
    if "sigkill" in results:
        kill = results["sigkill"]
        print(f"work lost to SIGKILL: {', '.join(f'{s:.1f}' for s in kill['lost_seconds'])} s "
              f"(max {kill['max_lost_seconds']:.1f} s; interval {kill['interval_seconds']} s)")  # fmt: skip


def _report_throughput(tp: dict[str, Any]) -> None:
    rates = ", ".join(f"{k} {v:.1f}" for k, v in tp["samples_per_second"].items())
    print(f"samples/s: {rates} (checkpoints taken: {tp['checkpoints']})")
    print(f"throughput ratio, one per epoch (make run's default): {tp['ratio_per_epoch']:.3f}; training time "
          f"{tp['train_seconds']['per-epoch']:.1f} s against {tp['train_seconds']['none']:.1f} s without checkpoints "
          f"(ratio {tp['seconds_ratio_per_epoch']:.3f})")  # fmt: skip
    print(f"median of the rounds: one per epoch {tp['median_ratio_per_epoch']:.3f}, dense "
          f"{tp['median_ratio_dense']:.3f}")  # fmt: skip
    print(f"CPU-time ratio (median CPU seconds without / with, same steps): one per epoch "
          f"{tp['cpu_ratio_per_epoch']:.3f}, dense {tp['cpu_ratio_dense']:.3f}")  # fmt: skip
    print(f"throughput ratio, dense cadence: {tp['ratio_dense']:.3f}; "
          f"{tp['seconds_lost_per_checkpoint']:.3f} s lost per checkpoint")  # fmt: skip
    print(f"throughput ratio at the production cadence (600 s): {tp['ratio_at_prod_cadence']:.4f}")
    print(f"per checkpoint: the training thread copies for {tp['capture_s'] * 1000:.1f} ms (median), the writer "
          f"thread writes for {tp['write_s']:.2f} s")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
