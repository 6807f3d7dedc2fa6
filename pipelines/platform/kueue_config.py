"""What the install set needs from Kueue's own configuration (the `Configuration` in ConfigMap
kueue-system/kueue-manager-config, key controller_manager_config.yaml: kueue v0.19.2
config/components/manager/kustomization.yaml, config/default namePrefix `kueue-`).

Kueue's configuration belongs to its install, not to this one, so it is not generated; `paddle-mlops
preflight` reads it and says what to add:
- `integrations.frameworks` must list the TrainJob integration: when the list is empty Kueue enables
  `batch/job` alone (apis/config/v1beta2/defaults.go defaultJobFrameworkName), and a TrainJob in a
  queue would then never be admitted;
- a MultiKueue manager must run the Incremental dispatcher with one cluster per round
  (multiKueue.dispatcherName, incrementalDispatcherConfig.stepSize: 1): see `pipelines/platform/multikueue.py`;
- `waitForPodsReady` (WAIT_FOR_PODS_READY, docs/training.md "Kueue's manager configuration"): an admitted TrainJob
  whose pods are not all ready within `timeout` (an image that cannot be pulled, a rendezvous that never happens) is
  evicted, its quota freed, and requeued with backoff; after `backoffLimitCount` requeues it is deactivated instead
  of cycling forever; a gang broken mid-run gets `recoveryTimeout` to come back. In the v1beta2 configuration Kueue
  0.19 turns it on by default (apis/config/v1beta2/defaults.go: timeout 30m, recoveryTimeout = timeout, no backoff
  limit) unless the DisableWaitForPodsReady feature gate is set; a v1beta1 configuration has it only with
  `enable: true` (apis/config/v1beta1/configuration_conversion.go). pkg/controller/jobframework/reconciler.go
  evicts by suspending the same job (stopJob) and re-admits it by unsuspending it (startJob): the TrainJob keeps its
  name, its pods start again and resume from the run's checkpoints;
- `objectRetentionPolicies.workloads.afterDeactivatedByKueue` (apis/config/v1beta2/configuration_types.go; unset by
  default): that long after Kueue deactivated a Workload, jobframework/reconciler.go
  handleWorkloadAfterDeactivatedPolicy deletes its job, the TrainJob. The train step fails as soon as it reads the
  deactivation (with Kueue's reason, steps/runtime/cluster/job_state.py deactivated); a retention shorter than its
  reads leaves it only a TrainJob that is gone, without the reason, so it must be unset or at least
  DEACTIVATED_RETENTION_SECONDS.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from paddle_mlops_core.contracts import RENDEZVOUS_TIMEOUT_SECONDS

CONFIGMAP = "kueue-manager-config"
CONFIGMAP_KEY = "controller_manager_config.yaml"
NAMESPACE = "kueue-system"
DEPLOYMENT = "kueue-controller-manager"
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
DEFAULT_FRAMEWORKS = ("batch/job",)  # apis/config/v1beta2/defaults.go: the list when none is configured
# apis/config/v1beta2/configuration_types.go MultiKueueDispatcherMode*; defaults.go: AllAtOnce unless set.
DISPATCHER_ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
DISPATCHER_INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
DEFAULT_STEP_SIZE = 3  # pkg/controller/workloaddispatcher/incrementaldispatcher.go DefaultStepSize
V1BETA1 = "config.kueue.x-k8s.io/v1beta1"
DISABLE_PODS_READY_GATE = "DisableWaitForPodsReady"  # pkg/features/kube_features.go, alpha in 0.19
# A training node's pods become ready once their image is pulled (8-10 GB; pre-pulled while the data is prepared,
# pipelines/prepull.py, but a cold node pulls it) and wait for rank 0's name for up to RENDEZVOUS_TIMEOUT_SECONDS.
IMAGE_PULL_SECONDS = 600
MIN_TIMEOUT_SECONDS = IMAGE_PULL_SECONDS + RENDEZVOUS_TIMEOUT_SECONDS
# The documented waitForPodsReady (docs/training.md): the pull and the rendezvous, then evict and requeue; a gang
# JobSet recreates mid-run (the old pods' grace period, scheduling, the pull on another node) gets 15 minutes.
WAIT_FOR_PODS_READY: dict[str, Any] = {
    "timeout": f"{MIN_TIMEOUT_SECONDS // 60}m",
    "recoveryTimeout": "15m",
    "blockAdmission": False,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 5, "backoffBaseSeconds": 60,
                          "backoffMaxSeconds": 3600},
}  # fmt: skip
# The longest a deactivation can go unread by the train step: its poll, the backoff between two attempts (capped at
# 2 minutes: pipelines/train_step.py BACKOFF_CAP_SECONDS) and a pod's start, with room to spare.
DEACTIVATED_RETENTION_SECONDS = 300
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms)")


def parse(data: dict[str, str] | None) -> dict[str, Any]:
    """The Configuration in the ConfigMap's data ({} when missing or not YAML)."""
    try:
        parsed = yaml.safe_load((data or {}).get(CONFIGMAP_KEY) or "") or {}
    except yaml.YAMLError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def frameworks(config: dict[str, Any]) -> tuple[str, ...]:
    """The integrations Kueue enables with this configuration (its default when none are listed)."""
    listed = ((config.get("integrations") or {}).get("frameworks")) or []
    return tuple(str(f) for f in listed) or DEFAULT_FRAMEWORKS


def dispatcher(config: dict[str, Any]) -> tuple[str, int]:
    """(dispatcherName, incremental step size) with Kueue's defaults applied."""
    multikueue = config.get("multiKueue") or {}
    name = multikueue.get("dispatcherName") or DISPATCHER_ALL_AT_ONCE
    step = (multikueue.get("incrementalDispatcherConfig") or {}).get("stepSize") or DEFAULT_STEP_SIZE
    return str(name), int(step)


def seconds(duration: Any) -> float | None:
    """A metav1.Duration string (`20m`, `1h30m`, `90s`) in seconds; None when it is not one."""
    text = str(duration).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def pods_ready(config: dict[str, Any], manager_args: list[str]) -> dict[str, Any] | None:
    """The waitForPodsReady Kueue runs with this configuration and manager flags (its defaults applied), None when
    it is off (module docstring)."""
    gates = {str(k): bool(v) for k, v in (config.get("featureGates") or {}).items()}
    for arg in manager_args:
        if arg.startswith("--feature-gates="):
            for item in arg.split("=", 1)[1].split(","):
                name, _, flag = item.partition("=")
                gates[name.strip()] = flag.strip().lower() == "true"
    block = config.get("waitForPodsReady")
    if gates.get(DISABLE_PODS_READY_GATE):
        return None
    if config.get("apiVersion") == V1BETA1 and not (block or {}).get("enable"):
        return None
    block = dict(block or {})
    block.setdefault("timeout", "30m")
    block.setdefault("recoveryTimeout", block["timeout"])
    block["requeuingStrategy"] = dict(block.get("requeuingStrategy") or {})
    return block


def deactivated_retention(config: dict[str, Any]) -> Any:
    """`objectRetentionPolicies.workloads.afterDeactivatedByKueue` as configured (None: unset, jobs are kept)."""
    policies = config.get("objectRetentionPolicies") or {}
    return (policies.get("workloads") or {}).get("afterDeactivatedByKueue")
