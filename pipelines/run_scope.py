"""Where a step reads the run's task, overrides and workspace: from the workflow, or from its branch.

`train-deploy` runs one task, so every step reads the workflow's parameters. `finetune-batch` runs one branch per
task; the same step templates, built with `BRANCH`, take the task and its overrides as template inputs and work
in a workspace of their own (`<workspace>/<workflow>/<task>`), so branches never share data, models or MLflow runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunScope:
    task: str  # the --task argument every step gets
    overrides: str  # the --overrides argument (a JSON list of "a.b=c")
    workspace: str  # the per-run area the steps exchange data and models in
    inputs: tuple[str, ...]  # template inputs that carry the values above (none: workflow parameters)


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
)
