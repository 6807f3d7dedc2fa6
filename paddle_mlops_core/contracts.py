"""Names and numbers both sides share (pipelines/ writes them into manifests, steps/ acts on them).

The one definition of each: exit codes, the labels, uid, port, registry aliases, metric names and
the MLflow tracking URI that the layers and the CLI would otherwise each spell out.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

# Step exit codes. Argo's retry expression (pipelines/k8s.py) retries only what a retry can change.
EXIT_OK = 0
# A failure that may pass on a retry (network, API server, a crashed process): Argo retries it.
EXIT_FAILED = 1
EXIT_USER_ERROR = 2
# The rollout checked the new model and rolled it back: a final verdict, so Argo must not retry it,
# yet the step still fails.
EXIT_ROLLED_BACK = 3
# Exit codes a retry cannot change.
FINAL_EXIT_CODES = (EXIT_USER_ERROR, EXIT_ROLLED_BACK)
# The training pods' fatal code is the user error: bad configuration or bad data fails the same way on every restart,
# so the runtime's pod failure policy fails the job on it and JobSet does not restart it (pipelines/trainjob.py).
EXIT_FATAL = EXIT_USER_ERROR
# A trainer stopped by SIGTERM (eviction, preemption, node drain) after checkpointing: retryable, 128 + SIGTERM as a
# shell reports it. The pod failure policy ignores it (the pod is replaced, the run resumes) and Argo retries it.
EXIT_TERMINATED = 143

# The CLI's exit codes (`paddle-mlops …`; README's CLI reference documents them).
# Bad usage, bad configuration or bad input: argparse's own code, the same as a step's user error.
EXIT_USAGE = EXIT_USER_ERROR
# `lint` and `preflight` ran and found something to fix.
EXIT_FINDINGS = 1
# `submit`: the run can never fit: no region it may use can ever hold its training job's GPUs in Kueue (nominal
# quota plus borrowing limit), or, on a legacy backend, the namespace's GPU quota cannot hold it; nothing was submitted.
EXIT_NO_CAPACITY = 3
# `submit`, `queue`: no credentials, the Kubernetes API refused the request, or the namespace has no LocalQueue.
EXIT_API = 4

# The model server's HTTP port in the predictor container (KServe's default container port).
SERVING_PORT = 8080

# Every object the project creates carries it, so `kubectl get -l app.kubernetes.io/part-of=paddle-mlops`
# finds them all and policies and monitors select them.
PART_OF_KEY = "app.kubernetes.io/part-of"
PART_OF_VALUE = "paddle-mlops"
PART_OF = {PART_OF_KEY: PART_OF_VALUE}

# Non-root uid/gid baked into the project's images (images/*/Dockerfile); restricted PSS forbids uid 0.
RUN_AS_USER = 1000
RUN_AS_GROUP = 1000


def image_repository(image: str) -> str:
    """`registry:5000/team/serve:0.1` or `…@sha256:…` -> `registry:5000/team/serve`: the part a digest pins."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    return repo[: len(repo) - len(last)] + last.split(":", 1)[0]


# Library noise kept out of step logs (steps/runtime/noise.py): warning message prefixes, as both
# warnings.filterwarnings and PYTHONWARNINGS match them, and the environment that silences them in every
# process, also in the pods pipelines/k8s.py writes (the PaddleJob's launcher imports Paddle before any step).
SILENCED_WARNINGS = ("No ccache found", "Setuptools is replacing distutils")
QUIET_LIBRARIES_ENV = {
    "PYTHONWARNINGS": ",".join(f"ignore:{prefix}:UserWarning" for prefix in SILENCED_WARNINGS),
    "GLOG_minloglevel": "2",  # glog: errors only
}
SHOW_LIBRARY_WARNINGS_ENV = "PADDLE_MLOPS_LIBRARY_WARNINGS"

# Output parameters: a step writes each declared output to <OUTPUTS_FLAG DIR>/<output name>; the templates
# pass OUTPUTS_DIR, where Argo reads them (`valueFrom.path`); the local executor passes a task's folder.
OUTPUTS_DIR = "/tmp/outputs"
OUTPUTS_FLAG = "--outputs-dir"

# --- Training runs and their checkpoints ------------------------------------------------------------------------
# A run's checkpoints live under `<workspace root>/TRAIN_RUNS/<task>/<run id>/CHECKPOINTS/<step>/` (manifest last),
# outside the per-workflow workspace, so a resubmitted workflow (a new name) finds them by its run id.
TRAIN_RUNS = "train"
CHECKPOINTS = "checkpoints"
# steps.runtime.training.launch hands its workers a folder for their pid files and fatal-error markers.
LAUNCH_CONTROL_ENV = "PADDLE_MLOPS_LAUNCH_DIR"
# A trainer's rank 0 leaves its run's folder (`<root>/<task>/<run id>`) in this file of that folder, so that the launch
# supervisor archives the node's worker logs beside the run's checkpoints, under WORKER_LOGS.
RUN_URI_FILE = "run-uri"
# Seconds after forwarding SIGTERM before steps.runtime.training.launch SIGKILLs the launcher's process tree and exits
# 143 (its `--stop-timeout` when that is not given; unset: no hard stop).
LAUNCH_STOP_TIMEOUT_ENV = "PADDLE_MLOPS_LAUNCH_STOP_TIMEOUT"
# How long a TrainJob node waits for rank 0's DNS name before it fails (steps.runtime.training.launch); Kueue's
# waitForPodsReady timeout must leave the pods that long and the image pull (pipelines/platform/kueue_config.py).
RENDEZVOUS_TIMEOUT_SECONDS = 600

# --- Logs that outlive their pods (docs/observability.md "Logs") ------------------------------------------------
# Every pod the templates write sets LOG_FORMAT=json: each step line is one JSON object with these fields besides
# `ts`, `level` and `msg` (steps/runtime/runner.py), the same in step pods and training workers.
LOG_FORMAT_ENV = "LOG_FORMAT"
LOG_FORMAT_JSON = "json"
LOG_FIELDS = ("workflow", "step", "task", "run_id", "rank", "git_sha")
# Argo archives every pod's `main` log (`archiveLogs`) through the artifact repository of the workflow's namespace:
# ConfigMap ARTIFACT_REPOSITORIES, key ARTIFACT_REPOSITORY_KEY (pipelines/platform/log_archive.py), at
# `<storage.workspace>/<workflow>/ARCHIVED_LOGS/<pod>/ARCHIVED_LOG_FILE`; `paddle-mlops logs` reads them there.
ARTIFACT_REPOSITORIES = "artifact-repositories"
ARTIFACT_REPOSITORY_KEY = "paddle-mlops"
ARCHIVED_LOGS = "logs"
ARCHIVED_LOG_FILE = "main.log"
# A training node's worker logs (paddle.distributed.launch --log_dir) beside its run's checkpoints:
# `<root>/<task>/<run id>/WORKER_LOGS/node-<node rank>/<file>`; the run's rank 0 says where in TRAINING_RUN_RECORD of
# its workflow's workspace.
WORKER_LOGS = "logs"
TRAINING_RUN_RECORD = "training-run.json"


def archived_logs_prefix(workspace: str, workflow: str) -> str:
    """Where Argo archives a workflow's pod logs: `<workspace>/<workflow>/logs` (the keyFormat's folder)."""
    return f"{workspace.rstrip('/')}/{workflow}/{ARCHIVED_LOGS}"


# --- Published models and their bucket notifications ---------------------------------------------------------
# A version is `<store>/<model>/<version>/manifest.json` (written last); the Sensor's key filter
# (pipelines/platform/events.py) and the validate step (steps/runtime/storage/objectstore/notifications.py) read the
# same layout. A local directory store is the bucket LOCAL_BUCKET with no prefix.
MANIFEST_NAME = "manifest.json"
# What the train step exports and the predictor, validate and `paddle-mlops publish` require (plus tokenizer files).
EXPORTED_FILES = ("inference.json", "inference.pdiparams", "label_map.json", "model_config.json")
# Which engine variant serves the export, and why (steps/runtime/serving/engine_selection.py writes it beside the export
# at evaluate; the predictor reads it). A model without one is served by Paddle fp32.
ENGINE_FILE = "engine.json"
# The MLflow model files evaluate writes at the root of the export (steps/runtime/serving/mlflow_model.py), so a
# published version is an MLflow model directory: `code/` holds the loader module's import closure.
MLFLOW_CODE_DIR = "code"
MLFLOW_MODEL_FILES = ("MLmodel", "requirements.txt", "python_env.yaml", "conda.yaml", "input_example.json",
                      "serving_input_example.json", MLFLOW_CODE_DIR)  # fmt: skip
LOCAL_BUCKET = "local"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # model and version names: never need escaping in a key
# Argo Events' minio EventSource dispatches a notification's records under this key (the Sensor reads
# `notification.0.s3.object.key`); the local run's own notifications have the same shape.
NOTIFICATION_RECORDS = "notification"


def store_bucket(store_uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of a store: `s3://bucket/prefix`, or a local directory (`local`) as LOCAL_BUCKET."""
    if store_uri.startswith("s3://"):
        bucket, _, prefix = store_uri[len("s3://") :].partition("/")
        return bucket, prefix.strip("/")
    return LOCAL_BUCKET, ""


# MLflow registered-model aliases carry the deployment state: registered, not yet serving; serving
# 100%; what a rollback returns to.
CHALLENGER = "challenger"
CHAMPION = "champion"
PREVIOUS_CHAMPION = "previous-champion"

# Prometheus series, named `paddle_mlops_<subsystem>_<name>_<unit>` (scheme: steps/runtime/training/metrics.py).
# The steps export them; the alerts and dashboards (pipelines/observability/) and the rollout's
# health check read them.
# Training: rank 0's `/metrics` while it trains (steps/runtime/training/metrics.py).
TRAIN_SAMPLES_PER_SECOND = "paddle_mlops_train_samples_per_second"
TRAIN_LOSS = "paddle_mlops_train_loss"
TRAIN_STEP = "paddle_mlops_train_step"
TRAIN_EPOCH = "paddle_mlops_train_epoch"
TRAIN_DATALOADER_WAIT_SECONDS = "paddle_mlops_train_dataloader_wait_seconds"
TRAIN_GPU_MEMORY_BYTES = "paddle_mlops_train_gpu_memory_bytes"
# Serving: the model server's `/metrics` (steps/runtime/serving/model_server/metrics.py).
SERVING_REQUESTS_TOTAL = "paddle_mlops_serving_requests_total"
SERVING_REQUEST_LATENCY_SECONDS = "paddle_mlops_serving_request_latency_seconds"
SERVING_BATCH_SIZE = "paddle_mlops_serving_batch_size"
SERVING_ERRORS_TOTAL = "paddle_mlops_serving_errors_total"
# 1 for the engine variant the model server runs (labels model, engine, precision, fallback): which one serves.
SERVING_ENGINE_INFO = "paddle_mlops_serving_engine_info"
# Argo custom metrics of every step (pipelines/observability/argo_metrics.py); the controller exports them with
# its own `argo_workflows_` prefix.
STEP_DURATION = "paddle_mlops_step_duration_seconds"
STEP_RESULT = "paddle_mlops_step_result_total"
GATE_PASSED = "paddle_mlops_gate_passed"
ROLLOUT_OUTCOME = "paddle_mlops_rollout_outcome_total"
VALIDATION_VERDICT = "paddle_mlops_validation_verdict_total"

# Local runs keep their state here (the MLflow store, the object store, the serving record); the
# local executor sets the variable for every step it starts.
HOME_ENV = "PADDLE_MLOPS_HOME"
DEFAULT_HOME = ".paddle-mlops"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"


# The name of the run a step belongs to: the local executor sets RUN_ENV, Argo sets ARGO_WORKFLOW_ENV in every pod.
RUN_ENV = "PADDLE_MLOPS_RUN"
ARGO_WORKFLOW_ENV = "ARGO_WORKFLOW_NAME"


def workflow_run_name() -> str:
    """This step's run: `$PADDLE_MLOPS_RUN`, else `$ARGO_WORKFLOW_NAME`, else empty."""
    return os.environ.get(RUN_ENV) or os.environ.get(ARGO_WORKFLOW_ENV) or ""


# finetune-batch's MLflow runs (steps/batch_run.py): the batch's parent run, whose id its step outputs as
# BATCH_PARENT_PARAMETER and every branch's train step takes, and its tasks' training runs as children, all in
# BATCH_EXPERIMENT (MLflow's UI nests a child under its parent only within one experiment).
BATCH_EXPERIMENT = "finetune-batch"
BATCH_PARENT_PARAMETER = "parent-run-id"


# The step cache (steps/runtime/caching/store.py): the output parameter every cacheable step reports its use of the
# cache in, the `rerun` value that computes every step, and the task that looks training up in the cache before
# the training job would start (its name is the train task's plus this suffix).
CACHE_OUTPUT = "cache"
RERUN_ALL = "all"
CACHE_LOOKUP_SUFFIX = "-cache"
# The step cache's folder beside the workspace root (<workdir>/step-cache locally), and where train-cache leaves the
# train step's key for the training job (in the workspace).
STEP_CACHE_DIR = "step-cache"
# The workflow parameters that carry the step cache root and the steps to rerun to every cacheable step.
STEP_CACHE_PARAMETER = "step-cache"
RERUN_PARAMETER = "rerun"
TRAIN_KEY_FILE = "cache/train-key.json"

# A training job and the train step that places and watches it (steps/train_job.py): the labels every training job
# carries (its workflow and task, which the exit handler selects by; its training run, by which a train step finds
# another live trainer of the same run), and the environment variable the step reads the job's manifest from.
WORKFLOW_LABEL = "paddle-mlops/workflow"
TASK_LABEL = "paddle-mlops/task"
TRAIN_RUN_LABEL = "paddle-mlops/train-run"
TRAINING_JOB_ENV = "PADDLE_MLOPS_TRAINING_JOB"


# argo-events manifests/base/crds/argoproj.io_eventbus.yaml: `plural: eventbus`; every other kind the project names
# takes the regular English plural.
IRREGULAR_PLURALS = {"EventBus": "eventbus"}


def resource_plural(kind: str) -> str:
    """The plural a custom resource of `kind` is addressed by (`trainjobs`, `workloads`): RBAC rules, the API, CRDs."""
    if kind in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[kind]
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def train_run_name(task: str, run_id: str) -> str:
    """The label value (and Argo mutex name) of one training run: `run-` and 32 hex digits of `<task>/<run id>`, the
    prefix its checkpoints are kept under (steps/runtime/training/run_id.py): a label value has at most 63 characters
    and an explicit run id may have 128."""
    return "run-" + hashlib.sha256(f"{task}/{run_id}".encode()).hexdigest()[:32]


def home_dir() -> Path:
    """Where embedded defaults live locally: `$PADDLE_MLOPS_HOME`, else `./.paddle-mlops` (absolute)."""
    return Path(os.environ.get(HOME_ENV, DEFAULT_HOME)).resolve()


def tracking_uri(configured: str | None = None, home: Path | None = None) -> str:
    """`$MLFLOW_TRACKING_URI`, else `configured` (`mlflow.tracking_uri`), else SQLite `mlflow.db` in
    `home` (default `home_dir()`). Creates nothing; an empty string counts as unset."""
    return os.environ.get(TRACKING_URI_ENV) or configured or f"sqlite:///{(home or home_dir()) / 'mlflow.db'}"


# MLflow's client-side SQLite store puts a new experiment's artifacts under `./mlruns` of whatever directory the
# process runs in (mlflow/store/tracking/__init__.py DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH): a run from the checkout
# would write there, outside the workdir. Experiments we create keep them beside the database instead.
ARTIFACTS_DIR = "mlruns"


def artifact_root(uri: str) -> Path | None:
    """Where the experiments of a local SQLite tracking store keep their artifacts (`<db folder>/mlruns`); None for
    a tracking server, whose own artifact root (`mlflow server --artifacts-destination`) decides."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :]).resolve().parent / ARTIFACTS_DIR


# The MLflow 3 UI lays an experiment out by its `workflowType`: the URL parameter, else the browser's last
# choice, else GenAI (traces overview). Every link to an experiment we print asks for the model-training view.
MLFLOW_UI_VIEW = "workflowType=machine_learning"


def mlflow_ui_url(base: str, experiment_id: str, run_id: str | None = None) -> str:
    """The MLflow UI page of an experiment (or one of its runs) in the model-training view."""
    page = f"#/experiments/{experiment_id}" + (f"/runs/{run_id}" if run_id else "")
    return f"{base.rstrip('/')}/{page}?{MLFLOW_UI_VIEW}"


# `model.pretrained: pvc://CLAIM/path`: a ReadOnlyMany volume the training pods mount read-only at
# PRETRAINED_MOUNT/CLAIM (pipelines/k8s.py pretrained_volume); the train step reads
# PRETRAINED_MOUNT/CLAIM/path. PRETRAINED_MOUNT_ENV moves the mount point (tests, other layouts).
# `model.pretrained: <PaddleNLP name>`: `paddle-mlops weights stage` publishes the weights content-addressed under
# <region store>/PRETRAINED_PREFIX/<name>/<digest>/ (manifest last, like models); prepare-data resolves the name
# to one digest and writes PRETRAINED_RECORD into the data area, which the train step fetches and verifies.
# REGION_ENV names the region a pod runs in, where the pipeline pins it (its store is the one read).
PRETRAINED_PREFIX = "pretrained"
PRETRAINED_RECORD = "pretrained.json"
REGION_ENV = "PADDLE_MLOPS_REGION"
# The region an object is for (an InferenceService and so its predictor pods, a MultiKueue worker's training pods, a
# ResourceFlavor): the per-region NetworkPolicies select by it.
REGION_OBJECT_LABEL = "paddle-mlops/region"
# The keys of a store's credentials Secret (storage.credentials_secret, configs/regions store_credentials_secret).
STORE_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
PVC_SCHEME = "pvc://"
PRETRAINED_MOUNT = "/mnt/pretrained"
PRETRAINED_MOUNT_ENV = "PADDLE_MLOPS_PRETRAINED_MOUNT"
_PVC = re.compile(r"^pvc://([a-z0-9]([-a-z0-9]*[a-z0-9])?)(/[^\x00]*)?$")


def pvc_location(location: str) -> tuple[str, str] | None:
    """(claim, path inside it) of a `pvc://CLAIM/path` location; None for any other location.
    Raises ValueError for a pvc:// location whose claim is not a valid name."""
    if not location.startswith(PVC_SCHEME):
        return None
    match = _PVC.match(location)
    if not match:
        raise ValueError(
            f"{location!r} is not pvc://CLAIM/path (CLAIM: the PersistentVolumeClaim's name, lower case, digits, '-')"
        )
    return match.group(1), (match.group(3) or "").strip("/")


def store_credentials_env(region: str) -> dict[str, str]:
    """Secret key → the variable that carries it for `region`'s own store, beside the default store's
    AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: a pod that reads several stores has each one's keys
    (PADDLE_MLOPS_STORE_CN_EAST_AWS_ACCESS_KEY_ID for cn-east)."""
    prefix = "PADDLE_MLOPS_STORE_" + region.upper().replace("-", "_")
    return {key: f"{prefix}_{key}" for key in STORE_CREDENTIAL_KEYS}


# A template annotated so does something only a cluster can (pre-pulling images on its nodes): the local
# executor skips its tasks and says why (the annotation's value).
CLUSTER_ONLY_ANNOTATION = "paddle-mlops/cluster-only"


# Production pins every image of the install set by digest through a kustomize overlay (overlays/prod,
# `images:` as `kustomize edit set image` writes them). Before a release fills it, each entry carries this digest,
# which no image has: lint (--env prod) and preflight report it as not released, never as pinned.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
