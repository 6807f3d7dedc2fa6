"""The workflows' resource templates: Argo creates and deletes cluster objects with kubectl, no step container.

`train` creates the training job (training_backend.py) and waits for its verdict; its tasks' exit hook deletes the
workflow's training jobs unless the task succeeded. `prepull-image` creates the pre-pull DaemonSet (prepull.py) and
`release-prepull` deletes it. Each delete selects by the workflow label every object these templates create carries.
"""

from __future__ import annotations

from typing import Any

import yaml
from hera.workflows import Parameter, Resource
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from pipelines import k8s, prepull
from pipelines.job_spec import TrainingJobSpec
from pipelines.labels import TASK_LABEL, WORKFLOW_LABEL
from pipelines.observability import argo_template_metrics
from pipelines.run_scope import WORKFLOW, RunScope
from pipelines.training_backend import training_job

DELETE_TRAIN_JOBS = "delete-train-jobs"
# Get-or-create under the job's fixed name (run_scope.RunScope.job_name). The first attempt of the train step creates
# the job; an Argo retry of the step (its pod lost, the executor errored) gets the job the first attempt created and
# waits on it again, instead of creating a second one beside it while the first still holds its GPUs. `retries` is
# the attempt's number, set for each attempt of a template with a retryStrategy (argo-workflows v4.1.2
# workflow/controller/operator.go executeTemplate), and expressions naming it are evaluated only then
# (util/template/expression_template.go variablesToCheck); at submission the validator sees a placeholder for it, so
# the expression reads `get`, a valid action (workflow/validate/validate.go). `argo retry` of a failed workflow
# deletes the failed attempts (workflow/util/util.go FormulateRetryWorkflow), so its first attempt creates again: the
# exit hook deleted the failed job. `apply` would not do: kubectl's three-way merge would set `spec.suspend: true`
# again on a job Kueue admitted and replace `runtimePatches`, dropping Kueue's entry
# (tests/test_upstream_argo_resource.py).
TRAIN_ACTION = "{{=retries == '0' ? 'create' : 'get'}}"


class TrainResource(Resource):
    """The train template; every DAG task that runs it carries an exit hook deleting the workflow's
    training jobs unless the task succeeded.

    Argo only owner-references what a resource template creates (argo-workflows v4.1.2
    workflow/controller/operator.go executeResource): a step that fails, times out or is stopped
    leaves its job running, on its GPUs, until the Workflow object is deleted.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = kwargs.get("name", self.name)
        # The exit hook runs once the task (with its retries) has ended, also after `argo stop` and
        # past the workflow deadline; `tasks.<name>.status` is set for it (workflow/controller/dag.go).
        # A task skipped by its `when` (training reused from the step cache) created no job: argo-workflows v4.1.2
        # workflow/controller/dag.go runs the exit hook of every completed node, Skipped ones included, so the
        # expression leaves them out.
        hook = m.LifecycleHook(
            template=DELETE_TRAIN_JOBS,
            expression=f'tasks["{name}"].status != "Succeeded" && tasks["{name}"].status != "Skipped"',
        )
        if self._takes("task"):
            # A finetune-batch branch deletes only its own task's jobs. The hook's arguments resolve in the scope of
            # the DAG the task is in, which holds that DAG's inputs (argo-workflows v4.1.2 workflow/controller/dag.go
            # buildLocalScopeFromTask -> scope.go createScope; exit_handler.go resolveExitTmplArgument).
            hook.arguments = m.Arguments(parameters=[m.Parameter(name="task", value="{{inputs.parameters.task}}")])
        kwargs.setdefault("hooks", {"exit": hook})
        return super().__call__(*args, **kwargs)

    def _takes(self, name: str) -> bool:
        """Whether the template has the input parameter `name` (its inputs are a list of Parameters)."""
        inputs = self.inputs if isinstance(self.inputs, list) else []
        return any(isinstance(p, (Parameter, m.Parameter)) and p.name == name for p in inputs)


def train(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> Resource:
    """Create the training job (TrainJob or PaddleJob) and wait for its success or failure condition; also defines the
    `delete-train-jobs` template its tasks' exit hook runs.

    The template deadline is the longest wait before the job runs plus the job's own deadline
    (`JobConfig.step_deadline_seconds`). A TrainJob's wait is its time in Kueue's queue, up to
    `queue_timeout_seconds`, and Trainer starts `activeDeadlineSeconds` only when Kueue admits it (trainer v2.3.0
    pkg/controller/trainjob_controller.go reconcileDeadline: from the Suspended=False transition), so a run
    admitted within the queue budget is never cut by this deadline before its own; one still queued past it fails
    the step and its exit hook deletes it from the queue. A legacy PaddleJob's wait is gang scheduling.
    """
    job = training_job(cfg, scope)
    deadline = cfg.training.job.step_deadline_seconds(cfg.training.backend)
    template = TrainResource(
        name="train",
        action=TRAIN_ACTION,
        set_owner_reference=True,
        manifest=yaml.safe_dump(job.manifest, sort_keys=False, allow_unicode=True),
        success_condition=job.success_condition,
        failure_condition=job.failure_condition,
        inputs=[Parameter(name=name) for name in ("image-digest", "git-sha", "train-key", *scope.inputs)],
        timeout=f"{deadline}s",
        active_deadline_seconds=deadline,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics("train")),
    )
    delete_train_jobs(cfg, job, scope)
    return template


def delete_train_jobs(cfg: PipelineConfig, job: TrainingJobSpec, scope: RunScope = WORKFLOW) -> Resource:
    """`kubectl delete --ignore-not-found <trainjobs|paddlejobs>.<group> --selector paddle-mlops/workflow=<workflow>`,
    and in a finetune-batch branch `,paddle-mlops/task=<task>` (its `task` input), so a branch deletes only its own.

    Deleting the job deletes its pods (the TrainJob owns its JobSet; both PaddleJob operators own their pods).
    No manifest: Argo then runs kubectl with the flags alone (workflow/executor/resource.go
    getKubectlArguments); --wait=false returns without watching the Paddle operator's finalizer.
    """
    if not scope.inputs:
        return delete_workflow_objects(cfg, DELETE_TRAIN_JOBS, job.resource)
    return delete_workflow_objects(
        cfg,
        DELETE_TRAIN_JOBS,
        job.resource,
        selector=f"{TASK_LABEL}={{{{inputs.parameters.task}}}}",
        inputs=[Parameter(name="task")],
    )


def delete_workflow_objects(
    cfg: PipelineConfig, name: str, resource: str, selector: str | None = None, **extra: Any
) -> Resource:
    """Template `name`: `kubectl delete --ignore-not-found <resource> --selector paddle-mlops/workflow=<workflow>
    --wait=false` (`selector` adds requirements), the objects this workflow's resource templates created."""
    labels = ",".join([f"{WORKFLOW_LABEL}={{{{workflow.name}}}}", *([selector] if selector else [])])
    return Resource(
        name=name,
        action="delete",
        flags=[resource, "--selector", labels, "--wait=false"],
        timeout="300s",
        active_deadline_seconds=300,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics(name)),
        **extra,
    )


RELEASE_PREPULL = "release-prepull"


def prepull_image(cfg: PipelineConfig) -> Resource:
    """Create the pre-pull DaemonSet (pipelines/prepull.py) and return at once: the pulls go on while
    prepare-data runs; nothing waits for them."""
    return Resource(
        name="prepull-image",
        action="create",
        set_owner_reference=True,
        manifest=yaml.safe_dump(prepull.daemon_set(cfg), sort_keys=False, allow_unicode=True),
        inputs=[Parameter(name="image-digest")],
        annotations=dict(prepull.CLUSTER_ONLY),
        timeout="300s",
        active_deadline_seconds=300,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics("prepull-image")),
    )


def release_prepull(cfg: PipelineConfig) -> Resource:
    """Delete the run's pre-pull DaemonSet by the workflow label."""
    return delete_workflow_objects(cfg, RELEASE_PREPULL, "daemonsets.apps", annotations=dict(prepull.CLUSTER_ONLY))
