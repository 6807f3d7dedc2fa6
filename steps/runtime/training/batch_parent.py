"""finetune-batch's parent MLflow run: opened once per workflow before the fan-out, ended by the summary.

The parent lives in the experiment contracts.BATCH_EXPERIMENT, beside its tasks' training runs, which start as its
children (tracking.start_run `parent_run_id`): MLflow's UI nests a child under its parent within one experiment only.
It is found by its workflow (tags `workflow=<name>` and PARENT_TAG), so an attempt of the step that opens it after
one that created it finds that run instead of starting a second; the `workflow` tag is also what the exit handler
closes a run left RUNNING by (steps/close_run.py), when the workflow fails before its summary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from paddle_mlops_core import contracts
from paddle_mlops_core.config import PipelineConfig
from steps.runtime.runner import StepError

# The parent's own tag: its children carry the same `workflow` tag, in the same experiment.
PARENT_TAG, PARENT = "batch", "parent"
TASKS_TAG = "tasks"  # the batch's tasks, comma-separated
OUTCOME_TAG = "outcome.{task}"  # each task's outcome (steps/batch_summary.py: published, gate-failed, failed)


def _client(cfg: PipelineConfig) -> Any:
    from steps.runtime.release import registry

    return registry.connect(cfg)


def open_parent(cfg: PipelineConfig, workflow: str, tasks: Sequence[str], git_sha: str) -> str:
    """The id of `workflow`'s parent run: the one an earlier attempt created (RUNNING again if something closed it),
    else a new one in contracts.BATCH_EXPERIMENT named after the workflow and tagged with its tasks."""
    from mlflow.entities import RunStatus

    from steps.runtime.release import registry
    from steps.runtime.training import tracking

    if not workflow:
        raise StepError("no workflow name: pass --workflow-name (Argo's {{workflow.name}})")
    client = _client(cfg)
    experiment = tracking.open_training_experiment(contracts.BATCH_EXPERIMENT, registry.tracking_uri(cfg))
    found = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.workflow = '{workflow}' and tags.{PARENT_TAG} = '{PARENT}'",
        order_by=["attributes.start_time ASC"],
        max_results=1,
    )
    if found:
        run = found[0]
        if run.info.status != RunStatus.to_string(RunStatus.RUNNING):
            client.update_run(run.info.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        return str(run.info.run_id)
    tags = {"workflow": workflow, PARENT_TAG: PARENT, TASKS_TAG: ",".join(tasks), "git_sha": git_sha}
    run = client.create_run(experiment.experiment_id, run_name=workflow, tags=tags)
    return str(run.info.run_id)


def end_parent(cfg: PipelineConfig, run_id: str, outcomes: Sequence[dict[str, Any]], failed: bool) -> str:
    """Log each task's outcome on the parent run (a tag per task, a metric per test metric: `<task>.<metric>`) and
    end it: FAILED when a task `failed`, else FINISHED (a gate that refused a model is a result). Its status."""
    from mlflow.entities import Metric, RunTag

    client, now = _client(cfg), int(time.time() * 1000)
    tags = [RunTag(OUTCOME_TAG.format(task=row["task"]), str(row["outcome"])) for row in outcomes]
    metrics = [
        Metric(f"{row['task']}.{name}", float(value), now, 0)
        for row in outcomes
        for name, value in (row.get("metrics") or {}).items()
        if isinstance(value, (int, float))
    ]
    client.log_batch(run_id, metrics=metrics, tags=tags)
    client.log_dict(run_id, list(outcomes), "batch/summary.json")
    status = "FAILED" if failed else "FINISHED"
    client.set_terminated(run_id, status=status)
    return status
