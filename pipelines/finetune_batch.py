"""WorkflowTemplate `finetune-batch`: many fine-tunes submitted as one workflow, one parallel branch per task.

`tasks` is a JSON list of `{"task": NAME, "overrides": ["a.b=c", …]}` (configs/tasks/NAME.yaml plus its own
overrides). build-image builds the commit once; `batch-run` opens the batch's parent MLflow run (steps/batch_run.py)
in the `finetune-batch` experiment; then `finetune` fans out over the list (`withParam`): each branch is the
train-deploy chain (prepare-data → train → evaluate → upload when its gate passed) built from the same step
templates, reading its task and overrides from its inputs and working in `<workspace>/<run>/<task>`
(pipelines/run_scope.py), its training run a child of the parent run. Each branch creates its own training job (its
own worker group, labelled with the task, under the mutex of its training run: pipelines/train_step.py) and
publishes under its own model name, whose bucket notification starts that task's `rollout` (validate → register →
rollout). A failing branch cancels nothing: the DAG is not fail-fast and `summary` runs after every branch has
ended, lists each task's outcome, ends the parent run with it (FAILED when a task failed) and fails the workflow if
a task failed.

A training image no canary has passed on trains in the first region first (pipelines/training_canary.py, TrainJob
backend), before the fan-out: training-image → (new) prepare-canary-data, prepull-canary → train-canary →
allow-training-image → finetune, prepull-image. A failed canary omits the fan-out, so no branch trains and no other
region pulls the image: the batch stops there (the workflow fails at train-canary; `summary` is not run, there being
no branch to report), as train-deploy does, and every region keeps the images allowed before.
"""

from __future__ import annotations

import json

from hera.workflows import DAG, Parameter, WorkflowTemplate
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.loader import known_tasks
from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER
from pipelines import resource_templates, templates, train_step, training_canary, workflow_spec
from pipelines.dag_task import dag_task
from pipelines.run_scope import BRANCH

NAME = "finetune-batch"
BRANCH_TEMPLATE = "finetune-task"
FAN_OUT = "finetune"
PARENT_RUN = "batch-run"
# A branch's inputs: its task and overrides (the item), what build-image made for all of them, and the batch's parent
# MLflow run (batch-run), which its train step's run is a child of.
BRANCH_INPUTS = ("task", "overrides", "git-sha", "image-digest", "serve-image-digest", BATCH_PARENT_PARAMETER)
# Every way a branch group can end; `summary` runs after any of them.
ENDED = " || ".join(f"{FAN_OUT}.{state}" for state in ("Succeeded", "Failed", "Errored"))


def parameters(cfg: PipelineConfig) -> list[Parameter]:
    default = [{"task": task, "overrides": []} for task in known_tasks() if task == cfg.task]
    # `task` and `overrides` stay: build-image, summary and the exit handler load that configuration; each branch
    # loads its own task with its own overrides.
    shared = workflow_spec.run_parameters(cfg)
    return [
        Parameter(name="git-sha", description="commit to build and train; empty builds the head of git-branch"),
        Parameter(name="git-repo", description="repository URL the build step clones"),
        Parameter(name="git-branch", value="main"),
        Parameter(
            name="tasks",
            value=json.dumps(default),
            description='JSON list of {"task": NAME, "overrides": ["a.b=c", ...]}: one branch per item '
            f"(tasks: {', '.join(known_tasks())}); `paddle-mlops submit {NAME} --task …` builds it",
        ),
        *shared,
        Parameter(name="region", value=cfg.cluster.region),
        *workflow_spec.priority_parameters(cfg),
        *workflow_spec.run_id_parameters(),
    ]


def _branch(cfg: PipelineConfig) -> DAG:
    """`finetune-task`: one task's chain, on the branch-scoped step templates."""
    prepare_data = templates.prepare_data(cfg, BRANCH)
    train_cache = templates.train_cache(cfg, BRANCH)
    train = train_step.train(cfg, BRANCH)
    evaluate = templates.evaluate(cfg, BRANCH)
    upload = templates.upload(cfg, BRANCH)
    with DAG(name=BRANCH_TEMPLATE, inputs=[Parameter(name=name) for name in BRANCH_INPUTS]) as branch:
        given = {name: f"{{{{inputs.parameters.{name}}}}}" for name in BRANCH_INPUTS}
        task = {name: given[name] for name in ("git-sha", *BRANCH.inputs)}
        steps = (prepare_data, train_cache, train, evaluate, upload)
        parent = {BATCH_PARENT_PARAMETER: given[BATCH_PARENT_PARAMETER]}
        templates.chain(steps, task, given["image-digest"], given["serve-image-digest"], parent)
    return branch


def build(cfg: PipelineConfig) -> WorkflowTemplate:
    """The `finetune-batch` WorkflowTemplate for this configuration (no side effects)."""
    with workflow_spec.workflow_template(cfg, NAME, parameters(cfg)) as wt:
        build_image = templates.build_image(cfg)
        branch = _branch(cfg)
        parent_run = templates.batch_run(cfg)
        summary = templates.batch_summary(cfg)
        warm = training_canary.applies(cfg)  # the TrainJob backend: pre-pulls, and a new image's canary
        if warm:
            prepull_image = resource_templates.prepull_image(cfg)
            canary_tasks = training_canary.tasks(cfg, batch=True)
        templates.exit_handler(cfg, trains=True)
        # Not fail-fast: a failed branch neither stops the others nor the summary (dag.go assessDAGPhase judges
        # the DAG by its leaves, so `summary` failing is what fails the workflow when a task failed).
        with DAG(name="main", fail_fast=False):
            t_build = dag_task(build_image, name="build-image")
            built = {
                "git-sha": t_build.get_parameter("git-sha"),
                "image-digest": t_build.get_parameter("image-digest"),
                "serve-image-digest": t_build.get_parameter("serve-image-digest"),
            }
            # The batch's parent MLflow run, beside the canary: every branch's training run is its child.
            t_parent = dag_task(parent_run, name=PARENT_RUN, arguments={"git-sha": built["git-sha"]})
            parent = {BATCH_PARENT_PARAMETER: t_parent.get_parameter(BATCH_PARENT_PARAMETER)}
            t_fan = dag_task(
                branch,
                name=FAN_OUT,
                with_param="{{workflow.parameters.tasks}}",
                arguments={"task": "{{item.task}}", "overrides": "{{item.overrides}}", **built, **parent},
            )
            t_build >> t_parent
            t_parent >> t_fan
            dag_task(summary, name="summary", depends=ENDED, arguments={"git-sha": built["git-sha"], **parent})
            if warm:
                digest = {"image-digest": built["image-digest"]}
                # A training image no canary has passed on trains in the first region first; every branch trains,
                # and every other region pulls it, once the canary passed or was not needed.
                t_allowed = canary_tasks(t_build, None, {"git-sha": built["git-sha"], **digest})
                t_allowed >> t_fan
                t_warm = dag_task(
                    prepull_image, name="prepull-image", arguments=digest, continue_on=m.ContinueOn(failed=True)
                )
                t_allowed >> t_warm
    return wt
