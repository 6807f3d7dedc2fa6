"""The Knative Serving feature flags the Serverless predictors need.

Knative strips or rejects pod-spec fields its feature flags leave `disabled` (knative/serving
knative-v1.21.0 pkg/apis/serving/fieldmask.go `PodSpecMask`, defaults in pkg/apis/config/features.go
and config/core/configmaps/features.yaml). A regional predictor needs `nodeSelector` (region, GPU
type) and `tolerations` (GPU taints), so without these two flags Knative refuses the revision and the
InferenceService never becomes Ready. RawDeployment does not go through Knative and needs none.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.config import PipelineConfig
from pipelines.platform.meta import metadata

# Knative Serving's own ConfigMap (config/core/configmaps/features.yaml); `kubectl apply` adds these
# keys to it and leaves the others as the install set them.
FEATURES_CONFIGMAP = "config-features"
FEATURES_NAMESPACE = "knative-serving"
# Pod-spec field of the predictor → the flag that lets it through (features.go constants).
FIELD_FLAGS: dict[str, str] = {
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "tolerations": "kubernetes.podspec-tolerations",
}


def feature_flags() -> dict[str, str]:
    """Flag → value for every gated pod-spec field the predictors use ("Cannot safely be disabled
    once enabled", upstream says: enabling is a one-way step for the cluster)."""
    return {flag: "enabled" for flag in FIELD_FLAGS.values()}


def config_features(cfg: PipelineConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            FEATURES_CONFIGMAP,
            FEATURES_NAMESPACE,
            annotations={
                "paddle-mlops/why": (
                    "the regional predictors of the Serverless InferenceServices set nodeSelector and "
                    "tolerations, which Knative refuses while these flags are disabled"
                )
            },
        ),
        "data": feature_flags(),
    }


def render(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Written for both deployment modes, so `kubectl apply -k argo/` needs no per-mode file list;
    a RawDeployment cluster without Knative leaves knative.yaml out (README "Cluster install")."""
    return [config_features(cfg)]
