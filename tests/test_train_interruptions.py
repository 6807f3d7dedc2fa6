"""Real interruptions of a real training job on an s3:// workspace (moto's S3 server; production uses MinIO).

The job runs as on a TrainJob node: `python -m steps.runtime.training.launch` (which supervises Paddle's launcher) with
two CPU processes (gloo) and the workspace, data and checkpoints in S3. A worker is SIGKILLed mid-training (a crash, an
OOM kill, a lost node) and the step is run again; the job is SIGTERMed (eviction, preemption, a node drain) and must
checkpoint and exit 143 within its grace period. SIGTERM also comes outside the training steps: in setup (the job
exits at once, nothing saved) and during rank 0's dev scoring (the checkpoint of the epoch's last step, then exit).
Each resumed run must end with the uninterrupted run's parameters, bit for bit, having trained every example of each
epoch once, in one MLflow run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import psutil
import pytest
from fixtures_ernie import common
from s3server import DUMMY_CREDENTIALS, moto_s3_server
from test_train import write_workspace

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import EXIT_FATAL, EXIT_TERMINATED, LAUNCH_CONTROL_ENV
from steps.runtime.storage import workspace
from steps.runtime.training.checkpoint_store import CheckpointStore
from steps.runtime.training.trace import SCORING_DELAY_ENV, TRACE_ENV

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# 128 training texts, 2 processes x 8 = 16 per step: 8 steps an epoch, 48 steps. Dropout on.
STEPS = 48
RUN = ("training.batch_size=8", "training.epochs=6", "training.nproc=2", "training.checkpoint.every_steps=4")
BUCKET = "train-runs"


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    import boto3

    with moto_s3_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("interruptions")


def s3_workspace(s3: str, local: Path, name: str) -> str:
    """`s3://train-runs/<name>` holding the tiny data/ that write_workspace makes."""
    data = write_workspace(local / name) / "data"
    uri = f"s3://{BUCKET}/{name}"
    workspace.stage_out(data, workspace.join(uri, "data"), s3)
    return uri


def job_env(s3: str, base: Path, trace: Path) -> dict[str, str]:
    env = {**os.environ, **DUMMY_CREDENTIALS, "PYTHONPATH": str(ROOT), "S3_ENDPOINT_URL": s3, TRACE_ENV: str(trace)}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{base / 'mlflow.db'}"
    env["PADDLE_MLOPS_RUN"] = "wf-interrupted"  # the MLflow run's `workflow` tag
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def start(ws: str, log_dir: Path, env: dict[str, str], dump: Path, *overrides: str) -> subprocess.Popen:
    """The TrainJob node's command, on this machine: one node, two processes."""
    cmd = [sys.executable, "-m", "steps.runtime.training.launch", "--nnodes", "1", "--nproc_per_node", "2",
           "--log_dir", str(log_dir), "steps/train.py", *common(*RUN, *overrides), "--workspace", ws,
           "--dump-params", str(dump)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, log_dir: Path, timeout: float = 300) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    logs = "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("workerlog.*")))
    return proc.returncode, out + logs


def sigterm_ends_it(job: subprocess.Popen, log_dir: Path, within: float) -> str:
    """SIGTERM to the container's first process, as the kubelet sends it: the job exits 143 within `within` seconds;
    its logs."""
    signalled = time.monotonic()
    job.send_signal(signal.SIGTERM)
    code, logs = finish(job, log_dir, timeout=2 * within)
    took = time.monotonic() - signalled
    assert code == EXIT_TERMINATED, logs[-4000:]
    assert took < within, f"{took:.1f} s from SIGTERM to exit; it had {within} s"
    return logs


def store(s3: str, ws: str, run_id: str) -> CheckpointStore:
    return CheckpointStore(f"{ws}/train/sentiment/{run_id}/checkpoints", s3)


def trace_steps(trace: Path) -> dict[int, dict[str, Any]]:
    """Step -> what both ranks trained at it (examples merged), from one attempt's per-rank trace files."""
    steps: dict[int, dict[str, Any]] = {}
    for rank in (0, 1):
        for line in Path(f"{trace}.{rank}").read_text().splitlines():
            row = json.loads(line)  # its "time" differs between runs: left out
            merged = steps.setdefault(row["step"], {"epoch": row["epoch"], "lr": row["lr"], "examples": []})
            merged["examples"] += row["examples"]
    return steps


def wait_until(predicate: Any, proc: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the job ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def workers(proc: subprocess.Popen) -> dict[int, psutil.Process]:
    found = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if "train.py" in " ".join(child.cmdline()):
                found[int(child.environ().get("PADDLE_TRAINER_ID", "-1"))] = child
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(scope="module")
def reference(s3: str, base: Path) -> dict[str, Any]:
    """The uninterrupted run: its final parameters, per-step trace and run id."""
    ws = s3_workspace(s3, base, "reference")
    env = {**job_env(s3, base, base / "ref-trace"), "PADDLE_MLOPS_RUN": "wf-reference"}
    code, logs = finish(start(ws, base / "ref-log", env, base / "ref.npz"), base / "ref-log")
    assert code == 0, logs[-4000:]
    training = workspace.read_json(f"{ws}/model/training.json", s3)
    assert (training["world_size"], training["global_steps"]) == (2, STEPS)
    return {"dump": base / "ref.npz", "trace": trace_steps(base / "ref-trace"), "run_id": training["run_id"]}


def one_mlflow_run(base: Path, workflow: str = "wf-interrupted") -> Any:
    client = mlflow.MlflowClient(f"sqlite:///{base / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("ernie-sentiment").experiment_id
    runs = [r for r in client.search_runs([experiment]) if r.data.tags.get("workflow") == workflow]
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return runs[0]


def test_sigterm_then_sigkill_then_the_end_resumes_to_the_uninterrupted_runs_parameters(
    s3: str, base: Path, reference: dict[str, Any]
) -> None:
    """Three attempts of one run: SIGTERMed (eviction), then a worker SIGKILLed (crash, OOM, lost node), then to
    the end. Each attempt resumes the newest complete checkpoint; the end result is the uninterrupted run's."""
    grace = load_config(env="local").training.checkpoint.grace_seconds
    ws = s3_workspace(s3, base, "interrupted")
    checkpoints = store(s3, ws, reference["run_id"])
    traces = [base / f"trace-{attempt}" for attempt in (1, 2, 3)]
    env = job_env(s3, base, traces[0])

    # 1. SIGTERM to the container's first process, as the kubelet sends it: checkpoint, exit 143 within the grace.
    job = start(ws, base / "log-1", env, base / "unused.npz")
    wait_until(lambda: len(trace_steps_safe(traces[0])) >= 6, job, "six trained steps")
    logs = sigterm_ends_it(job, base / "log-1", within=grace)
    stopped_at = max(trace_steps(traces[0]))
    assert checkpoints.complete()[-1] == stopped_at  # the stop's own checkpoint, complete in the store
    assert one_mlflow_run(base).info.status == "KILLED"

    # 2. Resumed; once two more checkpoints are complete, rank 0 is SIGKILLed (maybe mid-upload).
    env[TRACE_ENV] = str(traces[1])
    job = start(ws, base / "log-2", env, base / "unused.npz")

    def two_newer() -> bool:
        done = checkpoints.complete()
        return len(done) >= 2 and done[-2] > stopped_at

    wait_until(two_newer, job, "two checkpoints after the resume")
    os.kill(workers(job)[0].pid, signal.SIGKILL)
    code, logs = finish(job, base / "log-2")
    assert code not in (0, EXIT_FATAL, EXIT_TERMINATED), logs[-3000:]  # a crash: retryable, and counted
    assert f"resuming from checkpoint step {stopped_at}" in logs
    complete = checkpoints.complete()
    # `keep` = 2 are kept, one more when the kill came between a manifest and the rotation after it (older ones
    # go only once a newer one is complete); never an incomplete one among them.
    assert len(complete) in (2, 3) and stopped_at < complete[-1] < STEPS, complete
    killed_at = complete[-1]
    # Work lost to the kill: the steps since that checkpoint: an interval (4 steps), plus the steps an upload in flight
    # deferred the next one by and the one in flight when the kill came (each a few steps of the tiny model here).
    assert 0 <= max(trace_steps(traces[1])) - killed_at <= 4 * 4, max(trace_steps(traces[1]))

    # 3. To the end, from the newest complete checkpoint.
    env[TRACE_ENV] = str(traces[2])
    code, logs = finish(start(ws, base / "log-3", env, base / "resumed.npz"), base / "log-3")
    assert code == 0, logs[-4000:]
    assert f"resuming from checkpoint step {killed_at}" in logs
    training = workspace.read_json(f"{ws}/model/training.json", s3)
    assert (training["resumed_from_step"], training["global_steps"]) == (killed_at, STEPS)

    # Bit for bit the uninterrupted run's parameters; every step trained once with its examples and learning rate.
    left, right = np.load(reference["dump"]), np.load(base / "resumed.npz")
    assert all(np.array_equal(left[name], right[name]) for name in left.files)
    parts = [trace_steps(t) for t in traces]
    trained = {**{s: parts[0][s] for s in range(1, stopped_at + 1)},
               **{s: parts[1][s] for s in range(stopped_at + 1, killed_at + 1)}, **parts[2]}  # fmt: skip
    assert sorted(parts[2]) == list(range(killed_at + 1, STEPS + 1))
    assert trained == reference["trace"]
    for resumed_at in (stopped_at, killed_at):  # the first step after each resume: the same learning rate
        assert trained[resumed_at + 1]["lr"] == reference["trace"][resumed_at + 1]["lr"]
    for epoch in range(STEPS // 8):
        seen = [h for row in trained.values() if row["epoch"] == epoch for h in row["examples"]]
        assert len(seen) == len(set(seen)) == 128, f"epoch {epoch}: an example twice or skipped"

    # One MLflow run through the three attempts, continued at the right steps and FINISHED.
    run = one_mlflow_run(base)
    assert run.info.run_id == training["mlflow_run_id"] and run.info.status == "FINISHED"
    assert run.data.tags["resumed_from_step"] == str(killed_at)
    client = mlflow.MlflowClient(f"sqlite:///{base / 'mlflow.db'}")
    history: dict[int, set[float]] = {}
    for metric in client.get_metric_history(run.info.run_id, "dev_accuracy"):
        history.setdefault(metric.step, set()).add(metric.value)
    # Epoch by epoch; an epoch that ended after the newest checkpoint before the kill is logged again by the attempt
    # that replays it, with the same value (the replay is exact).
    assert sorted(history) == list(range(1, 7)) and all(len(values) == 1 for values in history.values())
    assert checkpoints.steps() == []  # exported: the run's checkpoints are gone


def trace_steps_safe(trace: Path) -> dict[int, Any]:
    try:
        return trace_steps(trace)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def test_a_worker_that_failed_for_good_makes_the_node_exit_with_the_fatal_code() -> None:
    """Paddle's launcher exits with its first worker's code, here one it terminated itself (-15 -> 241); a worker
    that failed on bad input left its mark (runner._fail), so the node exits EXIT_FATAL, which is not restarted."""
    from steps.runtime.training import launch

    worker = (
        "import sys; from steps.runtime import runner; "
        "runner._fail('[train] error: data/train.jsonl is empty', runner.EXIT_FATAL); sys.exit(241)"
    )
    assert launch.Supervisor([sys.executable, "-c", worker]).run() == EXIT_FATAL
    assert launch.Supervisor([sys.executable, "-c", "import sys; sys.exit(7)"]).run() == 7  # a crash stays a crash


def registered(job: subprocess.Popen) -> bool:
    """Both workers are past `graceful_stop.installed()` (their pid files are where the supervisor forwards SIGTERM):
    setting up until their first step."""
    found = {rank: process for rank, process in workers(job).items() if rank >= 0}  # not the launcher (-1)
    try:
        control = {Path(p.environ()[LAUNCH_CONTROL_ENV]) for p in found.values()}
    except (psutil.NoSuchProcess, KeyError):
        return False
    return len(found) == 2 and len(control) == 1 and len(list(control.pop().glob("pid.*"))) == 2


def test_sigterm_during_setup_exits_143_at_once_with_no_checkpoint(
    s3: str, base: Path, reference: dict[str, Any]
) -> None:
    """Staging data, building the model, counting the n-gram vocabulary: nothing to save, so no reason to wait for
    the first step boundary (which may be minutes away on a large corpus)."""
    ws = s3_workspace(s3, base, "setup")
    trace = base / "trace-setup"
    env = {**job_env(s3, base, trace), "PADDLE_MLOPS_RUN": "wf-setup"}
    job = start(ws, base / "log-setup", env, base / "unused.npz")
    wait_until(lambda: registered(job), job, "both workers setting up")
    assert not trace_steps_safe(trace), "a step was trained before the signal: not in setup"
    logs = sigterm_ends_it(job, base / "log-setup", within=30)
    assert "SIGTERM during setup" in logs and not trace_steps_safe(trace)  # stopped before the first step
    checkpoints = store(s3, ws, reference["run_id"])
    assert checkpoints.steps() == [] and checkpoints.writers() == []


def test_sigterm_during_rank_0s_dev_scoring_checkpoints_the_epochs_last_step_and_resumes_exactly(
    s3: str, base: Path, reference: dict[str, Any]
) -> None:
    """Rank 0 scores epoch 1 on dev while rank 1 waits for it at the epoch boundary; SIGTERM interrupts the scoring:
    the state after step 8 is checkpointed (the snapshot a stop at that step boundary writes), both ranks exit 143
    within the grace period, and the resumed run scores epoch 1 again and ends as the uninterrupted run."""
    grace = load_config(env="local").training.checkpoint.grace_seconds
    ws = s3_workspace(s3, base, "scoring")
    checkpoints = store(s3, ws, reference["run_id"])
    traces = [base / "trace-scoring-1", base / "trace-scoring-2"]
    env = {**job_env(s3, base, traces[0]), "PADDLE_MLOPS_RUN": "wf-scoring"}

    # Every 5 steps: step 8, the epoch's last, is not a step checkpoint, so the stop writes its own. The test hook
    # holds rank 0 in the scoring (and logs it) until the signal comes.
    job = start(ws, base / "log-scoring-1", {**env, SCORING_DELAY_ENV: "120"}, base / "unused.npz",
                "training.checkpoint.every_steps=5")  # fmt: skip
    rank0_log = base / "log-scoring-1" / "workerlog.0"
    in_scoring = "before the dev scoring of epoch 1"
    wait_until(lambda: rank0_log.is_file() and in_scoring in rank0_log.read_text(errors="replace"), job, "the scoring")
    logs = sigterm_ends_it(job, base / "log-scoring-1", within=grace)
    assert "SIGTERM during the dev scoring of epoch 1" in logs
    assert max(trace_steps(traces[0])) == 8 and checkpoints.complete()[-1] == 8
    state = json.loads(checkpoints.backend.read("8/state.json") or b"{}")
    assert (state["epoch"], state["batches_done"], state["history"]) == (0, 8, [])  # epoch 1 done, not scored
    assert one_mlflow_run(base, "wf-scoring").info.status == "KILLED"

    env[TRACE_ENV] = str(traces[1])
    code, logs = finish(start(ws, base / "log-scoring-2", env, base / "scoring.npz"), base / "log-scoring-2")
    assert code == 0, logs[-4000:]
    assert "resuming from checkpoint step 8" in logs
    left, right = np.load(reference["dump"]), np.load(base / "scoring.npz")
    assert all(np.array_equal(left[name], right[name]) for name in left.files)
    first, second = trace_steps(traces[0]), trace_steps(traces[1])
    assert sorted(second) == list(range(9, STEPS + 1))
    assert {**first, **second} == reference["trace"]
    run = one_mlflow_run(base, "wf-scoring")
    client = mlflow.MlflowClient(f"sqlite:///{base / 'mlflow.db'}")
    # Epoch 1 scored once: by the resumed attempt (the interrupted scoring logged nothing).
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "dev_accuracy")) == list(range(1, 7))
    assert run.info.status == "FINISHED" and checkpoints.steps() == []
