"""finetune-batch as one MLflow parent run with a child run per task (#62 item 4): `batch-run` opens the parent once
per workflow, a train step given its id starts the task's run as its child in the parent's experiment, and the exit
handler closes a parent the workflow left RUNNING.

MLflow behaviour encoded here (mlflow 3.17, mlflow/tracking/fluent.py start_run): a new run started with
`parent_run_id` carries the tag `mlflow.parentRunId` (MLFLOW_PARENT_RUN_ID, mlflow/utils/mlflow_tags.py), which is
what the UI nests it by, within its experiment; a run resumed by `run_id` must be in the active experiment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import BATCH_EXPERIMENT, BATCH_PARENT_PARAMETER
from steps import batch_run
from steps.runtime.release import registry
from steps.runtime.runner import StepStopped
from steps.runtime.training import tracking
from tests.fixtures_ernie import CONFIG, common

TASKS = json.dumps([{"task": "sentiment", "overrides": []}, {"task": "ner", "overrides": []}])


@pytest.fixture(autouse=True)
def own_mlflow(isolated_home: Path) -> Path:
    """Each test its own MLflow store (the steps set MLFLOW_TRACKING_URI for the process: monkeypatch restores it)."""
    return isolated_home


def _open(tmp_path: Path, workflow: str) -> str:
    """`python -m steps.batch_run` for `workflow`; its `parent-run-id` output."""
    out = tmp_path / f"out-{workflow}"
    argv = [*common(), "--git-sha", "abc123", "--tasks", TASKS, "--workflow-name", workflow, "--outputs-dir", str(out)]
    assert batch_run.main(argv) == 0
    return (out / BATCH_PARENT_PARAMETER).read_text()


def _client() -> MlflowClient:
    return MlflowClient(registry.tracking_uri(_cfg()))


def _cfg(task: str = "sentiment") -> Any:
    return load_config(CONFIG, "local", task=task)


def test_the_step_opens_one_parent_run_per_workflow_and_a_retry_finds_it(tmp_path: Path) -> None:
    parent = _open(tmp_path, "finetune-batch-abc")
    assert _open(tmp_path, "finetune-batch-abc") == parent  # a retry of the step: the same run, no second one
    client = _client()
    experiment = client.get_experiment_by_name(BATCH_EXPERIMENT)
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == tracking.MODEL_TRAINING
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == parent and run.info.status == "RUNNING"
    assert run.info.run_name == "finetune-batch-abc"
    assert run.data.tags["workflow"] == "finetune-batch-abc" and run.data.tags["tasks"] == "sentiment,ner"
    assert run.data.tags["git_sha"] == "abc123"
    # A parent something closed (the exit handler of a stopped workflow, then `argo retry`) runs again.
    client.set_terminated(parent, "FAILED")
    assert _open(tmp_path, "finetune-batch-abc") == parent
    assert client.get_run(parent).info.status == "RUNNING"
    # Another workflow, another parent.
    assert _open(tmp_path, "finetune-batch-def") != parent


def test_a_training_run_given_a_parent_is_its_child_in_the_parent_s_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PADDLE_MLOPS_RUN", "finetune-batch-abc")
    parent = _open(tmp_path, "finetune-batch-abc")
    with tracking.start_run(_cfg("ner"), "abc123", 1, {}, parent_run_id=parent) as child_id:
        pass
    client = _client()
    child = client.get_run(child_id)
    assert child.data.tags[MLFLOW_PARENT_RUN_ID] == parent
    assert child.info.experiment_id == client.get_run(parent).info.experiment_id
    assert child.info.run_name == "finetune-batch-abc-ner" and child.data.tags["task"] == "ner"
    assert child.data.tags["workflow"] == "finetune-batch-abc" and child.info.status == "FINISHED"
    # A single-task run is unchanged: its task's own experiment, no parent.
    with tracking.start_run(_cfg("sentiment"), "abc123", 1, {}) as own_id:
        pass
    own = client.get_run(own_id)
    assert client.get_experiment(own.info.experiment_id).name == "ernie-sentiment"
    assert MLFLOW_PARENT_RUN_ID not in own.data.tags and own.info.run_name == "finetune-batch-abc"


def test_a_child_trained_where_no_workflow_name_is_set_takes_the_parent_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TrainJob's pods are no Argo pods, and Argo 3.6/3.7 sets ARGO_WORKFLOW_NAME only in its own init and wait
    containers (argoproj/argo-workflows workflow/controller/workflowpod.go, `createEnvVars` for `newExecContainer`):
    the child takes the workflow from its parent, so it is named `<workflow>-<task>` and the exit handler, which
    closes runs by the `workflow` tag (steps/close_run.py), finds it."""
    monkeypatch.setenv("PADDLE_MLOPS_RUN", "finetune-batch-xyz")
    parent = _open(tmp_path, "finetune-batch-xyz")
    monkeypatch.delenv("PADDLE_MLOPS_RUN")
    monkeypatch.delenv("ARGO_WORKFLOW_NAME", raising=False)
    with pytest.raises(StepStopped), tracking.start_run(_cfg("ner"), "abc", 1, {}, parent_run_id=parent) as child_id:
        raise StepStopped
    child = _client().get_run(child_id)
    assert child.info.run_name == "finetune-batch-xyz-ner" and child.data.tags["workflow"] == "finetune-batch-xyz"


def test_a_resumed_child_stays_a_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint's run resumed by a retried train step (or the next batch of the same inputs) goes on in its
    experiment, under the batch that now trains it; a run a single-task workflow started is resumed where it is."""
    monkeypatch.setenv("PADDLE_MLOPS_RUN", "finetune-batch-abc")
    parent = _open(tmp_path, "finetune-batch-abc")
    with pytest.raises(StepStopped), tracking.start_run(_cfg(), "abc123", 1, {}, parent_run_id=parent) as child_id:
        raise StepStopped
    client = _client()
    assert client.get_run(child_id).info.status == "KILLED"
    with tracking.start_run(
        _cfg(), "abc", 1, {}, resume_run_id=child_id, resumed_from=4, parent_run_id=parent
    ) as again:
        assert again == child_id and client.get_run(child_id).info.status == "RUNNING"
    resumed = client.get_run(child_id)
    assert resumed.data.tags[MLFLOW_PARENT_RUN_ID] == parent and resumed.data.tags["resumed_from_step"] == "4"
    # Resumed by the next batch: its child now.
    monkeypatch.setenv("PADDLE_MLOPS_RUN", "finetune-batch-def")
    later = _open(tmp_path, "finetune-batch-def")
    with tracking.start_run(_cfg(), "abc", 1, {}, resume_run_id=child_id, resumed_from=6, parent_run_id=later):
        pass
    assert client.get_run(child_id).data.tags[MLFLOW_PARENT_RUN_ID] == later
    # A train-deploy run's checkpoint resumed in a batch: continued in its own experiment (MLflow nests within one).
    with pytest.raises(StepStopped), tracking.start_run(_cfg(), "abc", 1, {}) as own_id:
        raise StepStopped
    with tracking.start_run(_cfg(), "abc", 1, {}, resume_run_id=own_id, parent_run_id=later) as again:
        assert again == own_id
    own = client.get_run(own_id)
    assert own.info.status == "FINISHED" and MLFLOW_PARENT_RUN_ID not in own.data.tags


def test_the_exit_handler_closes_a_parent_the_workflow_left_running(tmp_path: Path) -> None:
    """A workflow that fails before its summary (a failed canary omits the fan-out) leaves the parent RUNNING:
    close-run finds it by its `workflow` tag (steps/close_run.py)."""
    parent = _open(tmp_path, "finetune-batch-abc")
    other = _open(tmp_path, "finetune-batch-def")
    assert registry.close_runs("finetune-batch-abc", "FAILED", client=_client()) == [parent]
    assert _client().get_run(parent).info.status == "FAILED"
    assert _client().get_run(other).info.status == "RUNNING"
