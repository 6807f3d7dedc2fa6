"""The PaddleJob that the `train` step creates, for either training operator.

The legacy backends (`training.backend`): Kubeflow's `kubeflow.org/v1` (training-operator,
`kubeflow-paddlejob`) or the Paddle operator's `batch.paddlepaddle.org/v1` (`paddle-operator`); the
default TrainJob backend is pipelines/trainjob.py. Both get the same pod: pinned image, restricted security,
GPU placement, /dev/shm and credentials by Secret reference. The train step judges each job by the
state its operator reports as final (steps/runtime/cluster/job_state.py: Kubeflow's Succeeded/Failed
conditions, the Paddle operator's phase), never by pod counts that also move while the operator restarts a pod.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PART_OF
from pipelines import k8s
from pipelines.job_spec import TRAIN_RUN, TrainingJobSpec, job_metadata
from pipelines.labels import TRAIN_POD_LABELS, TRAIN_RUN_LABEL
from pipelines.run_scope import WORKFLOW, RunScope
from pipelines.service_accounts import TRAIN_SERVICE_ACCOUNT
from pipelines.train_node import MASTER_PORT, job_resources, node_env, train_image, train_script_args

# Kubeflow's Paddle controller finds the job's container and rendezvous port by these names.
KUBEFLOW_CONTAINER = "paddle"
KUBEFLOW_PORT = MASTER_PORT


def worker_command(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> list[str]:
    """contracts.md "Training launch"; rendezvous comes from the operator's PADDLE_* env."""
    job = cfg.training.job
    command = [
        "python",
        "-m",
        "paddle.distributed.launch",
        "--nproc_per_node",
        str(job.gpus_per_worker or 1),
        "--log_dir",
        "/tmp/paddle-log",
    ]
    if job.ps_replicas > 0:
        # Server/trainer endpoints and counts are injected by the operator
        # (PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM); only the mode is ours to say.
        command += ["--run_mode", "ps"]
    return command + train_script_args(scope)


def pod_template(
    cfg: PipelineConfig, container_name: str, gpus: int, ports: list[dict[str, Any]], scope: RunScope = WORKFLOW
) -> dict[str, Any]:
    """One replica's pod: the same security and placement for workers and parameter servers."""
    job = cfg.training.job
    region = k8s.region_config(cfg)
    team = k8s.team_config(cfg)
    shm = k8s.shm_volume(job.shm_size)
    tmp = k8s.tmp_volume()
    container: dict[str, Any] = {
        "name": container_name,
        "image": train_image(cfg),
        "imagePullPolicy": "IfNotPresent",
        "workingDir": k8s.PROJECT_DIR,
        "command": worker_command(cfg, scope),
        "env": node_env(cfg),
        "resources": job_resources(cfg, gpus),
        "securityContext": k8s.as_k8s(k8s.container_security_context()),
        "volumeMounts": [
            {"name": tmp.name, "mountPath": tmp.mount_path},
            {"name": shm.name, "mountPath": shm.mount_path},
        ],
    }
    pretrained = k8s.pretrained_volume(cfg)
    if cfg.training.metrics_port:
        # Named so that the training PodMonitor (pipelines/observability/monitors.py) scrapes it by name.
        ports = [*ports, {"name": "metrics", "containerPort": cfg.training.metrics_port, "protocol": "TCP"}]
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {
        "serviceAccountName": TRAIN_SERVICE_ACCOUNT,
        "priorityClassName": team.priority.name,
        # SIGTERM: checkpoint at the next step boundary and exit (steps/runtime/training/graceful_stop.py) before the
        # kill.
        "terminationGracePeriodSeconds": cfg.training.checkpoint.grace_seconds,
        "securityContext": k8s.as_k8s(k8s.pod_security_context()),
        # Training pods reach only object storage and MLflow; they need no Kubernetes API token.
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [
            {"name": tmp.name, "emptyDir": {}},
            {"name": shm.name, "emptyDir": {"medium": "Memory", "sizeLimit": job.shm_size}},
        ],
    }
    if pretrained:
        spec["volumes"].append(pretrained[0])
        container["volumeMounts"].append(pretrained[1])
    if gpus > 0:
        spec["tolerations"] = k8s.as_k8s(k8s.gpu_tolerations(region))
        spec["nodeSelector"] = k8s.gpu_node_selector(region)
    # The component label is what the training NetworkPolicy selects on; the training run, what a train step waits on
    # before it starts another trainer of the run (steps/runtime/cluster/train_job.py).
    return {"metadata": {"labels": {**PART_OF, **TRAIN_POD_LABELS, TRAIN_RUN_LABEL: TRAIN_RUN}}, "spec": spec}


def kubeflow_job(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> TrainingJobSpec:
    """training-operator PaddleJob: Worker replicas; a Master replica selects PS mode there."""
    job = cfg.training.job
    team = k8s.team_config(cfg)
    ports = [{"name": "master", "containerPort": KUBEFLOW_PORT, "protocol": "TCP"}]
    replicas: dict[str, Any] = {
        "Worker": {
            "replicas": job.workers,
            "restartPolicy": "OnFailure",
            "template": pod_template(cfg, KUBEFLOW_CONTAINER, job.gpus_per_worker, ports, scope),
        }
    }
    if job.ps_replicas > 0:
        replicas["Master"] = {
            "replicas": job.ps_replicas,
            "restartPolicy": "OnFailure",
            "template": pod_template(cfg, KUBEFLOW_CONTAINER, 0, ports, scope),
        }
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PaddleJob",
        "metadata": job_metadata(scope),
        "spec": {
            "paddleReplicaSpecs": replicas,
            "runPolicy": {
                "backoffLimit": job.backoff_limit,
                "activeDeadlineSeconds": job.active_deadline_seconds,
                "cleanPodPolicy": job.clean_pod_policy,
                "ttlSecondsAfterFinished": job.ttl_seconds_after_finished,
                "schedulingPolicy": {
                    "priorityClass": team.priority.name,
                    "queue": job.queue,
                    # Gang scheduling: all replicas or none, so a half-placed job holds no GPUs.
                    "minAvailable": job.workers + job.ps_replicas,
                    "scheduleTimeoutSeconds": job.schedule_timeout_seconds,
                },
            },
        },
    }
    return TrainingJobSpec(manifest)


# Kubeflow's policy names (the config's) mapped onto the Paddle operator's, which deletes all of a
# job's pods or none (controllers/paddlejob_controller.go Reconcile). "Running" (no pod left running
# once the job ends) is OnFailure: a Completed job has only Succeeded pods, a Failed one still has
# the other workers running, holding their GPUs.
_PADDLE_CLEAN_POD_POLICY = {"None": "Never", "Running": "OnFailure", "All": "Always"}


def paddle_operator_job(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> TrainingJobSpec:
    """Paddle operator PaddleJob: `worker` (and `ps` in parameter-server mode)."""
    job = cfg.training.job
    team = k8s.team_config(cfg)
    spec: dict[str, Any] = {
        "cleanPodPolicy": _PADDLE_CLEAN_POD_POLICY[job.clean_pod_policy],
        # Gloo gives the CPU-side barrier PS mode and the launcher's rendezvous need.
        "withGloo": 1,
        "intranet": "PodIP",
        "schedulingPolicy": {
            "priorityClass": team.priority.name,
            "queue": job.queue,
            "minAvailable": job.workers + job.ps_replicas,
        },
        "worker": {"replicas": job.workers, "template": _paddle_pod(cfg, job.gpus_per_worker, scope)},
    }
    if job.ps_replicas > 0:
        spec["ps"] = {"replicas": job.ps_replicas, "template": _paddle_pod(cfg, 0, scope)}
    manifest = {
        "apiVersion": "batch.paddlepaddle.org/v1",
        "kind": "PaddleJob",
        "metadata": job_metadata(scope),
        "spec": spec,
    }
    return TrainingJobSpec(manifest)


def _paddle_pod(cfg: PipelineConfig, gpus: int, scope: RunScope) -> dict[str, Any]:
    # The Paddle operator has no job deadline, and its pods restart never (restartPolicy Never):
    # the kubelet fails a pod past activeDeadlineSeconds, which fails the job and, by the clean
    # policy, deletes its other pods. So a job whose step was abandoned still ends.
    template = pod_template(cfg, "train", gpus, [], scope)
    template["spec"]["activeDeadlineSeconds"] = cfg.training.job.active_deadline_seconds
    return template


def build_paddlejob(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> TrainingJobSpec:
    """The PaddleJob of a legacy `training.backend`."""
    if cfg.training.backend == "kubeflow-paddlejob":
        return kubeflow_job(cfg, scope)
    return paddle_operator_job(cfg, scope)
