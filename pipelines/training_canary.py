"""A new training image trains in one region first: pre-pull and a canary run there before any other region gets it.

Like a serving image (image-rollout: the first region, checks, then the others), a training image no run has
trained on yet (a new Paddle or CUDA base, new dependencies) is tried where it can hurt least before it may take GPUs
everywhere. In train-deploy (TrainJob backend), after build-image:

    training-image (--check) ─┬─ allowed ──────────────────────────────────────► prepull-image, train (all regions)
                              └─ new: prepull-canary (first region's GPU nodes)
                                      prepare-data ─► train-canary ─► allow-training-image ─► prepull-image, train

`train-canary` is the run's own TrainJob (same runtime, image, workers and GPUs) pinned to the first region the run
may be admitted in, training `training.canary_steps` steps on the run's prepared data (`steps/train.py
--canary-steps`: into `<workspace>/training-canary`, nothing kept, MLflow on a file inside the pod, so no run
appears in the experiment). Only when it succeeds does `allow-training-image` record the digest as allowed
(steps/runtime/training_images.py: `<storage.uri>/training-images/<digest>.json`) and the other regions pull it
and train. A failed canary fails the workflow there: nothing is recorded, no other region pulled or ran the image,
and every region keeps training on the images allowed before. A run whose image is allowed skips all three.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hera.workflows import Container, Parameter, Resource
from hera.workflows import models as m

from paddle_mlops.config import PipelineConfig, RegionConfig
from pipelines import k8s, prepull, templates, trainjob
from pipelines.observability import argo_template_metrics
from pipelines.run_scope import WORKFLOW

CHECK, PREPULL, TRAIN, ALLOW = "training-image", "prepull-canary", "train-canary", "allow-training-image"
COMPONENT_LABEL = "paddle-mlops/component"
CANARY_AREA = "training-canary"
# The canary's MLflow run stays inside its pod: a throwaway SQLite file, not the experiment of real runs.
CANARY_TRACKING_URI = "sqlite:////tmp/training-canary-mlflow.db"


def canary_region(cfg: PipelineConfig) -> RegionConfig:
    """The first region the run may be admitted in (the team's preference order, exclusions, data locality)."""
    return k8s.training_regions(cfg)[0]


def check(cfg: PipelineConfig) -> Container:
    return _step(cfg, CHECK, "--check", outputs=["allowed"])


def allow(cfg: PipelineConfig) -> Container:
    return _step(cfg, ALLOW, "--allow", "--workflow-name", "{{workflow.name}}", outputs=["allowed"])


def _step(cfg: PipelineConfig, name: str, *args: str, outputs: list[str] | None = None) -> Container:
    region = canary_region(cfg).name
    return templates.step_container(
        cfg,
        name,
        "training_image",
        args=["--image-digest", "{{inputs.parameters.image-digest}}", "--canary-region", region, *args],
        inputs=["image-digest"],
        outputs=outputs or [],
        resources=k8s.EXIT_RESOURCES,
    )


def prepull_canary(cfg: PipelineConfig) -> Resource:
    """The pre-pull DaemonSet on the first region's GPU nodes only (pipelines/prepull.py)."""
    return Resource(
        name=PREPULL,
        action="create",
        set_owner_reference=True,
        manifest=yaml.safe_dump(prepull.daemon_set(cfg, [canary_region(cfg)], PREPULL), sort_keys=False),
        inputs=[Parameter(name="image-digest")],
        annotations=dict(prepull.CLUSTER_ONLY),
        timeout="300s",
        active_deadline_seconds=300,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics(PREPULL)),
    )


def canary_trainjob(cfg: PipelineConfig) -> dict[str, Any]:
    """The run's TrainJob, pinned to the first region, training `canary_steps` steps into a scratch area."""
    manifest = copy.deepcopy(trainjob.trainjob(cfg).manifest)
    # A fixed name, as the run's own TrainJob (templates.TRAIN_ACTION: a retried step waits on it, creates no other).
    manifest["metadata"]["name"] = "{{workflow.name}}-train-canary"
    manifest["metadata"]["labels"][COMPONENT_LABEL] = TRAIN
    trainer = manifest["spec"]["trainer"]
    # A canary's few steps are nobody's model: never recorded in the step cache under the run's training key.
    trainer["command"] = _without(trainer["command"], RUN_ONLY_FLAGS)
    at = trainer["command"].index("--workspace") + 1
    run_area = trainer["command"][at]
    trainer["command"][at : at + 1] = [
        f"{run_area}/{CANARY_AREA}", "--data", f"{run_area}/data", "--canary-steps", str(cfg.training.canary_steps)
    ]  # fmt: skip
    for env in trainer["env"]:
        if env["name"] == "MLFLOW_TRACKING_URI":
            env["value"] = CANARY_TRACKING_URI
    if not any(env["name"] == "MLFLOW_TRACKING_URI" for env in trainer["env"]):
        trainer["env"].append({"name": "MLFLOW_TRACKING_URI", "value": CANARY_TRACKING_URI})
    (patch,) = manifest["spec"]["runtimePatches"]
    job = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    terms = job["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[0]["matchExpressions"][0]["values"] = [canary_region(cfg).name]
    return manifest


def train_canary(cfg: PipelineConfig) -> Resource:
    """Create the canary TrainJob and wait for its success or failure, as `train` does (pipelines/templates.py)."""
    success, failure = trainjob.conditions()
    deadline = cfg.training.job.step_deadline_seconds(cfg.training.backend)
    return templates.TrainResource(
        name=TRAIN,
        action=templates.TRAIN_ACTION,
        set_owner_reference=True,
        manifest=yaml.safe_dump(canary_trainjob(cfg), sort_keys=False, allow_unicode=True),
        success_condition=success,
        failure_condition=failure,
        inputs=[Parameter(name=name) for name in ("image-digest", "git-sha", *WORKFLOW.inputs)],
        timeout=f"{deadline}s",
        active_deadline_seconds=deadline,
        retry_strategy=k8s.resource_retry_strategy(cfg),
        metrics=m.Metrics.model_validate(argo_template_metrics(TRAIN)),
    )


# The train step's flags that tie it to the run's own training (its step cache entry), which a canary must not touch.
RUN_ONLY_FLAGS = ("--step-cache", "--train-key")


def _without(command: list[str], flags: tuple[str, ...]) -> list[str]:
    """`command` without each of `flags` and the value after it."""
    out: list[str] = []
    skip = False
    for part in command:
        if skip:
            skip = False
        elif part in flags:
            skip = True
        else:
            out.append(part)
    return out
