"""The registry as the rollout sees it: move `champion` to a version, and tag the version with the outcome."""

from __future__ import annotations

from typing import Protocol

from paddle_mlops_core.config.models import PipelineConfig
from paddle_mlops_core.contracts import CHAMPION
from steps.runtime import config_names
from steps.runtime.release.rollout_outcome import Outcome
from steps.runtime.runner import StepError

# The serving image digest a promoted version is served with: what a model rollout without a digest of its own
# (a model published from outside train-deploy) keeps serving on.
SERVED_IMAGE = "serving.image_digest"


class Registry(Protocol):
    def promote(self, version: str) -> str | None: ...
    def tag(self, version: str, key: str, value: str) -> None: ...
    def champion(self) -> tuple[str, str] | None: ...
    def served_image_digest(self) -> str | None: ...


class MlflowRegistry:
    """`champion` alias and version tags in the MLflow model registry."""

    def __init__(self, cfg: PipelineConfig):
        from steps.runtime.release import registry  # mlflow: loaded only when the MLflow registry is used

        self._registry = registry
        self._name = config_names.registered_model(cfg)
        self._client = registry.connect(cfg)

    def promote(self, version: str) -> str | None:
        return self._registry.promote(self._name, version, self._client)

    def tag(self, version: str, key: str, value: str) -> None:
        self._client.set_model_version_tag(self._name, version, key, value)

    def champion(self) -> tuple[str, str] | None:
        """(version, published model URI) of `champion`: the `storage_uri` tag register sets, else its source."""
        version = self._registry.get_alias_version(self._name, CHAMPION, self._client)
        if version is None:
            return None
        found = self._client.get_model_version(self._name, version)
        uri = found.tags.get("storage_uri")
        if not uri:
            # The server loads only a published version (s3:// or the local store), never runs:/ or models:/.
            raise StepError(
                f"champion version {version} of {self._name} has no storage_uri tag (it was not registered by the "
                "register step from a published model): roll a published version out instead"
            )
        return version, str(uri)

    def served_image_digest(self) -> str | None:
        """The serving image digest `champion` was last promoted on, None when nothing was served by digest."""
        version = self._registry.get_alias_version(self._name, CHAMPION, self._client)
        if version is None:
            return None
        return self._client.get_model_version(self._name, version).tags.get(SERVED_IMAGE) or None


def record(registry: Registry, version: str, outcome: Outcome, image_digest: str | None = None) -> None:
    """Tag the version with the outcome: `rollout.*` for a model rollout, `image_rollout.*` (with the digest)
    when only the serving image changed, so a rolled-back image never reads as a rolled-back model."""
    prefix = "image_rollout" if image_digest else "rollout"
    registry.tag(version, f"{prefix}.outcome", outcome.outcome)
    if image_digest:
        registry.tag(version, f"{prefix}.image_digest", image_digest)
    if outcome.reason:
        registry.tag(version, f"{prefix}.reason", outcome.reason[:4000])
    if outcome.regions:
        registry.tag(version, f"{prefix}.regions", ",".join(outcome.regions))
    if outcome.canary:
        registry.tag(version, f"{prefix}.canary", outcome.canary)
