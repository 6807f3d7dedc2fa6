"""Checkpoints in the run's store (steps/runtime/training/checkpoint_store.py) and an exact resume from them.

The store is the object-store backends publishing uses, so every test runs on a directory and on moto's S3 server
(tests/s3server.py; production uses MinIO). Two writers of one run interleave their checkpoints on one prefix and
neither deletes the other's while both are live. The resume tests train the tiny ERNIE in this process, stop it the
way SIGTERM does (a stop decision after step k, or a real SIGTERM during the export) and require the resumed run to
end with the uninterrupted run's parameters bit for bit, the same learning rate at the first resumed step and every
example of the epoch trained exactly once, in one MLflow run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
from fixtures_ernie import common
from s3server import moto_s3_server
from test_train import write_workspace

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import EXIT_TERMINATED, EXIT_USER_ERROR
from steps import train
from steps.runtime.runner import StepError
from steps.runtime.training import graceful_stop
from steps.runtime.training.checkpoint_policy import Checkpointer
from steps.runtime.training.checkpoint_store import WRITER_STALE_SECONDS, CheckpointStore, check_layout
from steps.runtime.training.trace import TRACE_ENV
from steps.runtime.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    import boto3

    with moto_s3_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="runs")
        yield endpoint


@pytest.fixture(params=["directory", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str | None]]:
    if request.param == "directory":
        yield str(tmp_path / "checkpoints"), None
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        yield f"s3://runs/{tmp_path.name}/checkpoints", endpoint


def _files(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.pdparams").write_bytes(bytes([step]) * 1000)
    (folder / "state.json").write_text(json.dumps({"step": step}))
    return folder


def test_only_complete_checkpoints_count_and_the_newest_keep_stay(store_uri, tmp_path: Path) -> None:
    uri, endpoint = store_uri
    store = CheckpointStore(uri, endpoint, keep=2)
    assert store.complete() == [] and store.fetch_latest(tmp_path) is None
    for step in (1, 2, 3):
        assert store.write(step, _files(tmp_path / f"c{step}", step))
    assert store.complete() == [2, 3] and store.steps() == [2, 3]  # rotation kept `keep`
    # An upload killed before its manifest: objects of step 4, no manifest. Never loaded; the previous one is.
    store.backend.put_file(tmp_path / "c3" / "model.pdparams", "4/model.pdparams", "x", lambda n: None)
    assert store.steps() == [2, 3, 4] and store.complete() == [2, 3]
    step, folder = store.fetch_latest(tmp_path)
    assert step == 3 and (folder / "model.pdparams").read_bytes() == bytes([3]) * 1000
    # The leftover goes only once a newer checkpoint is complete; so does the oldest beyond `keep`.
    assert store.write(5, _files(tmp_path / "c5", 5))
    assert store.steps() == [3, 5]
    # A second writer of the same step (a concurrent attempt of the run) finds it complete and keeps it.
    assert not store.write(5, _files(tmp_path / "c5b", 7))
    assert store.fetch_latest(tmp_path)[1].joinpath("model.pdparams").read_bytes() == bytes([5]) * 1000
    store.delete_all()
    assert store.steps() == []


def test_a_checkpoint_that_does_not_verify_falls_back_to_the_one_before(
    store_uri, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri, endpoint = store_uri
    store = CheckpointStore(uri, endpoint, keep=2)
    store.write(2, _files(tmp_path / "c2", 2))
    store.write(4, _files(tmp_path / "c4", 4))
    (tmp_path / "bad").write_bytes(b"truncated")
    store.backend.put_file(
        tmp_path / "bad", "4/model.pdparams", "x", lambda n: None
    )  # bytes changed after the manifest
    step, _ = store.fetch_latest(tmp_path)
    assert step == 2
    assert "checkpoint 4 does not verify" in caplog.text and "model.pdparams" in caplog.text


# --- two writers of one run --------------------------------------------------------------------------------------


def _in_flight(store: CheckpointStore, step: int, folder: Path) -> tuple[threading.Thread, threading.Event]:
    """`store` writing checkpoint `step` on a thread, held after its marker and before its files until the event is
    set: an upload in flight."""
    release, real_put = threading.Event(), store.backend.put_file

    def held_put(path: Path, key: str, *args: Any) -> None:
        if key.startswith(f"{step}/"):
            release.wait(60)
        real_put(path, key, *args)

    store.backend.put_file = held_put  # type: ignore[method-assign]
    thread = threading.Thread(target=store.write, args=(step, folder))
    thread.start()
    deadline = time.monotonic() + 30
    while store.writer_of(step) != store.writer_id and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.writer_of(step) == store.writer_id and step not in store.complete()
    return thread, release


def test_two_live_writers_of_one_run_never_delete_each_others_checkpoints(store_uri, tmp_path: Path) -> None:
    uri, endpoint = store_uri
    a = CheckpointStore(uri, endpoint, keep=1, writer_id="writer-a")
    b = CheckpointStore(uri, endpoint, keep=1, writer_id="writer-b")
    assert a.write(1, _files(tmp_path / "a1", 1)) and b.write(2, _files(tmp_path / "b2", 2))
    assert a.write(3, _files(tmp_path / "a3", 3))
    assert a.steps() == [2, 3]  # a pruned its own 1 (keep 1), not b's 2
    upload, release = _in_flight(b, 4, _files(tmp_path / "b4", 4))
    assert a.write(5, _files(tmp_path / "a5", 5))  # a rotates while b uploads 4
    assert a.steps() == [2, 4, 5] and a.complete() == [2, 5]  # b's complete 2 and in-flight 4 stay
    assert not a.write(4, _files(tmp_path / "a4", 4))  # a step a live writer is writing stays its own
    release.set()
    upload.join()
    assert a.complete() == [4, 5] and b.writer_of(4) == "writer-b"  # b's rotation took its own 2, not a's 5
    assert b.manifest(4)["writer"] == "writer-b"
    step, folder = b.fetch_latest(tmp_path)  # a resume reads the newest complete checkpoint, whoever wrote it
    assert step == 5 and (folder / "model.pdparams").read_bytes() == bytes([5]) * 1000


def test_a_gone_writers_checkpoints_are_pruned_once_its_record_is_stale(store_uri, tmp_path: Path) -> None:
    uri, endpoint = store_uri
    a = CheckpointStore(uri, endpoint, keep=1, writer_id="writer-a")
    b = CheckpointStore(uri, endpoint, keep=1, writer_id="writer-b")
    a.write(1, _files(tmp_path / "a1", 1))
    a.write(2, _files(tmp_path / "a2", 2))
    a.backend.put_file(tmp_path / "a2" / "model.pdparams", "3/model.pdparams", "x", lambda n: None)  # older code's
    b.write(4, _files(tmp_path / "b4", 4))
    assert b.steps() == [2, 4]  # a is live: its 2 stays; the unmarked leftover 3 counts as a gone writer's: pruned
    a.beat(now=time.time() - WRITER_STALE_SECONDS - 1)  # a's last heartbeat, long ago: killed on another node
    b.write(5, _files(tmp_path / "b5", 5))
    assert b.steps() == [5] and b.complete() == [5]
    # A gone writer's checkpoint newer than this writer's newest stays until this writer has a newer one.
    a.write(8, _files(tmp_path / "a8", 8))
    a.beat(now=time.time() - WRITER_STALE_SECONDS - 1)
    b.write(6, _files(tmp_path / "b6", 6))
    assert b.steps() == [6, 8]


def test_delete_all_leaves_a_live_writers_checkpoints(store_uri, tmp_path: Path) -> None:
    uri, endpoint = store_uri
    a = CheckpointStore(uri, endpoint, keep=2, writer_id="writer-a")
    b = CheckpointStore(uri, endpoint, keep=2, writer_id="writer-b")
    a.write(1, _files(tmp_path / "a1", 1))
    b.write(2, _files(tmp_path / "b2", 2))
    a.write(3, _files(tmp_path / "a3", 3))
    a.delete_all()  # a's model is exported; b still trains
    assert a.steps() == [2]
    b.retire()  # b ended (a clean end removes its record)
    a.delete_all()
    assert a.steps() == [] and a.writers() == ["writer-a"]
    a.retire()
    assert a.writers() == [] and a.backend.children("") == []  # nothing left behind


def test_a_writer_whose_process_ended_on_this_machine_is_gone_at_once(store_uri, tmp_path: Path) -> None:
    """A SIGKILLed trainer leaves a fresh record; on the same machine its ended process tells it is gone."""
    uri, endpoint = store_uri
    _files(tmp_path / "k1", 1)
    code = (
        "import sys; from pathlib import Path; from steps.runtime.training.checkpoint_store import CheckpointStore; "
        "CheckpointStore(sys.argv[1], sys.argv[2] or None, writer_id='killed').write(1, Path(sys.argv[3]))"
    )
    subprocess.run([sys.executable, "-c", code, uri, endpoint or "", str(tmp_path / "k1")], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)  # fmt: skip
    a = CheckpointStore(uri, endpoint, keep=1, writer_id="writer-a")
    assert a.writers() == ["killed"]  # never retired: its record is fresh
    a.write(2, _files(tmp_path / "a2", 2))
    assert a.steps() == [2]


class _SlowSnapshot:
    """What CheckpointWriter writes, taking `seconds` to serialise (a large model)."""

    def __init__(self, step: int, seconds: float) -> None:
        self.step, self.seconds, self.meta = step, seconds, {"run_id": "r"}

    def write(self, directory: Path) -> None:
        time.sleep(self.seconds)
        _files(directory, self.step)


def test_the_end_of_training_is_checkpointed_whenever_checkpoints_are_on_and_close_waits_for_it(
    tmp_path: Path,
) -> None:
    timed = load_config(env="local", overrides=["training.checkpoint.epoch_end=false",
                                                "training.checkpoint.every_seconds=600"])  # fmt: skip
    checkpointer = Checkpointer(timed, str(tmp_path / "run" / "checkpoints"), rank=0)
    checkpointer.at_epoch_end(4, False, lambda: _SlowSnapshot(4, 0))  # epoch_end is off: none after epoch 1
    assert checkpointer.writer is not None and not checkpointer.writer.busy()
    checkpointer.at_epoch_end(8, True, lambda: _SlowSnapshot(8, 1.0))  # the end of training: one, in the background
    assert checkpointer.writer.busy()
    checkpointer.close(timeout=60)  # how the step ends, a SIGTERM during the export included
    assert checkpointer.store.complete() == [8] and checkpointer.store.writers() == []

    off = load_config(env="local", overrides=["training.checkpoint.epoch_end=false"])
    assert not off.training.checkpoint.enabled
    quiet = Checkpointer(off, str(tmp_path / "off" / "checkpoints"), rank=0)
    quiet.at_epoch_end(8, True, lambda: _SlowSnapshot(8, 0))
    quiet.close(timeout=60)
    assert quiet.store.steps() == []


def test_a_checkpoint_without_a_batch_layout_is_a_clear_error(tmp_path: Path) -> None:
    """Resume needs the layout the data position was counted in; without one it stops (exit 2), not KeyError."""
    layout = {"world_size": 1, "batch_size": 16, "grad_accumulation": 1, "seed": 42}
    check_layout("store/4", dict(layout), layout)  # the same layout resumes
    with pytest.raises(StepError, match="records no batch layout.*another run id"):
        check_layout("store/4", None, layout)
    with pytest.raises(StepError, match="batch_size 8 -> 16"):
        check_layout("store/4", {**layout, "batch_size": 8}, layout)


def test_the_checkpoint_settings_per_environment_and_the_renamed_key() -> None:
    from paddle_mlops_core.config import ConfigError, load_config

    for env in ("dev", "prod"):  # every 10 minutes on the cluster
        assert load_config(env=env).training.checkpoint.every_seconds == 600
    local = load_config(env="local").training.checkpoint
    assert (local.every_steps, local.every_seconds, local.epoch_end, local.keep) == (0, 0, True, 2)  # one per epoch
    with pytest.raises(ConfigError, match=r"'training.checkpoint_every' was replaced by training.checkpoint.every"):
        load_config(env="local", overrides=["training.checkpoint_every=5"])
    with pytest.raises(ConfigError, match="shorter than the measured"):
        load_config(env="local", overrides=["training.checkpoint.grace_seconds=15"])


# --- resuming ------------------------------------------------------------------------------------------------------

# 64 training texts, batch 8: 8 steps an epoch; 12 steps cross into epoch 2. Dropout stays on (0.1): only restored
# generator states reproduce its masks.
RUN = ("training.batch_size=8", "training.epochs=2", "training.max_steps=12", "training.checkpoint.every_steps=3")


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("PADDLE_MLOPS_RUN", "run-resume")
    return uri


def _run(
    ws: Path, dump: Path, trace: Path, monkeypatch: pytest.MonkeyPatch, *args: str, overrides: tuple[str, ...] = ()
) -> int:
    monkeypatch.setenv(TRACE_ENV, str(trace))
    return train.main([*common(*RUN, *overrides), "--workspace", str(ws), "--dump-params", str(dump), *args])


def _trace(path: Path) -> list[dict]:
    """Each step's record without its wall time (which differs between runs)."""
    rows = [json.loads(line) for line in Path(f"{path}.0").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "time"} for row in rows]


def _stop_after(monkeypatch: pytest.MonkeyPatch, stop_step: int) -> None:
    """What SIGTERM leads to, at a known step: the ranks agree to stop after `stop_step`."""
    monkeypatch.setattr(graceful_stop.StopDecision, "after_step", lambda self, step: step >= stop_step)


@pytest.mark.slow
@pytest.mark.parametrize("stop_step", [5, 8, 12])
def test_a_stopped_run_resumes_to_the_uninterrupted_runs_parameters(
    stop_step: int, tracking: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped mid-epoch (5), at an epoch's last step before its evaluation (8) or at the run's last step (12),
    then run again."""
    caplog.set_level(logging.INFO)
    reference = write_workspace(tmp_path / "reference", n_train=64, n_dev=16, n_test=16)
    with monkeypatch.context() as patch:  # its own MLflow store: the one below must hold the resumed run alone
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'reference.db'}")
        assert _run(reference, tmp_path / "reference.npz", tmp_path / "reference-trace", monkeypatch) == 0

    ws = write_workspace(tmp_path / "ws", n_train=64, n_dev=16, n_test=16)
    with monkeypatch.context() as patch:
        _stop_after(patch, stop_step)
        assert _run(ws, tmp_path / "unused.npz", tmp_path / "trace", monkeypatch) == EXIT_TERMINATED
    run_id = json.loads((reference / "model" / "training.json").read_text())["run_id"]
    store = CheckpointStore(str(ws / "train" / "sentiment" / run_id / "checkpoints"))
    assert store.complete()[-1] == stop_step  # the stop wrote its own checkpoint before exiting
    client = mlflow.MlflowClient(tracking)
    experiment = client.get_experiment_by_name("ernie-sentiment").experiment_id
    assert [r.info.status for r in client.search_runs([experiment])] == ["KILLED"]

    caplog.clear()
    assert _run(ws, tmp_path / "resumed.npz", tmp_path / "trace", monkeypatch) == 0
    assert f"resuming from checkpoint step {stop_step}" in caplog.text
    training = json.loads((ws / "model" / "training.json").read_text())
    assert (training["resumed_from_step"], training["steps_run"], training["run_id"]) == (
        stop_step,
        12 - stop_step,
        run_id,
    )

    # Bit for bit: restored parameters, optimizer moments, LR schedule and generator states (dropout masks).
    left, right = np.load(tmp_path / "reference.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(left.files) == sorted(right.files)
    assert all(np.array_equal(left[name], right[name]) for name in left.files)
    # The same examples in the same order, none twice, none skipped; the same learning rate at every step.
    want, got = _trace(tmp_path / "reference-trace"), _trace(tmp_path / "trace")
    assert [r["step"] for r in got] == list(range(1, 13))
    assert got == want
    if stop_step < 12:
        assert got[stop_step]["lr"] == want[stop_step]["lr"]  # the first resumed step
    epoch_one = [h for r in got if r["epoch"] == 0 for h in r["examples"]]
    assert len(epoch_one) == len(set(epoch_one)) == 64

    # One MLflow run, continued: epoch metrics at steps 1 and 2 once each, FINISHED.
    assert [r.info.run_id for r in client.search_runs([experiment])] == [training["mlflow_run_id"]]
    resumed = client.get_run(training["mlflow_run_id"])
    assert resumed.info.status == "FINISHED" and resumed.data.tags["resumed_from_step"] == str(stop_step)
    assert [m.step for m in client.get_metric_history(resumed.info.run_id, "dev_accuracy")] == [1, 2]
    # Once the model is exported the run's checkpoints are gone.
    assert store.steps() == []


@pytest.mark.slow
def test_an_explicit_run_id_with_another_batch_layout_is_refused(
    tracking: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run id given by hand keeps its checkpoints whatever the settings; resuming them with another batch size
    would skip the wrong samples, so it stops (exit 2) naming what changed, and keeps the checkpoint."""
    ws = write_workspace(tmp_path / "ws", n_train=64, n_dev=16, n_test=16)
    with monkeypatch.context() as patch:
        _stop_after(patch, 3)
        assert _run(ws, tmp_path / "a.npz", tmp_path / "t", monkeypatch, "--run-id", "nightly") == EXIT_TERMINATED
    capsys.readouterr()
    code = train.main([*common(*RUN, "training.batch_size=16"), "--workspace", str(ws), "--run-id", "nightly"])
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR and "batch_size 8 -> 16" in err and "Traceback" not in err
    assert CheckpointStore(str(ws / "train" / "sentiment" / "nightly" / "checkpoints")).complete() == [3]


@pytest.mark.slow
def test_sigterm_during_the_export_exits_at_once_and_the_resume_only_exports_again(
    tracking: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A real SIGTERM while rank 0 exports: the step exits 143 once the end of training's checkpoint (taken after the
    last epoch's scoring, uploading while the export runs) is in the store; the next attempt resumes at the last
    step, trains and scores nothing, and exports the uninterrupted run's model."""
    caplog.set_level(logging.INFO)
    cadence = "training.checkpoint.every_steps=5"  # 5, 8 (the epoch's end), 10; the end of training (12) its own
    reference = write_workspace(tmp_path / "reference", n_train=64, n_dev=16, n_test=16)
    with monkeypatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'reference.db'}")
        trace = tmp_path / "reference-trace"
        assert _run(reference, tmp_path / "reference.npz", trace, monkeypatch, overrides=(cadence,)) == 0

    ws = write_workspace(tmp_path / "ws", n_train=64, n_dev=16, n_test=16)
    export, stopped = Trainer._finish, {}

    def finish_under_sigterm(self: Trainer, *args: Any) -> None:
        stopped["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # the export, interrupted
        export(self, *args)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_finish", finish_under_sigterm)
        code = _run(ws, tmp_path / "unused.npz", tmp_path / "trace", monkeypatch, overrides=(cadence,))
        took = time.monotonic() - stopped["at"]
    assert code == EXIT_TERMINATED and took < 10, (code, took)
    run_id = json.loads((reference / "model" / "training.json").read_text())["run_id"]
    store = CheckpointStore(str(ws / "train" / "sentiment" / run_id / "checkpoints"))
    assert store.complete()[-1] == 12 and not (ws / "model" / "training.json").exists()
    state = json.loads((store.backend.read("12/state.json") or b"{}").decode())
    assert (state["epoch"], state["batches_done"], len(state["history"])) == (2, 0, 2)  # after the last scoring

    caplog.clear()
    assert _run(ws, tmp_path / "resumed.npz", tmp_path / "trace", monkeypatch, overrides=(cadence,)) == 0
    assert "resuming from checkpoint step 12" in caplog.text and "epoch 2:" not in caplog.text  # no scoring again
    training = json.loads((ws / "model" / "training.json").read_text())
    assert (training["resumed_from_step"], training["steps_run"]) == (12, 0)
    left, right = np.load(tmp_path / "reference.npz"), np.load(tmp_path / "resumed.npz")
    assert all(np.array_equal(left[name], right[name]) for name in left.files)
    assert _trace(tmp_path / "trace") == _trace(tmp_path / "reference-trace")
    client = mlflow.MlflowClient(tracking)
    assert [m.step for m in client.get_metric_history(training["mlflow_run_id"], "dev_accuracy")] == [1, 2]
    assert store.steps() == []
