"""Argo templates the workflows share: step containers, the build, the train resource, the exit handler.

Every step container runs `python -m steps.<module>` with the common arguments (contracts.md);
values from other tasks arrive as `inputs.parameters`, outputs leave as files under /tmp/outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import yaml
from hera.workflows import (
    DAG,
    Container,
    Parameter,
    Resource,
    Resources,
    SecretVolume,
    WorkflowTemplate,
)
from hera.workflows import models as m

from paddle_mlops.config import PipelineConfig
from paddle_mlops.config.loader import known_tasks
from paddle_mlops.contracts import (
    CACHE_LOOKUP_SUFFIX,
    CACHE_OUTPUT,
    OUTPUTS_DIR,
    OUTPUTS_FLAG,
    PART_OF,
    RERUN_ALL,
    RERUN_PARAMETER,
    STEP_CACHE_PARAMETER,
    image_repository,
)
from pipelines import k8s, prepull, trainjob
from pipelines.observability import argo_template_metrics
from pipelines.paddlejob import TASK_LABEL, WORKFLOW_LABEL, TrainingJobSpec, build_paddlejob
from pipelines.platform import buildkit
from pipelines.run_scope import WORKFLOW, RunScope

OUTPUTS = OUTPUTS_DIR
# The commit a run records. The submitted `git-sha` may be empty (the scheduled retrain has no push:
# build-image resolves the branch head), so every template after build-image takes the commit that
# build-image actually built as its `git-sha` input; only build-image and the exit handler read the
# submitted parameter.
SUBMITTED_GIT_SHA = "{{workflow.parameters.git-sha}}"
COMMIT = "{{inputs.parameters.git-sha}}"


def common_args(git_sha: str, scope: RunScope = WORKFLOW) -> list[str]:
    """The arguments every step takes (contracts.md): the configuration, the task and the commit."""
    return [
        "--config", "{{workflow.parameters.config}}",
        "--env", "{{workflow.parameters.env}}",
        "--task", scope.task,
        "--overrides", scope.overrides,
        "--git-sha", git_sha,
    ]  # fmt: skip


# The step cache (docs/caching.md): where cacheable steps reuse and record outputs, and which steps compute anyway.
CACHE_ARGS = [
    "--step-cache",
    f"{{{{workflow.parameters.{STEP_CACHE_PARAMETER}}}}}",
    "--rerun",
    f"{{{{workflow.parameters.{RERUN_PARAMETER}}}}}",
]


# Secret holding the image-signing key (`cosign generate-key-pair`); the public half is in
# argo/policies.yaml for Kyverno.
COSIGN_SECRET = "cosign-signing-key"
BUILDKIT_CERTS_DIR = "/etc/buildkit/certs"


def output(name: str) -> Parameter:
    return Parameter(name=name, value_from=m.ValueFrom(path=f"{OUTPUTS}/{name}"))


def step_container(
    cfg: PipelineConfig,
    name: str,
    module: str,
    args: Sequence[str] = (),
    inputs: Sequence[str] = (),
    outputs: Sequence[str] = (),
    resources: Resources = k8s.TOOLS_RESOURCES,
    commit_input: bool = True,
    scope: RunScope = WORKFLOW,
    cacheable: bool = False,
    **extra: Any,
) -> Container:
    """A restricted container running one step module from the tools image; with `commit_input` it
    takes the built commit as its `git-sha` input, else it reads the submitted parameter. `scope` says
    where it reads the task, its overrides and the workspace (run_scope.py). A `cacheable` step
    (steps/runtime/reuse.py) gets the step cache and what to rerun, and reports its use of the cache."""
    git_sha = COMMIT if commit_input else SUBMITTED_GIT_SHA
    inputs = [*(["git-sha"] if commit_input else []), *scope.inputs, *inputs]
    if cacheable:
        args, outputs = [*args, *CACHE_ARGS], [*outputs, CACHE_OUTPUT]
    return Container(
        name=name,
        image=extra.pop("image", cfg.images.tools),
        image_pull_policy="IfNotPresent",
        command=["python", "-m", f"steps.{module}"],
        args=[*common_args(git_sha, scope), *args, *([OUTPUTS_FLAG, OUTPUTS] if outputs else [])],
        working_dir=k8s.PROJECT_DIR,
        env=k8s.runtime_env(cfg, git_sha) + extra.pop("env", []),
        inputs=[Parameter(name=i) for i in inputs] or None,
        outputs=[output(o) for o in outputs] or None,
        resources=resources,
        security_context=k8s.container_security_context(),
        volumes=[k8s.tmp_volume(), *extra.pop("volumes", [])],
        retry_strategy=k8s.retry_strategy(cfg),
        active_deadline_seconds=extra.pop("active_deadline_seconds", cfg.cluster.step_deadline_seconds),
        metrics=m.Metrics.model_validate(argo_template_metrics(name)),
        **extra,
    )


def build_image(cfg: PipelineConfig) -> Container:
    """`steps.build_image` drives the shared buildkitd (argo/buildkit.yaml) and writes the signed digest.

    The step itself is an ordinary restricted pod: the daemon, which cannot be restricted, runs in
    the build namespace (see pipelines/platform/buildkit.py for why).
    """
    return step_container(
        cfg,
        "build-image",
        "build_image",
        args=[
            # --git-sha (the submitted one; empty means the head of --git-branch) is among the common
            # arguments; the commit really built leaves as the `git-sha` output.
            "--git-repo",
            "{{workflow.parameters.git-repo}}",
            "--git-branch",
            "{{workflow.parameters.git-branch}}",
            "--image",
            image_repository(cfg.images.train),
            "--serve-image",
            image_repository(cfg.images.serve),
        ],  # fmt: skip
        outputs=["image-digest", "serve-image-digest", "git-sha"],
        commit_input=False,
        resources=k8s.TOOLS_RESOURCES,
        env=[
            m.EnvVar(name="BUILDKIT_HOST", value=buildkit.address(cfg)),
            # Mutual TLS to the daemon: ca.crt, tls.crt, tls.key.
            m.EnvVar(name="BUILDKIT_TLS_DIR", value=BUILDKIT_CERTS_DIR),
            # buildctl reads registry push credentials from $DOCKER_CONFIG/config.json.
            m.EnvVar(name="DOCKER_CONFIG", value="/etc/registry-push"),
            # cosign signs the pushed digest before the step outputs it (Kyverno verifies it).
            *(
                m.EnvVar(
                    name=name,
                    value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name=COSIGN_SECRET, key=key)),
                )
                for name, key in (("COSIGN_PRIVATE_KEY", "cosign.key"), ("COSIGN_PASSWORD", "cosign.password"))
            ),
        ],
        volumes=[
            SecretVolume(
                name="buildkit-client-certs",
                secret_name=buildkit.CLIENT_CERTS,
                mount_path=BUILDKIT_CERTS_DIR,
                read_only=True,
            ),
            SecretVolume(
                name="registry-push",
                secret_name=cfg.images.registry_secret,
                mount_path="/etc/registry-push",
                items=[m.KeyToPath(key=".dockerconfigjson", path="config.json")],
                read_only=True,
            ),
        ],
    )


def prepare_data(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> Container:
    return step_container(
        cfg, "prepare-data", "prepare_data", args=["--output", f"{scope.workspace}/data"], scope=scope, cacheable=True
    )


def train_cache(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> Container:
    """Look the training run up by its content key before any training job exists (steps/train_cache.py): on a hit
    the cached model is in the workspace and `reused` is true, so the DAG skips `train` and no GPU is queued for."""
    return step_container(
        cfg,
        f"train{CACHE_LOOKUP_SUFFIX}",
        "train_cache",
        args=["--workspace", scope.workspace, "--image-digest", "{{inputs.parameters.image-digest}}"],
        inputs=["image-digest"],
        outputs=["reused", "key"],
        scope=scope,
        cacheable=True,
    )


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
        if any(p.name == "task" for p in self.inputs or []):
            # A finetune-batch branch deletes only its own task's jobs. The hook's arguments resolve in the scope of
            # the DAG the task is in, which holds that DAG's inputs (argo-workflows v4.1.2 workflow/controller/dag.go
            # buildLocalScopeFromTask -> scope.go createScope; exit_handler.go resolveExitTmplArgument).
            hook.arguments = m.Arguments(parameters=[m.Parameter(name="task", value="{{inputs.parameters.task}}")])
        kwargs.setdefault("hooks", {"exit": hook})
        return super().__call__(*args, **kwargs)


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


def training_job(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> TrainingJobSpec:
    """The job `training.backend` names: a TrainJob (default) or a legacy PaddleJob."""
    return trainjob.trainjob(cfg, scope) if cfg.training.backend == "trainjob" else build_paddlejob(cfg, scope)


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


def evaluate(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> Container:
    return step_container(
        cfg,
        "evaluate",
        "evaluate",
        args=["--workspace", scope.workspace],
        outputs=["gate-passed", "mlflow-run-id", "metrics"],
        scope=scope,
        cacheable=True,
    )


def upload(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> Container:
    return step_container(
        cfg,
        "upload",
        "upload",
        scope=scope,
        args=[
            "--workspace",
            scope.workspace,
            "--run-id",
            "{{inputs.parameters.mlflow-run-id}}",
            "--serve-image-digest",
            "{{inputs.parameters.serve-image-digest}}",
        ],  # fmt: skip
        inputs=["mlflow-run-id", "serve-image-digest"],
        outputs=["model-uri", "manifest-digest"],
        cacheable=True,
    )


def chain(steps: Sequence[Any], given: dict[str, Any], image_digest: Any, serve_image_digest: Any) -> list[Any]:
    """prepare-data → train-cache → train (unless the cache held it) → evaluate → upload (only when the gate passed),
    inside the DAG being built: the chain train-deploy runs once and finetune-batch once per task. `steps` are the five
    templates; `given` the arguments every step takes (the built commit, and a branch's task and overrides)."""
    prepare_data, find_trained, train_job, evaluate_model, upload_model = steps
    t_data = prepare_data(name="prepare-data", arguments=given)
    t_cache = find_trained(name=f"train{CACHE_LOOKUP_SUFFIX}", arguments={**given, "image-digest": image_digest})
    t_train = train_job(
        name="train",
        when=f"{t_cache.get_parameter('reused')} == false",
        arguments={**given, "image-digest": image_digest, "train-key": t_cache.get_parameter("key")},
    )
    t_eval = evaluate_model(name="evaluate", arguments=given)
    t_upload = upload_model(
        name="upload",
        when=f"{t_eval.get_parameter('gate-passed')} == true",
        arguments={
            **given,
            "mlflow-run-id": t_eval.get_parameter("mlflow-run-id"),
            # The serving image built from this commit, by digest: the manifest names it for the rollout.
            "serve-image-digest": serve_image_digest,
        },
    )
    t_data >> t_cache >> t_train >> t_eval >> t_upload
    return [t_data, t_cache, t_train, t_eval, t_upload]


def batch_summary(cfg: PipelineConfig) -> Container:
    """finetune-batch's last step: each task's outcome from the branches' workspaces (steps/batch_summary.py)."""
    return step_container(
        cfg,
        "summary",
        "batch_summary",
        args=["--tasks", "{{workflow.parameters.tasks}}", "--workspace", WORKFLOW.workspace],
        outputs=["summary"],
        resources=k8s.EXIT_RESOURCES,
    )


def exit_handler(cfg: PipelineConfig) -> Container:
    """Close MLflow runs left RUNNING with the workflow's true status, whatever happened."""
    return step_container(
        cfg,
        "exit-handler",
        "close_run",
        args=[
            "--workflow-name",
            "{{workflow.name}}",
            "--workflow-status",
            "{{workflow.status}}",
            "--workspace",
            WORKFLOW.workspace,
        ],  # fmt: skip
        resources=k8s.EXIT_RESOURCES,
        # It runs whatever happened, build-image included: the submitted parameter is all it has.
        commit_input=False,
    )


def priority_parameters(cfg: PipelineConfig) -> list[Parameter]:
    """`priority`: the Kueue WorkloadPriorityClass of the run's TrainJob (argo/kueue.yaml)."""
    if cfg.training.backend != "trainjob":
        return []
    return [
        Parameter(
            name="priority",
            value=cfg.training.placement.priority,
            enum=list(cfg.cluster.priority_classes),
            description="Kueue priority of the training job: admission order and preemption within the team queue",
        )
    ]


def run_parameters(cfg: PipelineConfig) -> list[Parameter]:
    """The parameters every WorkflowTemplate takes: which configuration and task the steps load, and the workspace."""
    return [
        Parameter(name="config", value="configs/pipeline.yaml"),
        Parameter(name="env", value="prod", enum=["local", "dev", "prod"]),
        Parameter(
            name="task",
            value=cfg.task,
            enum=known_tasks(),
            description="the task trained and served (configs/tasks/<task>.yaml): names its model, experiment, "
            "InferenceService and store prefix",
        ),
        Parameter(name="overrides", value="[]", description='JSON list of "a.b=c" config overrides'),
        Parameter(name="workspace", value=cfg.storage.workspace, description="per-run area; the run name is appended"),
        Parameter(
            name=STEP_CACHE_PARAMETER,
            value=cfg.storage.step_cache_uri(),
            description="step cache: outputs kept by content key and reused by any run with the same key "
            "(docs/caching.md); empty: no reuse",
        ),
        Parameter(
            name=RERUN_PARAMETER,
            value="",
            description=f"steps to compute even when the cache holds their outputs: '{RERUN_ALL}', or names separated "
            "by commas",
        ),
    ]


def run_id_parameters() -> list[Parameter]:
    """`run-id`: the training run the train step's checkpoints belong to (pipelines/run_scope.py)."""
    return [
        Parameter(
            name="run-id",
            value="",
            description="training run whose checkpoints a train step resumes (<workspace>/train/<task>/<run-id>/); "
            "empty: a digest of the commit, task, model and training configuration, data and batch layout, the same "
            "for every restart, retry and resubmission of this run",
        )
    ]


def one_step_workflow(
    cfg: PipelineConfig,
    name: str,
    arguments: list[Parameter],
    step: Callable[[PipelineConfig], Container],
    passed: Sequence[str],
) -> WorkflowTemplate:
    """A WorkflowTemplate that runs one step template, handing it the workflow parameters named in `passed`,
    with the exit handler that closes MLflow runs."""
    with workflow_template(cfg, name, arguments) as wt:
        template = step(cfg)
        exit_handler(cfg)
        with DAG(name="main"):
            template(name=template.name, arguments={p: f"{{{{workflow.parameters.{p}}}}}" for p in passed})
    return wt


def workflow_template(cfg: PipelineConfig, name: str, arguments: list[Parameter]) -> WorkflowTemplate:
    """A WorkflowTemplate with the shared settings; its DAG is `main` and `exit-handler` runs on exit."""
    return WorkflowTemplate(
        name=name, entrypoint="main", arguments=arguments, on_exit="exit-handler", **workflow_settings(cfg)
    )


def workflow_settings(cfg: PipelineConfig) -> dict[str, Any]:
    """What every workflow spec carries: identity, cleanup, deadline, security, priority."""
    team = k8s.team_config(cfg)
    return {
        "namespace": cfg.cluster.namespace,
        "service_account_name": cfg.cluster.service_account,
        # Keep failed pods for their logs; successful runs clean up at once.
        "pod_gc": m.PodGC(strategy="OnWorkflowSuccess"),
        "ttl_strategy": m.TTLStrategy(
            seconds_after_completion=cfg.cluster.ttl_seconds_after_completion,
            seconds_after_success=min(cfg.cluster.ttl_seconds_after_completion, 24 * 3600),
        ),
        "active_deadline_seconds": cfg.cluster.workflow_deadline_seconds,
        "security_context": k8s.pod_security_context(),
        "pod_priority_class_name": team.priority.name,
        "labels": {**PART_OF, "paddle-mlops/team": team.name},
    }
