"""The promotion gate, one rule for train-deploy's evaluate and the rollout's validate: the configured metric
reaches `gate.threshold` AND is no worse than the current champion (MLflow alias `champion`) by more than
`gate.tolerance`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from paddle_mlops.contracts import CHAMPION

log = logging.getLogger("steps.gate")


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reason: str
    metric: str
    value: float
    threshold: float
    tolerance: float
    champion_version: str | None = None
    champion_value: float | None = None


def champion(client: Any, registered_model: str, metric: str) -> tuple[str, float] | None:
    """(version, test metric) of the model version aliased `champion`, or None when there is none."""
    from mlflow.exceptions import MlflowException

    try:
        version = client.get_model_version_by_alias(registered_model, CHAMPION)
    except MlflowException:
        return None  # no registered model yet, or no champion alias: the first model has nothing to beat
    key = f"test_{metric}"
    if key in (version.tags or {}):
        return str(version.version), float(version.tags[key])
    if version.run_id:
        value = client.get_run(version.run_id).data.metrics.get(key)
        if value is not None:
            return str(version.version), float(value)
    log.warning("champion v%s has no %s (tag or run metric); comparing with the threshold only", version.version, key)
    return None


def decide(
    value: float, metric: str, threshold: float, tolerance: float, champ: tuple[str, float] | None
) -> GateDecision:
    """Pass iff value >= threshold and value >= champion - tolerance."""
    ok_threshold = value >= threshold
    rel = "≥" if ok_threshold else "<"
    reason = f"{metric} {value:.4f} {rel} threshold {threshold:.4f}"
    ok_champion = True
    if champ is not None:
        version, champ_value = champ
        ok_champion = value >= champ_value - tolerance
        rel = "≥" if ok_champion else "<"
        reason += f" and {rel} champion v{version} {champ_value:.4f} − {tolerance:.4f}"
    else:
        reason += " (no champion to compare with)"
    return GateDecision(
        passed=ok_threshold and ok_champion,
        reason=reason,
        metric=metric,
        value=value,
        threshold=threshold,
        tolerance=tolerance,
        champion_version=champ[0] if champ else None,
        champion_value=champ[1] if champ else None,
    )
