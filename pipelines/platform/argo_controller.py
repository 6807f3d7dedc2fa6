"""The Argo Workflows controller settings the pipeline needs: executor containers and metrics.

Argo adds its own `init` and `wait` executor containers to every workflow pod (argo-workflows
v4.1.2 workflow/controller/workflowpod.go: `newExecContainer`), and their securityContext and
resources come only from the controller's `executor` setting, nil by default. Under Pod Security
"restricted" in the pipeline namespace, a nil securityContext (no allowPrivilegeEscalation: false,
no capabilities drop) gets every container step refused. This module writes that setting, and the
metrics setting the controller PodMonitor relies on, as a `workflow-controller-configmap` document and as
the equivalent values of the argo/argo-workflows Helm chart. The `executor` setting also names argoexec's image
(pipelines/platform/upstream_images.py): by tag in argo/, by digest in a release overlay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import RUN_AS_GROUP, RUN_AS_USER, image_repository
from pipelines.platform.meta import metadata
from pipelines.platform.upstream_images import ARGOEXEC, pinned

# Names of the upstream install (manifests/base/workflow-controller/workflow-controller-configmap.yaml,
# namespace `argo` in manifests/install.yaml); `paddle-mlops preflight` reads the live one by these.
CONTROLLER_CONFIGMAP = "workflow-controller-configmap"
CONTROLLER_NAMESPACE = "argo"

METRICS_PORT = 9090
METRICS_PATH = "/metrics"
# Said explicitly: the controller's default flipped from plain HTTP (v3.5 controller.go
# `GetSecure(false)`) to a self-signed TLS listener (v3.6+ `GetSecure(true)`), and the Helm chart
# writes `secure: false` unless told otherwise. The controller PodMonitor scrapes https (observability/monitors.py).
METRICS_SECURE = True

# Requests and limits so quota'd team namespaces admit the pod on the executor containers' own
# terms (a LimitRange default would otherwise size them); argoexec init/wait stay small.
EXECUTOR_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "64Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}


def executor_security_context() -> dict[str, Any]:
    """The 'restricted' container controls for argoexec's init, wait and resource-main containers.

    No readOnlyRootFilesystem: upstream leaves it off for init and wait even in its own locked-down
    default for resource pods (workflowpod.go, "always set RO FS once #10787 is fixed").
    """
    return {
        "runAsNonRoot": True,
        # The project's uid: wait reads the files main writes under the shared /var/run/argo.
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def executor(pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The controller's `executor` setting (a core/v1 Container): argoexec's image, pinned by `pins` (an overlay's
    repository → digest), its resources and securityContext. Without `image` the controller runs its
    `--executor-image` default, `quay.io/argoproj/argoexec:<its version>`, by tag (workflow/controller/config.go)."""
    return {
        "image": pinned(ARGOEXEC, pins or {}),
        "resources": EXECUTOR_RESOURCES,
        "securityContext": executor_security_context(),
    }


def metrics_config() -> dict[str, Any]:
    """The controller's `metricsConfig` setting (config/config.go MetricsConfig)."""
    return {"enabled": True, "path": METRICS_PATH, "port": METRICS_PORT, "secure": METRICS_SECURE}


def controller_settings(pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Top-level controller config keys (config/config.go `Config` json names) → their values."""
    return {"executor": executor(pins), "metricsConfig": metrics_config()}


def controller_configmap(cfg: PipelineConfig, pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`workflow-controller-configmap` with one data key per setting, as the controller reads it.

    config/controller.go parseConfigMap: either a lone `config` key holding the whole YAML, or one
    key per top-level field, joined and strictly unmarshalled (an unknown key stops the controller
    from loading its config). Per-key data is what lets a strategic merge patch set these two keys of the
    upstream ConfigMap and nothing else (pipelines/platform/controller_settings.py).
    """
    del cfg  # the settings do not depend on the pipeline configuration (yet); kept for one signature
    data = {
        key: yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
        for key, value in controller_settings(pins).items()
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(CONTROLLER_CONFIGMAP, CONTROLLER_NAMESPACE),
        "data": data,
    }


def helm_values(pins: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The same settings as values of the argo/argo-workflows chart (argoproj/argo-helm,
    charts/argo-workflows/values.yaml, templates/controller/workflow-controller-config-map.yaml).

    The chart writes one `config` key into `<release>-workflow-controller-configmap`; with Helm, use
    these values instead of argo/controller-settings/argo-workflows.yaml (a per-key patch beside `config` is refused
    by the controller). The chart passes argoexec's image as the controller's `--executor-image` flag
    (templates/controller/workflow-controller-deployment.yaml: `registry/repository:tag`), so a digest goes into
    `tag` as `vX@sha256:…` (a reference with both is pulled by its digest). `scheme: https` is the chart's own
    ServiceMonitor, should it be enabled.
    """
    settings = executor(pins)
    registry, _, rest = settings.pop("image").partition("/")
    repository = rest.split("@", 1)[0].split(":", 1)[0]
    tag = ARGOEXEC.rsplit(":", 1)[1]
    digest = (pins or {}).get(image_repository(ARGOEXEC))
    image = {"registry": registry, "repository": repository, "tag": f"{tag}@{digest}" if digest else tag}
    return {
        "executor": {"image": image, **settings},
        "controller": {"metricsConfig": {**metrics_config(), "scheme": "https" if METRICS_SECURE else "http"}},
    }


def render(cfg: PipelineConfig, pins: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    return [controller_configmap(cfg, pins)]
