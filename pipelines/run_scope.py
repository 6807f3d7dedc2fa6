"""Where a step reads the run's task, overrides and workspace: from the workflow, or from its branch.

`train-deploy` runs one task, so every step reads the workflow's parameters. `finetune-batch` runs one branch per
task; the same step templates, built with `BRANCH`, take the task and its overrides as template inputs and work
in a workspace of their own (`<workspace>/<workflow>/<task>`), so branches never share data, models or MLflow runs.
Training runs keep their checkpoints outside both, under `<workspace>/train/<task>/<run id>/` (CHECKPOINT_ROOT), so a
resubmitted workflow, whose name is new, still finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER, TRAIN_RUNS


@dataclass(frozen=True)
class RunScope:
    task: str  # the --task argument every step gets
    overrides: str  # the --overrides argument (a JSON list of "a.b=c")
    workspace: str  # the per-run area the steps exchange data and models in
    inputs: tuple[str, ...]  # template inputs that carry the values above (none: workflow parameters)
    # The training job's name: fixed per workflow and task, so that every attempt of the train step finds the job an
    # earlier one created (steps/runtime/cluster/train_job.py); its checkpoints follow the run id, not this name.
    job_name: str = "{{workflow.name}}-train"
    # The MLflow run the training run is a child of (the train step's input, passed to steps/train.py as
    # --parent-run-id): finetune-batch's parent run; empty: none, the task's own run.
    parent_run: str = ""


WORKFLOW = RunScope(
    task="{{workflow.parameters.task}}",
    overrides="{{workflow.parameters.overrides}}",
    workspace="{{workflow.parameters.workspace}}/{{workflow.name}}",
    inputs=(),
)
BRANCH = RunScope(
    task="{{inputs.parameters.task}}",
    overrides="{{inputs.parameters.overrides}}",
    workspace="{{workflow.parameters.workspace}}/{{workflow.name}}/{{inputs.parameters.task}}",
    inputs=("task", "overrides"),
    job_name="{{workflow.name}}-train-{{inputs.parameters.task}}",
    parent_run=f"{{{{inputs.parameters.{BATCH_PARENT_PARAMETER}}}}}",
)

# Where every train step keeps its runs' checkpoints (the step adds `<task>/<run id>/checkpoints/`), and the run id
# it is told: the `run-id` workflow parameter, empty for the digest of the run's training inputs.
CHECKPOINT_ROOT = "{{workflow.parameters.workspace}}/" + TRAIN_RUNS
RUN_ID = "{{workflow.parameters.run-id}}"
