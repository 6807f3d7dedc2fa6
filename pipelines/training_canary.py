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
(steps/runtime/release/training_images.py: `<storage.uri>/training-images/<digest>.json`) and the other regions pull it
and train. A failed canary fails the workflow there: nothing is recorded, no other region pulled or ran the image,
and every region keeps training on the images allowed before. A run whose image is allowed skips all three.

In finetune-batch the same tasks come before its fan-out (`tasks(cfg, batch=True)`): every branch trains only once
the image is allowed. Its branches prepare their data after the fan-out, so the canary prepares its own first
(`prepare-canary-data`: the workflow's `task` and `overrides` parameters, into `<workspace>/<workflow>/data`, only
when the image is new), and a failed canary omits the whole fan-out: the batch stops, as train-deploy does.

The legacy PaddleJob backends have no canary (`applies`): they place every run in `cluster.region` alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml
from hera.workflows import Container, Parameter, Resource, Task
from hera.workflows import models as m

from paddle_mlops_core.config import ConfigError, PipelineConfig, RegionConfig
from pipelines import k8s, prepull, templates, trainjob
from pipelines.dag_task import dag_task
from pipelines.labels import COMPONENT_LABEL, TRAIN_RUN_LABEL
from pipelines.observability import argo_template_metrics
from pipelines.run_scope import WORKFLOW
from pipelines.step_container import step_container
from pipelines.train_step import train_job_step

CHECK, PREPULL, TRAIN, ALLOW = "training-image", "prepull-canary", "train-canary", "allow-training-image"
# finetune-batch only: the canary's own prepared data (train-deploy's canary reads the run's prepare-data).
DATA = "prepare-canary-data"
CANARY_AREA = "training-canary"
# The canary's MLflow run stays inside its pod: a throwaway SQLite file, not the experiment of real runs.
CANARY_TRACKING_URI = "sqlite:////tmp/training-canary-mlflow.db"


def applies(cfg: PipelineConfig) -> bool:
    """Whether runs on this configuration canary a new training image: the TrainJob backend only.

    The canary holds a new image back from every region but the first, and the TrainJob is what a run may place in
    several (`k8s.training_regions`, its node affinity). The legacy PaddleJob backends (`kubeflow-paddlejob`,
    `paddle-operator`) place every run in `cluster.region` alone (pipelines/paddlejob.py: that region's GPU node
    selector and tolerations): a new image's first run there is a full training in that one region, with no canary
    before it and no record written, and nothing holds it back from a configuration compiled for another region.
    """
    return cfg.training.backend == "trainjob"


def _require(cfg: PipelineConfig) -> None:
    """ConfigError when this configuration's runs have no canary (`applies`), saying why and what would."""
    if not applies(cfg):
        raise ConfigError(
            f"training.backend {cfg.training.backend!r} has no training image canary: it places every run in "
            f"cluster.region {cfg.cluster.region!r} alone; the canary runs with training.backend trainjob "
            "(docs/training.md, 'A new training image: one region first')"
        )


def canary_region(cfg: PipelineConfig) -> RegionConfig:
    """The first region the run may be admitted in (the team's preference order, exclusions, data locality)."""
    return k8s.training_regions(cfg)[0]


def check(cfg: PipelineConfig) -> Container:
    return _step(cfg, CHECK, "--check", outputs=["allowed"])


def allow(cfg: PipelineConfig) -> Container:
    return _step(cfg, ALLOW, "--allow", "--workflow-name", "{{workflow.name}}", outputs=["allowed"])


def _step(cfg: PipelineConfig, name: str, *args: str, outputs: list[str] | None = None) -> Container:
    region = canary_region(cfg).name
    return step_container(
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
    _require(cfg)
    manifest = copy.deepcopy(trainjob.trainjob(cfg).manifest)
    # A fixed name, as the run's own TrainJob (every attempt of the step re-attaches to it, creates no other). No
    # training run: a canary keeps no checkpoints, and its step has no `train-run` input.
    manifest["metadata"]["name"] = "{{workflow.name}}-train-canary"
    manifest["metadata"]["labels"][COMPONENT_LABEL] = TRAIN
    del manifest["metadata"]["labels"][TRAIN_RUN_LABEL]
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
    del job["template"]["spec"]["template"]["metadata"]["labels"][TRAIN_RUN_LABEL]
    terms = job["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms[0]["matchExpressions"][0]["values"] = [canary_region(cfg).name]
    return manifest


def train_canary(cfg: PipelineConfig) -> Container:
    """Place the canary TrainJob and watch it to its end, as `train` does (pipelines/train_step.py), without the run's
    mutex and step cache: a canary trains nobody's model."""
    return train_job_step(cfg, TRAIN, canary_trainjob(cfg), ("image-digest",), run_mutex=False)


def prepare_data(cfg: PipelineConfig) -> Container:
    """finetune-batch's `prepare-canary-data`: prepare-data at the workflow's scope (its `task` and `overrides`
    parameters, into `<workspace>/<workflow>/data`, which the canary TrainJob reads), under a name of its own
    because the batch's `prepare-data` template is its branches' (pipelines/run_scope.py BRANCH)."""
    step = templates.prepare_data(cfg, WORKFLOW)
    # Hera added this object to the WorkflowTemplate being built when it was made: renamed here, it is added as DATA.
    step.name = DATA
    step.metrics = m.Metrics.model_validate(argo_template_metrics(DATA))
    return step


AddTasks = Callable[[Task, Task | None, dict[str, Any]], Task]


def tasks(cfg: PipelineConfig, *, batch: bool = False) -> AddTasks:
    """The canary's templates (made now: call it inside the WorkflowTemplate); the function it returns, called inside
    the DAG as `add(t_build, t_data, given)` (`given`: the built `git-sha` and `image-digest`), adds the canary's tasks
    and returns the one the run's training and every other region's pre-pull wait for: `allow-training-image`,
    skipped when the image is allowed.

    train-deploy passes `t_data`, its prepare-data, whose `<run>/data` the canary trains on. finetune-batch
    (`batch=True`) passes None: its branches prepare their data only after the fan-out the canary comes before, so
    `prepare-canary-data` prepares the workflow task's data when the image is new.
    """
    _require(cfg)
    check_t, prepull_t, train_t, allow_t = check(cfg), prepull_canary(cfg), train_canary(cfg), allow(cfg)
    data_t = prepare_data(cfg) if batch else None

    def add(t_build: Task, t_data: Task | None, given: dict[str, Any]) -> Task:
        digest = {"image-digest": given["image-digest"]}
        t_check = dag_task(check_t, name=CHECK, arguments={**given})
        new = f"{t_check.get_parameter('allowed')} == false"
        if data_t is not None:
            if t_data is not None:
                raise ValueError("finetune-batch's canary prepares its own data: pass t_data=None")
            t_data = dag_task(data_t, name=DATA, arguments={"git-sha": given["git-sha"]}, when=new)
            t_check >> t_data
        elif t_data is None:
            raise ValueError("the canary trains on the run's prepared data: pass its prepare-data task")
        pull_failed = m.ContinueOn(failed=True)
        t_pull = dag_task(prepull_t, name=PREPULL, arguments=digest, when=new, continue_on=pull_failed)
        # A failed pre-pull only costs the cold pull: the canary goes on after it.
        after = f"{t_check.name} && {t_data.name} && ({t_pull.name} || {t_pull.name}.Failed)"
        t_canary = dag_task(train_t, name=TRAIN, arguments={**given}, when=new, depends=after)
        t_allow = dag_task(allow_t, name=ALLOW, arguments={**given}, when=new)
        t_build >> t_check
        t_check >> t_pull
        t_canary >> t_allow
        return t_allow

    return add


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
