"""What the install set needs from Kueue's own configuration (the `Configuration` in ConfigMap
kueue-system/kueue-manager-config, key controller_manager_config.yaml: kueue v0.19.2
config/components/manager/kustomization.yaml, config/default namePrefix `kueue-`).

Kueue's configuration belongs to its install, not to this one, so it is not generated; `paddle-mlops
preflight` reads it and says what to add:
- `integrations.frameworks` must list the TrainJob integration: when the list is empty Kueue enables
  `batch/job` alone (apis/config/v1beta2/defaults.go defaultJobFrameworkName), and a TrainJob in a
  queue would then never be admitted;
- a MultiKueue manager must run the Incremental dispatcher with one cluster per round
  (multiKueue.dispatcherName, incrementalDispatcherConfig.stepSize: 1): see `pipelines/platform/multikueue.py`.
"""

from __future__ import annotations

from typing import Any

import yaml

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
