"""The registry as the rollout sees it: move `champion` to a version, and tag the version with the outcome."""

from __future__ import annotations

from typing import Protocol

from paddle_mlops.config.models import PipelineConfig
from paddle_mlops.contracts import CHAMPION
from steps.runtime.rollout_outcome import Outcome


class Registry(Protocol):
    def promote(self, version: str) -> str | None: ...
    def tag(self, version: str, key: str, value: str) -> None: ...
    def champion(self) -> tuple[str, str] | None: ...


class MlflowRegistry:
    """`champion` alias and version tags in the MLflow model registry."""

    def __init__(self, cfg: PipelineConfig):
        from steps.runtime import registry

        self._registry = registry
        self._name = cfg.mlflow.registered_model
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
        return version, str(found.tags.get("storage_uri") or found.source)


def record(registry: Registry, version: str, outcome: Outcome) -> None:
    registry.tag(version, "rollout.outcome", outcome.outcome)
    if outcome.reason:
        registry.tag(version, "rollout.reason", outcome.reason[:4000])
    if outcome.regions:
        registry.tag(version, "rollout.regions", ",".join(outcome.regions))
