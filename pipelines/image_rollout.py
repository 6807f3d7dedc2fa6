"""WorkflowTemplate `image-rollout`: the serving champion on a new serving image, one region first.

A new Paddle release or a security fix changes the serving image, not the model. This template rolls the
model version `champion` points at out again on the image `image-digest` through the same region-staged
canary as a new model (`steps.rollout --champion`): the first region at `serving.canary_percent`, health,
error-rate and latency checks over the canary window, then the other regions; a failure rolls every changed
region back to its previous image and leaves `champion` where it was.
"""

from __future__ import annotations

from hera.workflows import Parameter, WorkflowTemplate

from paddle_mlops_core.config import PipelineConfig
from pipelines import release_templates, rollout_template, templates, workflow_spec

NAME = "image-rollout"


def parameters(cfg: PipelineConfig) -> list[Parameter]:
    return [
        Parameter(name="image-digest", description="serving image digest (sha256:…) to roll out"),
        Parameter(
            name="regions",
            value=",".join(cfg.serving.regions) or cfg.cluster.region,
            description="comma-separated regions in rollout order (the first gets the canary first)",
        ),
        Parameter(name="git-sha", value="unknown", description="recorded with the rollout only"),
        *workflow_spec.run_parameters(cfg),
    ]


def build(cfg: PipelineConfig) -> WorkflowTemplate:
    """The `image-rollout` WorkflowTemplate for this configuration (no side effects)."""
    passed = ("image-digest", "regions", "git-sha")
    wt = templates.one_step_workflow(cfg, NAME, parameters(cfg), release_templates.image_rollout, passed)
    wt.synchronization = rollout_template.mutex(cfg)  # one rollout at a time changes the InferenceServices
    return wt
