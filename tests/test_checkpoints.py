"""Checkpoints in the run's store (steps/runtime/training/checkpoint_store.py) and an exact resume from them.

The store is the object-store backends publishing uses, so every test runs on a directory and on moto's S3 server
(tests/s3server.py; production uses MinIO). The resume tests train the tiny ERNIE in this process, stop it the
way SIGTERM does (a stop decision after step k) and require the resumed run to end with the uninterrupted run's
parameters bit for bit, the same learning rate at the first resumed step and every example of the epoch trained
exactly once, in one MLflow run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pytest
from fixtures_ernie import common
from s3server import moto_s3_server
from test_train import write_workspace

from paddle_mlops_core.contracts import EXIT_TERMINATED, EXIT_USER_ERROR
from steps import train
from steps.runtime.runner import StepError
from steps.runtime.training import graceful_stop
from steps.runtime.training.checkpoint_store import CheckpointStore, check_layout
from steps.runtime.training.trace import TRACE_ENV


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


def _run(ws: Path, dump: Path, trace: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setenv(TRACE_ENV, str(trace))
    return train.main([*common(*RUN), "--workspace", str(ws), "--dump-params", str(dump), *args])


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
