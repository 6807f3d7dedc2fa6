"""Knative Serving (knative-v1.21.0) lets a Revision's pod spec through its field mask only for the
fields whose feature flags are enabled: pkg/apis/serving/fieldmask.go `PodSpecMask` (nodeSelector and
tolerations copied only when `cfg.Features.PodSpecNodeSelector/PodSpecTolerations != Disabled`), with
the flag defaults of pkg/apis/config/features.go and config/core/configmaps/features.yaml (disabled)."""

from __future__ import annotations

from typing import Any

import pytest

from paddle_mlops.compile import default_compile_config
from paddle_mlops_core.config import load_regions
from pipelines.platform import knative
from steps.runtime.release import inference_service as isvc

# features.go defaults for the flags that gate pod-spec fields our predictors could set.
UPSTREAM_DEFAULTS = {"kubernetes.podspec-nodeselector": "disabled", "kubernetes.podspec-tolerations": "disabled"}


def refused_fields(predictor: dict[str, Any], flags: dict[str, str]) -> set[str]:
    """Gated fields the predictor sets that the flags leave disabled (what the webhook refuses)."""
    effective = {**UPSTREAM_DEFAULTS, **flags}
    return {
        field for field, flag in knative.FIELD_FLAGS.items() if predictor.get(field) and effective[flag] == "disabled"
    }


@pytest.fixture(scope="module")
def predictors() -> list[dict[str, Any]]:
    cfg = default_compile_config()
    return [
        isvc.build_inference_service(
            cfg, region, "s3://models/m/v1", "registry.example.com/serve@sha256:" + "0" * 64, "1"
        )["spec"]["predictor"]
        for region in load_regions().values()
    ]


def test_regional_predictors_need_the_gated_fields(predictors: list[dict[str, Any]]) -> None:
    """Without the shipped flags (upstream defaults) Knative refuses every regional predictor."""
    assert all(refused_fields(p, {}) == {"nodeSelector", "tolerations"} for p in predictors)


def test_shipped_config_features_lets_every_predictor_through(predictors: list[dict[str, Any]]) -> None:
    (doc,) = knative.render(default_compile_config())
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("knative-serving", "config-features")
    assert all(refused_fields(p, doc["data"]) == set() for p in predictors)
