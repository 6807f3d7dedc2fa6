"""The train step: one container (`python -m steps.train_job`) that creates the run's training job or re-attaches to
it, then watches it to its end — retried, on every failure of its own pod, for as long as the step may wait.

Why one node and not a submit step followed by a wait step: `argo retry` re-runs only the failed nodes of a workflow
(argo-workflows v4.1.2 workflow/util/util.go FormulateRetryWorkflow: resetPath deletes a failed node and what
follows it; a succeeded node before it is kept), so a separate submit that succeeded would never run again and a
job that failed could never be replaced; and a node's attempts are retried by its phase alone, an evicted or
OOM-killed pod being Failed, not Error (workflow/controller/operator.go processNodeRetries, assessNodeStatus). So the
one node runs create-or-reuse, then the watch, on every attempt (steps/runtime/cluster/train_job.py):
- `retryStrategy`: `Always` (Failed and Error), minus the exit codes a retry cannot change (2: the job failed, was
  deactivated by Kueue or outlived its deadline), a capped backoff, `maxDuration` the step's deadline plus a margin —
  Argo refuses any retry past it from the first attempt's start — and a limit that lasts as long at the cap;
- no lifecycle hook: a succeeded hook node keeps `argo retry` from resetting its failed task (#13184), and hooks on
  a retried task misbehave across versions (#12120, #13239, #14058). The job is deleted only by the step on a
  person's stop or the workflow's deadline (its SIGTERM), by the next attempt when it failed (replaced), or by the
  exit handler (`release-train-jobs`) after `argo stop`; its ownerReference to the Workflow deletes it with the
  workflow;
- a template mutex named by the training run (`train-run`, the prefix its checkpoints are kept under): two
  workflows of one run never train at once; the second waits, then finds the model in the step cache.

The manifest reaches the container in an environment variable, rendered by Argo like the rest of the template, with
every `$` doubled: the kubelet expands `$(VAR)` in env values and turns `$$` into `$`, so the TrainJob's own
`$(TRAINJOB_NAME)` arrives as written.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from hera.workflows import Container, RetryStrategy
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER, CLUSTER_ONLY_ANNOTATION, TRAINING_JOB_ENV
from pipelines import k8s
from pipelines.run_scope import WORKFLOW, RunScope
from pipelines.step_container import CACHE_ARGS, step_container
from pipelines.training_backend import training_job

# Argo's backoff between the attempts of the train step: first 10 s, doubling, at most BACKOFF_CAP_SECONDS.
BACKOFF_CAP_SECONDS = 120
# Past the job's own budget (its creation + the step's deadline, which steps/train_job.py enforces and reports), the
# time Argo still gives the step: its first attempt starts before the job exists, and its last must be able to say why.
DEADLINE_MARGIN_SECONDS = 600
TRAIN_RUN_INPUT = "train-run"


def env_literal(text: str) -> str:
    """`text` as an env value the kubelet passes unchanged (it expands `$(VAR)` and turns `$$` into `$`)."""
    return text.replace("$", "$$")


def placed_manifest(template: dict[str, Any]) -> dict[str, Any] | None:
    """The training job a compiled train template places (its `$PADDLE_MLOPS_TRAINING_JOB`, as the kubelet hands it
    to the step), None for any other template: what lint renders and the local executor runs."""
    for env in (template.get("container") or {}).get("env") or []:
        if env.get("name") == TRAINING_JOB_ENV:
            manifest = yaml.safe_load(str(env.get("value", "")).replace("$$", "$"))
            return manifest if isinstance(manifest, dict) else None
    return None


def retry_strategy(cfg: PipelineConfig, deadline: int) -> RetryStrategy:
    """Every failure of the step's pod retried while the step may wait (module docstring)."""
    span = deadline + DEADLINE_MARGIN_SECONDS
    return RetryStrategy(
        limit=math.ceil(span / BACKOFF_CAP_SECONDS) + 4,  # the doubling from 10 s reaches the cap in 4 attempts
        retry_policy="Always",
        expression=k8s.retry_expression(),
        backoff=m.Backoff(duration="10s", factor=2, cap=f"{BACKOFF_CAP_SECONDS}s", max_duration=f"{span}s"),
    )


def train_job_step(
    cfg: PipelineConfig,
    name: str,
    manifest: dict[str, Any],
    inputs: tuple[str, ...],
    scope: RunScope = WORKFLOW,
    run_mutex: bool = True,
    **extra: Any,
) -> Container:
    """The template `name` placing and watching `manifest` (module docstring). `run_mutex`: the run's own training
    (mutex on its `train-run` input, the step cache looked up again); off for the training image's canary."""
    deadline = cfg.training.job.step_deadline_seconds(cfg.training.backend)
    text = yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)
    args = [
        "--workspace", scope.workspace,
        "--namespace", "{{workflow.namespace}}",
        "--workflow-name", "{{workflow.name}}",
        # the step releases the job before Argo ends it for good (steps/train_job.py attempt_end)
        "--attempt-deadline-seconds", str(deadline + DEADLINE_MARGIN_SECONDS),
        *(CACHE_ARGS if run_mutex else []),
    ]  # fmt: skip
    if run_mutex:
        mutex = m.Mutex(name=f"{{{{inputs.parameters.{TRAIN_RUN_INPUT}}}}}")
        extra["synchronization"] = m.Synchronization(mutexes=[mutex])
    return step_container(
        cfg,
        name,
        "train_job",
        args=args,
        inputs=inputs,
        scope=scope,
        env=[m.EnvVar(name=TRAINING_JOB_ENV, value=env_literal(text))],
        resources=k8s.EXIT_RESOURCES,
        retry_strategy=retry_strategy(cfg, deadline),
        active_deadline_seconds=deadline + DEADLINE_MARGIN_SECONDS,
        **extra,
    )


def train(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> Container:
    """The run's `train` step: its training job (TrainJob or legacy PaddleJob, training_backend.py), under the
    run's mutex."""
    manifest = training_job(cfg, scope).manifest
    # finetune-batch's branches also take the batch's parent MLflow run (run_scope.py `parent_run`)
    parent = (BATCH_PARENT_PARAMETER,) if scope.parent_run else ()
    return train_job_step(cfg, "train", manifest, ("image-digest", "train-key", TRAIN_RUN_INPUT, *parent), scope)


RELEASE_TRAIN_JOBS = "release-train-jobs"


def release_train_jobs(cfg: PipelineConfig) -> Container:
    """The exit handler's `release-train-jobs` (steps/release_train_jobs.py): after `argo stop` or the workflow's
    deadline, delete the workflow's training jobs that are still queued or running."""
    manifest = training_job(cfg).manifest
    return step_container(
        cfg,
        RELEASE_TRAIN_JOBS,
        "release_train_jobs",
        args=[
            "--workflow-name",
            "{{workflow.name}}",
            "--namespace",
            "{{workflow.namespace}}",
            "--job-api",
            manifest["apiVersion"],
            "--job-kind",
            manifest["kind"],
        ],  # fmt: skip
        resources=k8s.EXIT_RESOURCES,
        commit_input=False,
        annotations={CLUSTER_ONLY_ANNOTATION: "releases the workflow's training jobs on the cluster"},
    )
