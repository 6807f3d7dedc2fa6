"""What a preflight check reports: a Result per subject with its status, and the install command that
fixes a missing or outdated component (at the version `paddle_mlops_core/versions.py` tested)."""

from __future__ import annotations

from dataclasses import dataclass

from paddle_mlops_core.versions import MATRIX

OK, WARNING, FINDING = "ok", "warning", "finding"
INSTALL = {
    "argo-workflows": "kubectl create namespace argo; kubectl apply -n argo --server-side -f "
    "https://github.com/argoproj/argo-workflows/releases/download/v{v}/install.yaml",
    "argo-events": "kubectl create namespace argo-events; kubectl apply -f "
    "https://raw.githubusercontent.com/argoproj/argo-events/v{v}/manifests/install.yaml",
    "kserve": "helm install kserve-crd oci://ghcr.io/kserve/charts/kserve-crd --version v{v} && helm install "
    "kserve-resources oci://ghcr.io/kserve/charts/kserve-resources --version v{v} -n kserve --create-namespace",
    "kyverno": "kubectl create -f https://github.com/kyverno/kyverno/releases/download/v{v}/install.yaml",
    "prometheus-operator": "kubectl create -f "
    "https://github.com/prometheus-operator/prometheus-operator/releases/download/v{v}/bundle.yaml",
    "kubeflow-trainer": 'kubectl apply --server-side -k "https://github.com/kubeflow/trainer.git/'
    'manifests/overlays/manager?ref=v{v}" && kubectl apply --server-side -f argo/training-runtime.yaml',
    "jobset": "kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/v{v}/"
    "manifests.yaml",
    "kueue": "kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/releases/download/v{v}/"
    "manifests.yaml",
    "training-operator": 'kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/'
    'manifests/overlays/standalone?ref=v{v}"',
    "paddle-operator": "kubectl apply -f https://raw.githubusercontent.com/PaddleFlow/paddle-operator/v{v}/deploy/v1/"
    "crd.yaml -f https://raw.githubusercontent.com/PaddleFlow/paddle-operator/v{v}/deploy/v1/operator.yaml",
    "knative-serving": "kubectl apply -f https://github.com/knative/serving/releases/download/knative-v{v}/"
    "serving-crds.yaml -f https://github.com/knative/serving/releases/download/knative-v{v}/serving-core.yaml",
}


class PreflightUsageError(Exception):
    """Bad input before any check can run (kubeconfig, context, unreachable API); exit 2."""


@dataclass(frozen=True)
class Result:
    check: str
    subject: str
    status: str
    message: str
    fix: str = ""


def install_fix(component: str) -> str:
    return INSTALL[component].format(v=MATRIX[component].tested)
