"""Argo templates of a release: validate a published model, register it with the verdict, roll it out.

The `rollout` WorkflowTemplate chains the three (pipelines/rollout_template.py); `image-rollout` runs the
rollout container alone for the serving champion (pipelines/image_rollout.py).
"""

from __future__ import annotations

from hera.workflows import Container

from paddle_mlops_core.config import PipelineConfig
from pipelines import k8s
from pipelines.service_accounts import ROLLOUT_SERVICE_ACCOUNT
from pipelines.step_container import step_container

# What validate hands on (steps/validate.py STEP.outputs).
VALIDATE_OUTPUTS = (
    "verdict",
    "reason",
    "model-uri",
    "manifest-digest",
    "metrics",
    "run-id",
    "image-digest",
    "git-sha",
    "registered-version",
)


def validate(cfg: PipelineConfig) -> Container:
    """Manifest, checksums, load and smoke, test-set gate; a verdict before any traffic moves."""
    return step_container(
        cfg,
        "validate",
        "validate",
        args=[
            "--model-uri",
            "{{inputs.parameters.model-uri}}",
            "--event-bucket",
            "{{inputs.parameters.event-bucket}}",
            "--event-key",
            "{{inputs.parameters.event-key}}",
            "--event-etag",
            "{{inputs.parameters.event-etag}}",
            "--image-digest",
            "{{inputs.parameters.image-digest}}",
            "--redeploy",
            "{{inputs.parameters.redeploy}}",
        ],  # fmt: skip
        inputs=["model-uri", "event-bucket", "event-key", "event-etag", "image-digest", "redeploy"],
        outputs=list(VALIDATE_OUTPUTS),
        resources=k8s.TOOLS_RESOURCES,
    )


def register(cfg: PipelineConfig) -> Container:
    return step_container(
        cfg,
        "register",
        "register",
        args=[
            "--model-uri",
            "{{inputs.parameters.model-uri}}",
            "--manifest-digest",
            "{{inputs.parameters.manifest-digest}}",
            "--run-id",
            "{{inputs.parameters.mlflow-run-id}}",
            "--verdict",
            "{{inputs.parameters.verdict}}",
            "--reason",
            "{{inputs.parameters.reason}}",
            "--metrics",
            "{{inputs.parameters.metrics}}",
        ],  # fmt: skip
        inputs=["model-uri", "manifest-digest", "mlflow-run-id", "verdict", "reason", "metrics"],
        outputs=["model-version"],
    )


def rollout(cfg: PipelineConfig) -> Container:
    """Canary, check, promote or roll back one registered model version on the serving image `image-digest`."""
    return _rollout_container(
        cfg,
        "rollout",
        args=[
            "--model-uri",
            "{{inputs.parameters.model-uri}}",
            "--model-version",
            "{{inputs.parameters.model-version}}",
            "--region",
            "{{inputs.parameters.region}}",
            "--image-digest",
            "{{inputs.parameters.image-digest}}",
        ],  # fmt: skip
        inputs=["model-uri", "model-version", "region", "image-digest"],
    )


def serve_champion(cfg: PipelineConfig) -> Container:
    """serving.target=local: keep the champion served when nothing was rolled out (started again if it was stopped)."""
    return _rollout_container(cfg, "serve-champion", args=["--champion", "--ensure-served"], inputs=[])


def image_rollout(cfg: PipelineConfig) -> Container:
    """The serving champion on a new serving image: the same region-staged canary, the model unchanged."""
    return _rollout_container(
        cfg,
        "image-rollout",
        args=[
            "--champion",
            "--image-digest",
            "{{inputs.parameters.image-digest}}",
            "--regions",
            "{{inputs.parameters.regions}}",
        ],  # fmt: skip
        inputs=["image-digest", "regions"],
    )


def _rollout_container(cfg: PipelineConfig, name: str, args: list[str], inputs: list[str]) -> Container:
    return step_container(
        cfg,
        name,
        "rollout",
        args=args,
        inputs=inputs,
        outputs=["serving-url", "outcome"],
        # Only the rollout step may touch InferenceServices (argo/rbac.yaml).
        service_account_name=ROLLOUT_SERVICE_ACCOUNT,
        # The canary window is part of the step; give it room on top of the ordinary deadline.
        active_deadline_seconds=cfg.cluster.step_deadline_seconds + cfg.serving.canary_window_seconds,
    )
