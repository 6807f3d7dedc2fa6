"""Rerun benchmark: `paddle-mlops run` (what `make run` runs) three times in one fresh workdir, in one session.

1. the first run: every step computes;
2. the same tree again: every reusable step is served from the step cache (docs/caching.md);
3. after a serving-only change (`serving.max_batch_size`): evaluate measures and scores again, upload publishes the
   new engine choice, the rollout serves it; data and training are reused.

Each run's wall time and its steps' statuses and seconds are printed, with the reruns' ratios to the first run.
The goal: the unchanged rerun in 30 s or less.

    python -m benchmarks.rerun                   # the default configuration, as `make run` (about 4 minutes)
    python -m benchmarks.rerun --quick           # a tiny configuration (about a minute)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results

ROOT = Path(__file__).resolve().parents[1]
QUICK = [
    "data.max_samples=400",
    "data.vocab_min_freq=1",
    "model.hidden_size=32",
    "model.num_hidden_layers=1",
    "model.num_attention_heads=2",
    "model.intermediate_size=64",
    "model.max_seq_len=32",
    "training.epochs=1",
    "gate.threshold=0.0",
]
SERVING_CHANGE = "serving.max_batch_size=8"
GOAL_SECONDS = 30.0


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("rerun", __doc__)
    parser.add_argument("--workdir", type=Path, default=None, help="a fresh workdir (default: a temporary one)")
    return parse_benchmark_args(parser, argv, quick_help="a tiny configuration instead of make run's")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_once(workdir: Path, sets: list[str]) -> dict[str, Any]:
    """One `paddle-mlops run`: its wall seconds, exit code and each step's status and seconds."""
    args = [sys.executable, "-m", "paddle_mlops.cli", "run", "--workdir", str(workdir)]
    for item in sets:
        args += ["--set", item]
    env = {k: v for k, v in os.environ.items() if k not in ("PADDLE_MLOPS_HOME", "MLFLOW_TRACKING_URI")}
    started = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"paddle-mlops run failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    summary = json.loads((workdir / "last-run.json").read_text(encoding="utf-8"))
    steps = {s["name"]: {"status": s["status"], "seconds": s["seconds"]} for s in summary["steps"]}
    return {"seconds": round(seconds, 1), "steps": steps, "metrics": summary["metrics"], "verdict":
            summary["validation"]["verdict"], "model_uri": summary["model_uri"]}  # fmt: skip


def report(name: str, run: dict[str, Any], first: dict[str, Any] | None) -> None:
    ratio = f"  ({run['seconds'] / first['seconds']:.3f} of the first run)" if first else ""
    print(f"{name}: {run['seconds']:.1f} s{ratio}; validation {run['verdict']}")
    for step, row in run["steps"].items():
        if row["status"] != "Skipped":
            print(f"    {step:<22} {row['status']:<10} {row['seconds']:>7.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rerun-bench-"))
    if workdir.exists() and any(workdir.iterdir()):
        raise SystemExit(f"{workdir} is not empty: the first run must compute everything")
    base = QUICK if args.quick else []
    print(f"CPU: {cpu_model()} ({os.cpu_count()} CPUs); workdir {workdir}")
    first = run_once(workdir, base)
    report("first run", first, None)
    unchanged = run_once(workdir, base)
    report("unchanged rerun", unchanged, first)
    serving = run_once(workdir, [*base, SERVING_CHANGE])
    report(f"after a serving-only change ({SERVING_CHANGE})", serving, first)
    met = "met" if unchanged["seconds"] <= GOAL_SECONDS else "NOT met"
    print(f"unchanged rerun / first run: {unchanged['seconds'] / first['seconds']:.3f}; "
          f"goal {GOAL_SECONDS:.0f} s: {met}")  # fmt: skip
    print(f"serving-only change / first run: {serving['seconds'] / first['seconds']:.3f}")
    results = {"cpu": cpu_model(), "quick": args.quick, "first": first, "unchanged": unchanged, "serving": serving}
    write_results(args.json_out, results)
    subprocess.run([sys.executable, "-m", "paddle_mlops.cli", "serve", "stop", "--workdir", str(workdir)],
                   cwd=ROOT, capture_output=True, check=False)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
