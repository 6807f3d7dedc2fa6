"""The default training backend: a Kubeflow Trainer v2 TrainJob on the `paddle-distributed`
ClusterTrainingRuntime, admitted by Kueue.

- The runtime (argo/training-runtime.yaml) is one JobSet replicated job `node` labelled as the
  trainer ancestor, its container named `node`: trainer v2.3.0 pkg/runtime/framework/plugins/jobset/
  builder.go Trainer() overwrites image, command and args of exactly that container and sets the
  Job's parallelism/completions to `trainer.numNodes`. Restricted pods, /dev/shm, the training image.
- The TrainJob (created by the `train` resource template) carries the run's image by digest, the
  command, the env and resources per node, the Kueue queue and priority labels, and is created
  suspended so that Kueue admits it (kueue v0.19.2 pkg/controller/jobs/trainjob). Its
  `runtimePatches` entry adds the placement Kueue reads before admission: required node affinity
  on `region` (the regions the run may use; one when its data may not move), the topology
  request that keeps the workers inside one network block, and a `pvc://` weights volume.
- Rendezvous: JobSet names pod i of the Indexed Job `<trainjob>-node-0-<i>` in the subdomain
  `<trainjob>` (jobset v0.12.0 jobset_controller.go, DNS hostnames on by default), so rank 0 is
  `<trainjob>-node-0-0.<trainjob>` and a pod's rank is its JOB_COMPLETION_INDEX.
  `steps.runtime.training.launch` resolves that name and runs `paddle.distributed.launch --master IP:PORT`.
- Success and failure come from the TrainJob's conditions (Suspended, Complete, Failed: trainer
  pkg/apis/trainer/v1alpha1/trainjob_types.go), which the train step reads (steps/runtime/cluster/job_state.py).
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PART_OF, REGION_ENV, REGION_OBJECT_LABEL
from pipelines import k8s, restart_policy
from pipelines.job_spec import TRAIN_RUN, TrainingJobSpec, job_metadata
from pipelines.kueue_names import LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from pipelines.labels import TRAIN_POD_LABELS, TRAIN_RUN_LABEL
from pipelines.run_scope import WORKFLOW, RunScope
from pipelines.service_accounts import TRAIN_SERVICE_ACCOUNT
from pipelines.train_node import MASTER_PORT, job_resources, node_env, train_image, train_script_args

API = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "paddle-distributed"
# trainer v2.3.0 pkg/constants/constants.go: Node ("name of the Job and container for the trainer
# node"), LabelTrainJobAncestor / AncestorTrainer.
NODE = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
# jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go JobSetNameKey: on every pod of the JobSet,
# which has the TrainJob's name (trainer plugins/jobset/jobset.go Build).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# runtimePatches are keyed by a domain-prefixed manager (trainer plugins/jobset/jobset.go Validate);
# Kueue writes its own under kueue.x-k8s.io/manager.
PATCH_MANAGER = "paddle-mlops.io/placement"
# kueue v0.19.2 apis/kueue/v1beta2/topology_types.go
TOPOLOGY_ANNOTATIONS = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}
REGION_LABEL = "region"
# What the grace period keeps after the launcher's hard stop: the kill, the processes' exit, the container's end.
STOP_MARGIN_SECONDS = 10
PRIORITY = "{{workflow.parameters.priority}}"


def launch_command(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> list[str]:
    """contracts.md "Training launch" on a TrainJob: `$(VAR)` is expanded by the kubelet from the
    container's env (TRAINJOB_NAME from the JobSet label, JOB_COMPLETION_INDEX set by the Job controller)."""
    job = cfg.training.job
    return [
        "python", "-m", "steps.runtime.training.launch",
        "--master", f"$(TRAINJOB_NAME)-{NODE}-0-0.$(TRAINJOB_NAME):{MASTER_PORT}",
        "--nnodes", str(job.workers),
        "--rank", "$(JOB_COMPLETION_INDEX)",
        "--nproc_per_node", str(job.gpus_per_worker or 1),
        "--log_dir", "/tmp/paddle-log",
        # SIGTERM: past this, a rank still stuck (in a collective with a peer that left) is killed and the node
        # exits 143 before the kubelet's SIGKILL at the end of the grace period (steps/runtime/training/launch.py).
        "--stop-timeout", str(cfg.training.checkpoint.grace_seconds - STOP_MARGIN_SECONDS),
        *train_script_args(scope),
    ]  # fmt: skip


def _node_pod(cfg: PipelineConfig, region: str | None = None) -> dict[str, Any]:
    """The runtime's pod: restricted, /dev/shm, no API token. No nodeSelector or tolerations: the
    ResourceFlavor Kueue admits the job in sets them (region, GPU type, cost tier). `region`: a MultiKueue
    worker's runtime, whose pods all run in that region, tells the train step so (its store holds the weights)."""
    job = cfg.training.job
    shm = k8s.shm_volume(job.shm_size)
    tmp = k8s.tmp_volume()
    ports = [{"name": "master", "containerPort": MASTER_PORT, "protocol": "TCP"}]
    if cfg.training.metrics_port:
        ports.append({"name": "metrics", "containerPort": cfg.training.metrics_port, "protocol": "TCP"})
    container = {
        "name": NODE,
        "image": cfg.images.train,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": k8s.PROJECT_DIR,
        # The TrainJob's trainer.command refers to it; env on this container may not be patched (only trainer.env).
        "env": [
            {
                "name": "TRAINJOB_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_NAME_LABEL}']"}},
            },
            # trainer v2.3.0 pkg/runtime/framework/plugins/jobset/builder.go Trainer(): the TrainJob's
            # trainer.env is upserted by name into this list, so a runtime's own variables stay.
            *([{"name": REGION_ENV, "value": region}] if region else []),
        ],
        "ports": ports,
        "resources": job_resources(cfg, job.gpus_per_worker),
        "securityContext": k8s.as_k8s(k8s.container_security_context()),
        "volumeMounts": [
            {"name": tmp.name, "mountPath": tmp.mount_path},
            {"name": shm.name, "mountPath": shm.mount_path},
        ],
    }
    labels = {**PART_OF, **TRAIN_POD_LABELS, **({REGION_OBJECT_LABEL: region} if region else {})}
    return {
        "metadata": {"labels": labels},
        "spec": {
            "serviceAccountName": TRAIN_SERVICE_ACCOUNT,
            "automountServiceAccountToken": False,
            # Never: what the pod failure policy requires; a failed pod fails its Job and JobSet restarts the gang.
            "restartPolicy": "Never",
            # SIGTERM: checkpoint at the next step boundary and exit (steps/runtime/training/graceful_stop.py) before
            # the kill; sized from the measured checkpoint time (paddle_mlops_core/config/checkpoint.py).
            "terminationGracePeriodSeconds": cfg.training.checkpoint.grace_seconds,
            "securityContext": k8s.as_k8s(k8s.pod_security_context()),
            "containers": [container],
            "volumes": [
                {"name": tmp.name, "emptyDir": {}},
                {"name": shm.name, "emptyDir": {"medium": "Memory", "sizeLimit": job.shm_size}},
            ],
        },
    }


def cluster_training_runtime(cfg: PipelineConfig, region: str | None = None) -> dict[str, Any]:
    """`paddle-distributed`: one Indexed Job of `numNodes` pods; a failed pod fails its Job (backoffLimit 0) and
    JobSet restarts the whole gang by the restart policy (restart_policy.py): a crash up to
    `training.job.backoff_limit` times, a disruption without counting, the fatal exit code never."""
    job = cfg.training.job
    return {
        "apiVersion": API,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {**PART_OF, "trainer.kubeflow.org/framework": "paddle"}},
        "spec": {
            # No framework policy: Trainer has no Paddle plugin; PlainML applies numNodes and env.
            "mlPolicy": {"numNodes": job.workers},
            "template": {
                "spec": {
                    "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                    "failurePolicy": restart_policy.jobset_failure_policy(job.backoff_limit),
                    # No ttlSecondsAfterFinished: trainer v2.3.0 pkg/controller/trainjob_controller.go Reconcile drops
                    # a Failed condition (removeFailedCondition) before it checks whether the TrainJob finished, so a
                    # failed TrainJob whose JobSet the TTL deleted gets a new JobSet, unsuspended, outside Kueue
                    # (kubeflow/trainer#3779, fixed after 2.3.0). The JobSet goes with its TrainJob, which goes with
                    # its Workflow (pipelines/job_spec.py WORKFLOW_OWNER) or when the next train attempt replaces it.
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                                "spec": {
                                    "backoffLimit": 0,
                                    "podFailurePolicy": restart_policy.pod_failure_policy(NODE),
                                    "template": _node_pod(cfg, region),
                                },
                            },
                        }
                    ],
                }
            },
        },
    }


def _placement_patch(cfg: PipelineConfig) -> dict[str, Any]:
    regions = [r.name for r in k8s.training_regions(cfg)]
    # The pods carry the training run, so that a train step waits for an earlier trainer's pods of the run to be gone
    # (their grace period, their stop checkpoint) before it starts one (steps/runtime/cluster/train_job.py).
    pod_meta: dict[str, Any] = {"labels": {TRAIN_RUN_LABEL: TRAIN_RUN}}
    topology = cfg.training.placement.topology
    if topology != "none" and cfg.cluster.topology_levels:
        pod_meta["annotations"] = {TOPOLOGY_ANNOTATIONS[topology]: cfg.training.placement.topology_level}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": REGION_LABEL, "operator": "In", "values": regions}]}
                ]
            }
        }
    }
    pod_template: dict[str, Any] = {"spec": {"affinity": affinity}}
    pretrained = k8s.pretrained_volume(cfg)
    if pretrained:  # the run's weights volume, read-only (patches may add volumes and mounts, not env)
        pod_template["spec"]["volumes"] = [pretrained[0]]
        pod_template["spec"]["containers"] = [{"name": NODE, "volumeMounts": [pretrained[1]]}]
    pod_template["metadata"] = pod_meta
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": NODE, "template": {"spec": {"template": pod_template}}}]}}
        },
    }


def trainjob(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> TrainingJobSpec:
    """The TrainJob the `train` step creates."""
    job = cfg.training.job
    metadata = job_metadata(scope)
    metadata["labels"].update({QUEUE_NAME_LABEL: LOCAL_QUEUE, PRIORITY_CLASS_LABEL: PRIORITY})
    manifest = {
        "apiVersion": API,
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": RUNTIME},
            # Kueue's webhook would suspend it too; created suspended, nothing starts before admission.
            "suspend": True,
            "activeDeadlineSeconds": job.active_deadline_seconds,
            "trainer": {
                "image": train_image(cfg),
                "command": launch_command(cfg, scope),
                "env": node_env(cfg),
                "numNodes": job.workers,
                "resourcesPerNode": job_resources(cfg, job.gpus_per_worker),
            },
            "runtimePatches": [_placement_patch(cfg)],
        },
    }
    return TrainingJobSpec(manifest)
