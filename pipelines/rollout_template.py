"""WorkflowTemplate `rollout`: promote an already registered model version on its own.

For re-deploying a known-good version (or another region) without rebuilding or retraining; the
step is the same `rollout` container the train-deploy DAG ends with.
"""

from __future__ import annotations

from hera.workflows import Parameter, WorkflowTemplate

from paddle_mlops.config import PipelineConfig
from pipelines import templates

NAME = "rollout"


def parameters(cfg: PipelineConfig) -> list[Parameter]:
    return [
        Parameter(name="model-version", description="MLflow registered model version to serve"),
        Parameter(name="model-uri", description="published model prefix (upload step's model-uri)"),
        Parameter(name="region", value=cfg.cluster.region),
        Parameter(
            name="image-digest",
            description="serving image digest (sha256:…, build-image's serve-image-digest); the image is pinned by it",
        ),
        Parameter(name="git-sha", value="unknown", description="recorded with the rollout only"),
        *templates.run_parameters(cfg),
    ]


def build(cfg: PipelineConfig) -> WorkflowTemplate:
    """The `rollout` WorkflowTemplate for this configuration (no side effects)."""
    passed = ("model-uri", "model-version", "region", "git-sha", "image-digest")
    return templates.one_step_workflow(cfg, NAME, parameters(cfg), templates.rollout, passed)
