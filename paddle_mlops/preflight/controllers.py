"""How preflight finds each component's controller among the cluster's Deployments: by its image
repository (on any registry), and from it the version it runs, the namespace it runs in and, for the
workflow controller, the ConfigMap it reads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipelines.platform import argo_controller


@dataclass(frozen=True)
class Controller:
    """How a component's controller Deployment is recognised: its image repository (any registry)."""

    component: str
    image: str
    first_arg: str | None = None  # argo-events' image also runs every EventSource and Sensor
    version_label: bool = False  # digest-pinned releases carry the version in this label only


CONTROLLERS = {
    c.component: c
    for c in (
        # argo-workflows manifests/base/workflow-controller/workflow-controller-deployment.yaml
        Controller("argo-workflows", "argoproj/workflow-controller"),
        # argo-events manifests/install.yaml: Deployment controller-manager, args [controller]
        Controller("argo-events", "argoproj/argo-events", first_arg="controller"),
        # kserve config/manager/manager.yaml, charts/_common/kserve-resources-specific.yaml
        Controller("kserve", "kserve/kserve-controller"),
        # kyverno charts/kyverno/values.yaml admissionController image (its version label is the chart's)
        Controller("kyverno", "kyverno/kyverno"),
        Controller("prometheus-operator", "prometheus-operator/prometheus-operator"),
        # trainer v2.3.0 manifests/base/manager (namespace kubeflow-system)
        Controller("kubeflow-trainer", "kubeflow/trainer/trainer-controller-manager"),
        # jobset and kueue releases: registry.k8s.io/jobset/jobset, registry.k8s.io/kueue/kueue (Makefile IMAGE_REPO)
        Controller("jobset", "jobset/jobset"),
        Controller("kueue", "kueue/kueue"),
        # training-operator manifests/overlays/standalone: tag v1-<commit>, not a release number
        Controller("training-operator", "kubeflow/training-operator"),
        Controller("paddle-operator", "paddlecloud/controller"),
        # knative serving config/core/deployments/controller.yaml; releases pin by digest
        Controller("knative-serving", "knative.dev/serving/cmd/controller", version_label=True),
    )
}


def image_version(image: str) -> tuple[str, str | None]:
    """(repository, release version from the tag or None) for `registry/repo:tag@sha256:…`."""
    name = image.split("@", 1)[0]
    repo, tag = name, None
    if ":" in name.rsplit("/", 1)[-1]:
        repo, tag = name.rsplit(":", 1)
    if tag and re.fullmatch(r"v?\d+\.\d+(\.\d+)?([-+][\w.-]*)?", tag):
        return repo, tag
    return repo, None


def runs(controller: Controller, container: Any) -> bool:
    """Is `container` this component's controller (image repository on any registry, first argument)?"""
    repo, _ = image_version(container.image or "")
    if repo != controller.image and not repo.endswith("/" + controller.image):
        return False
    return not controller.first_arg or (container.args or [None])[0] == controller.first_arg


def controller_of(controller: Controller, deployment: Any) -> tuple[str, str | None] | None:
    """(image, version) when `deployment` runs `controller`, else None."""
    for container in deployment.spec.template.spec.containers or []:
        if not runs(controller, container):
            continue
        _, version = image_version(container.image)
        if version is None and controller.version_label:
            version = (deployment.metadata.labels or {}).get("app.kubernetes.io/version")
            version = version if version and re.match(r"^v?\d+\.\d+", version) else None
        return container.image, version
    return None


def controller_namespace(deployments: list[Any], component: str) -> str | None:
    """Where the component's controller runs (its config lives beside it), if it runs."""
    return next((d.metadata.namespace for d in deployments if controller_of(CONTROLLERS[component], d)), None)


def controller_configmap(deployments: list[Any]) -> tuple[str, str]:
    """(name, namespace) of the ConfigMap the live workflow-controller reads: its `--configmap` flag
    (argo-workflows cmd/workflow-controller/main.go; Helm sets `<release>-workflow-controller-configmap`)
    in its own namespace; the upstream install's names when no controller is found."""
    name, namespace = argo_controller.CONTROLLER_CONFIGMAP, argo_controller.CONTROLLER_NAMESPACE
    for deployment in deployments:
        for container in deployment.spec.template.spec.containers or []:
            if not runs(CONTROLLERS["argo-workflows"], container):
                continue
            words = [*(container.command or []), *(container.args or [])]
            for i, word in enumerate(words):
                if word == "--configmap" and i + 1 < len(words):
                    return words[i + 1], deployment.metadata.namespace
                if word.startswith("--configmap="):
                    return word.split("=", 1)[1], deployment.metadata.namespace
            return name, deployment.metadata.namespace
    return name, namespace
