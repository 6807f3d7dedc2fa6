"""`training:` how the model is trained: the optimisation, and the job that runs it on the cluster.

`TrainingConfig` holds what the trainer reads (epochs, batch size, learning rate, topology, checkpoints) and which
backend runs the job; `JobConfig` is that job whatever runs it (workers, resources, deadlines) and
`PlacementConfig` where Kueue may admit it. The checks here are the ones a backend imposes on the job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paddle_mlops_core.config.checkpoint import CheckpointConfig
from paddle_mlops_core.config.strict import Strict

Backend = Literal["trainjob", "kubeflow-paddlejob", "paddle-operator"]


class JobConfig(Strict):
    """The training job on the cluster, whatever runs it: workers, their resources, its deadlines."""

    workers: int = Field(2, ge=1, description="nodes (TrainJob numNodes, PaddleJob worker replicas)")
    ps_replicas: int = Field(0, ge=0, description="> 0 selects parameter-server mode (PaddleJob backends only)")
    gpus_per_worker: int = Field(1, ge=0)
    cpu: str = "4"
    memory: str = "16Gi"
    shm_size: str = "8Gi"
    backoff_limit: int = Field(3, ge=0)
    active_deadline_seconds: int = Field(6 * 3600, gt=0)
    schedule_timeout_seconds: int = Field(
        1800,
        gt=0,
        description="legacy backends: how long a PaddleJob may wait for gang scheduling (its schedulingPolicy); "
        "every backend: how long a training pod may stay unscheduled before an alert",
    )
    queue_timeout_seconds: int = Field(
        4 * 3600,
        gt=0,
        description="trainjob backend: how long a TrainJob may wait in Kueue's queue. The train step's deadline is "
        "this plus active_deadline_seconds, which Trainer starts counting at admission, so a run admitted within "
        "it always gets its whole deadline",
    )

    def step_deadline_seconds(self, backend: str) -> int:
        """The train step's deadline: the longest wait before the job runs, plus the job's own deadline."""
        wait = self.queue_timeout_seconds if backend == "trainjob" else self.schedule_timeout_seconds
        return wait + self.active_deadline_seconds

    ttl_seconds_after_finished: int = Field(
        3600,
        ge=0,
        description="legacy backends: the PaddleJob's runPolicy TTL (a TrainJob's JobSet has none: trainer "
        "v2.3.0 recreates the JobSet of a failed TrainJob once it is gone, see pipelines/trainjob.py)",
    )
    queue: str = Field("default", description="Volcano queue of the PaddleJob schedulingPolicy (legacy backends)")
    clean_pod_policy: Literal["None", "Running", "All"] = Field("Running", description="legacy backends")
    paddle_operator_init_container: bool = Field(
        True,
        description="the Paddle operator adds its coord-paddle init container (its default; not with --initImage=)",
    )


class PlacementConfig(Strict):
    """Where Kueue may admit a training job: regions, priority, network topology (TrainJob backend)."""

    priority: str = Field("normal", description="default WorkloadPriorityClass; the `priority` workflow parameter")
    exclude_regions: tuple[str, ...] = Field((), description="regions this configuration never trains in")
    topology: Literal["required", "preferred", "none"] = Field(
        "preferred", description="keep all workers inside one `topology_level` domain (Kueue TAS)"
    )
    topology_level: str = Field(
        "cloud.provider.com/topology-block", description="node label of the level the workers share"
    )


class TrainingConfig(Strict):
    epochs: int = Field(2, ge=1)
    batch_size: int = Field(32, ge=1, description="per process")
    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    max_steps: int | None = Field(None, gt=0, description="stop after this many optimizer steps (tests, smoke runs)")
    seed: int = 42
    nproc: int = Field(
        2, ge=1, description="local data-parallel processes (paddle.distributed.launch --nproc_per_node)"
    )
    topology: Literal["collective", "ps"] = "collective"
    checkpoint: CheckpointConfig = CheckpointConfig()
    amp: Literal["off", "fp16", "bf16"] = "off"
    grad_accumulation: int = Field(1, ge=1)
    distill_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="text classification and matching: weight of the cheap baseline's cross-fitted probabilities "
        "in the soft targets (distillation from the baseline); 0 trains on the labels alone",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Prometheus port on rank 0; 0 disables")
    canary_steps: int = Field(
        20,
        ge=1,
        description="a training image no run has trained on yet first runs this many steps on the run's prepared "
        "data in the first region it may use, before any other region pulls it (pipelines/training_canary.py)",
    )
    backend: Backend = Field(
        "trainjob",
        description="trainjob: Kubeflow Trainer v2 TrainJob admitted by Kueue; kubeflow-paddlejob (Trainer v1 "
        "kubeflow.org/v1) and paddle-operator (batch.paddlepaddle.org/v1) are the legacy PaddleJob backends",
    )
    job: JobConfig = JobConfig()
    placement: PlacementConfig = PlacementConfig()

    @model_validator(mode="after")
    def _backend_admissible(self) -> TrainingConfig:
        if self.backend == "trainjob" and self.job.ps_replicas > 0:
            raise ValueError(
                "parameter servers on the cluster (training.job.ps_replicas > 0) do not run on the TrainJob backend: "
                "Kubeflow Trainer v2 has no parameter-server runtime. Set training.backend: kubeflow-paddlejob (or "
                "paddle-operator) for cluster PS jobs, or set ps_replicas: 0 (local runs with training.topology: ps "
                "start their servers themselves)"
            )
        # paddle-operator v0.3.5 controllers/paddlejob_controller.go adds the init container whenever
        # its --initImage flag is non-empty; the container has no securityContext.
        if self.backend == "paddle-operator" and self.job.paddle_operator_init_container:
            raise ValueError(
                "backend 'paddle-operator' cannot start workers in the pipeline namespace: the Paddle operator adds "
                "an init container 'coord-paddle' (image from its --initImage flag, default "
                "docker.io/library/alpine:3.10) without a securityContext, and the namespace enforces Pod Security "
                "'restricted' (argo/tenancy.yaml). Start the operator with --initImage= (empty: no init container) "
                "and set training.job.paddle_operator_init_container: false, or use training.backend: trainjob"
            )
        return self
