"""The step templates the workflows' DAGs run: build-image, prepare-data, train-cache, evaluate, upload, the chain
that links them, finetune-batch's summary and the exit handler.

Each is a step container (step_container.py); the resource templates that create and delete cluster objects are in
resource_templates.py, the workflow parameters and settings in workflow_spec.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from hera.workflows import DAG, Container, Parameter, Resource, SecretVolume, Step, Task, WorkflowTemplate
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER, CACHE_LOOKUP_SUFFIX, image_repository
from pipelines import k8s, resource_templates, train_step
from pipelines.dag_task import dag_task
from pipelines.platform import buildkit
from pipelines.run_scope import RUN_ID, WORKFLOW, RunScope
from pipelines.step_container import step_container
from pipelines.train_step import TRAIN_RUN_INPUT
from pipelines.workflow_spec import workflow_template

# Secret holding the image-signing key (`cosign generate-key-pair`); the public half is in
# argo/policies.yaml for Kyverno.
COSIGN_SECRET = "cosign-signing-key"
BUILDKIT_CERTS_DIR = "/etc/buildkit/certs"


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
    the cached model is in the workspace and `reused` is true, so the DAG skips `train` and no GPU is queued for.
    `run` names the training run (the train step's mutex, and its job's label)."""
    return step_container(
        cfg,
        f"train{CACHE_LOOKUP_SUFFIX}",
        "train_cache",
        args=[
            "--workspace",
            scope.workspace,
            "--image-digest",
            "{{inputs.parameters.image-digest}}",
            "--run-id",
            RUN_ID,
        ],  # fmt: skip
        inputs=["image-digest"],
        outputs=["reused", "key", "run"],
        scope=scope,
        cacheable=True,
    )


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


def chain(
    steps: Sequence[Callable[..., Step | Task | None]],
    given: dict[str, Any],
    image_digest: Any,
    serve_image_digest: Any,
    train_given: dict[str, Any] | None = None,
) -> list[Task]:
    """prepare-data → train-cache → train (unless the cache held it) → evaluate → upload (only when the gate passed),
    inside the DAG being built: the chain train-deploy runs once and finetune-batch once per task. `steps` are the five
    templates; `given` the arguments every step takes (the built commit, and a branch's task and overrides);
    `train_given` what the train step takes besides (a branch's parent MLflow run)."""
    prepare_data, find_trained, train_job, evaluate_model, upload_model = steps
    t_data = dag_task(prepare_data, name="prepare-data", arguments=given)
    t_cache = dag_task(
        find_trained, name=f"train{CACHE_LOOKUP_SUFFIX}", arguments={**given, "image-digest": image_digest}
    )
    t_train = dag_task(
        train_job,
        name="train",
        when=f"{t_cache.get_parameter('reused')} == false",
        arguments={
            **given,
            "image-digest": image_digest,
            "train-key": t_cache.get_parameter("key"),
            TRAIN_RUN_INPUT: t_cache.get_parameter("run"),
            **(train_given or {}),
        },
    )
    t_eval = dag_task(evaluate_model, name="evaluate", arguments=given)
    t_upload = dag_task(
        upload_model,
        name="upload",
        when=f"{t_eval.get_parameter('gate-passed')} == true",
        arguments={
            **given,
            "mlflow-run-id": t_eval.get_parameter("mlflow-run-id"),
            # The serving image built from this commit, by digest: the manifest names it for the rollout.
            "serve-image-digest": serve_image_digest,
        },
    )
    tasks = [t_data, t_cache, t_train, t_eval, t_upload]
    for before, after in itertools.pairwise(tasks):
        before >> after
    return tasks


def batch_run(cfg: PipelineConfig) -> Container:
    """finetune-batch's parent MLflow run, opened before the fan-out (steps/batch_run.py): its `parent-run-id`."""
    return step_container(
        cfg,
        "batch-run",
        "batch_run",
        args=["--tasks", "{{workflow.parameters.tasks}}", "--workflow-name", "{{workflow.name}}"],
        outputs=[BATCH_PARENT_PARAMETER],
        resources=k8s.EXIT_RESOURCES,
    )


def batch_summary(cfg: PipelineConfig) -> Container:
    """finetune-batch's last step: each task's outcome from the branches' workspaces, which ends the batch's parent
    MLflow run (steps/batch_summary.py)."""
    return step_container(
        cfg,
        "summary",
        "batch_summary",
        args=[
            "--tasks",
            "{{workflow.parameters.tasks}}",
            "--workspace",
            WORKFLOW.workspace,
            "--parent-run-id",
            f"{{{{inputs.parameters.{BATCH_PARENT_PARAMETER}}}}}",
        ],
        inputs=[BATCH_PARENT_PARAMETER],
        outputs=["summary"],
        resources=k8s.EXIT_RESOURCES,
    )


def close_runs(cfg: PipelineConfig, name: str = "exit-handler") -> Container:
    """Close MLflow runs left RUNNING with the workflow's true status, whatever happened."""
    return step_container(
        cfg,
        name,
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


def exit_handler(cfg: PipelineConfig, trains: bool = False) -> Container | DAG:
    """The workflow's `exit-handler`: close its MLflow runs; in a workflow that `trains`, beside it, release its
    training jobs after `argo stop` or its deadline (pipelines/train_step.py release_train_jobs) and delete its
    pre-pull DaemonSets (TrainJob backend, pipelines/prepull.py).

    The DaemonSets go here, not in the main DAG after `train`: a task that runs after a failed train becomes a child
    of the train node's last attempt (argo-workflows v4.1.2 workflow/controller/dag.go connectDependencies,
    operator.go getOutboundNodes), and a succeeded descendant keeps `argo retry` from resetting the failed train
    (workflow/util/util.go FormulateRetryWorkflow, isDescendantNodeSucceeded); `argo retry` drops and runs the
    workflow's onExit nodes again."""
    if not trains:
        return close_runs(cfg)
    steps: list[Container | Resource] = [close_runs(cfg, "close-runs"), train_step.release_train_jobs(cfg)]
    if cfg.training.backend == "trainjob":
        steps.append(resource_templates.release_prepull(cfg))
    with DAG(name="exit-handler") as handler:
        for step in steps:
            dag_task(step, name=step.name)
    return handler


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
