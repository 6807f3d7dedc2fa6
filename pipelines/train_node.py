"""What a training node runs on every backend: the train image by the digest build-image produced, the training
script and its arguments, the env (the runtime's by Secret reference, then NCCL's), the resources, and the port
rank 0 listens on for the others."""

from __future__ import annotations

from typing import Any

from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import STEP_CACHE_PARAMETER, image_repository
from pipelines import k8s
from pipelines.run_scope import CHECKPOINT_ROOT, RUN_ID, WORKFLOW, RunScope

IMAGE_DIGEST = "{{inputs.parameters.image-digest}}"
# The commit build-image built (the train template's `git-sha` input; see step_container.COMMIT).
GIT_SHA = "{{inputs.parameters.git-sha}}"
# Rank 0's rendezvous port: the TrainJob's launcher dials it, Kubeflow's PaddleJob names it `master`.
MASTER_PORT = 37777


def train_image(cfg: PipelineConfig) -> str:
    """The train repository pinned by the digest the build step produced (never a moving tag)."""
    return f"{image_repository(cfg.images.train)}@{IMAGE_DIGEST}"


def train_script_args(scope: RunScope = WORKFLOW) -> list[str]:
    """The training script and its arguments, after the launcher's (every backend)."""
    return [
        "steps/train.py",
        "--config", "{{workflow.parameters.config}}",
        "--env", "{{workflow.parameters.env}}",
        "--task", scope.task,
        "--overrides", scope.overrides,
        "--git-sha", GIT_SHA,
        "--workspace", scope.workspace,
        "--checkpoint-root", CHECKPOINT_ROOT,
        "--run-id", RUN_ID,
        # the model is recorded in the step cache under the key train-cache computed (docs/caching.md)
        "--step-cache", f"{{{{workflow.parameters.{STEP_CACHE_PARAMETER}}}}}",
        "--train-key", "{{inputs.parameters.train-key}}",
        # finetune-batch: the task's training run is a child of the batch's parent run (run_scope.py)
        *(["--parent-run-id", scope.parent_run] if scope.parent_run else []),
    ]  # fmt: skip


def node_env(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """A training node's env (every backend): the runtime env by Secret reference, then NCCL's."""
    return k8s.as_k8s(k8s.runtime_env(cfg, GIT_SHA) + _nccl_env())


def _nccl_env() -> list[m.EnvVar]:
    # WARN keeps logs readable but still reports transport fallbacks; eth0 is the pod network
    # interface, and IB stays off because pod networking carries no InfiniBand by default.
    return [
        m.EnvVar(name="NCCL_DEBUG", value="WARN"),
        m.EnvVar(name="NCCL_SOCKET_IFNAME", value="eth0"),
        m.EnvVar(name="NCCL_IB_DISABLE", value="1"),
        m.EnvVar(name="GLOG_v", value="0"),
    ]


def job_resources(cfg: PipelineConfig, gpus: int) -> dict[str, Any]:
    """Requests equal to limits (Guaranteed QoS), with `gpus` GPUs when the node has any."""
    job = cfg.training.job
    amounts: dict[str, Any] = {"cpu": job.cpu, "memory": job.memory}
    if gpus > 0:
        amounts["nvidia.com/gpu"] = gpus
    return {"requests": dict(amounts), "limits": dict(amounts)}
