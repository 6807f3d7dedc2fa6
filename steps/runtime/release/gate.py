"""The promotion gate, one rule for train-deploy's evaluate and the rollout's validate: the configured metric
reaches `gate.threshold`, beats the cheap baseline fitted on the same split by `gate.baseline_margin` (under
`gate.baseline: require`; `warn` only reports it), AND is no worse than the current champion (MLflow alias
`champion`) by more than `gate.tolerance`.

The threshold and the baseline comparison are MLflow's own model validation (`mlflow.validate_evaluation_results`
with `MetricThreshold(threshold=…)` and `MetricThreshold(min_absolute_change=…)`, mlflow/models/evaluation/
validation.py of mlflow 3.17); the champion's tolerance lets a model be *worse* than the champion, which
MetricThreshold cannot say (its changes must be positive), so that comparison stays ours.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import CHAMPION
from steps.runtime import config_names

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
    baseline_mode: str = "off"
    baseline_kind: str | None = None
    baseline_value: float | None = None
    baseline_margin: float = 0.0
    baseline_passed: bool | None = None  # None: not compared (off, or no baseline)


@dataclass(frozen=True)
class BaselineRule:
    """How the gate uses the baseline: `gate.baseline` (require | warn | off), its figure and the margin."""

    mode: str
    kind: str
    value: float
    margin: float = 0.0


def mlflow_passes(metric: str, value: float, threshold: Any, baseline: float | None = None) -> bool:
    """Whether `value` passes MLflow's validation against `threshold` (a MetricThreshold), the baseline's value of
    the same metric given as the baseline model's result."""
    from mlflow import validate_evaluation_results
    from mlflow.models import EvaluationResult
    from mlflow.models.evaluation.validation import ModelValidationFailedException

    candidate = EvaluationResult(metrics={metric: value}, artifacts={})
    reference = EvaluationResult(metrics={metric: baseline}, artifacts={}) if baseline is not None else None
    try:
        validate_evaluation_results({metric: threshold}, candidate, reference)
    except ModelValidationFailedException as exc:
        log.info("MLflow validation: %s", exc.message)
        return False
    return True


def beats_threshold(metric: str, value: float, threshold: float) -> bool:
    from mlflow.models import MetricThreshold

    return mlflow_passes(metric, value, MetricThreshold(threshold=float(threshold), greater_is_better=True))


def beats_baseline(metric: str, value: float, rule: BaselineRule) -> bool:
    """value >= baseline + margin: MLflow's min_absolute_change, which must be positive; a zero margin is its
    min_relative_change of 0 (value >= baseline, and > baseline when the baseline is 0)."""
    from mlflow.models import MetricThreshold

    if rule.margin > 0:
        threshold = MetricThreshold(min_absolute_change=float(rule.margin), greater_is_better=True)
    else:
        threshold = MetricThreshold(min_relative_change=0.0, greater_is_better=True)
    return mlflow_passes(metric, value, threshold, rule.value)


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
    value: float,
    metric: str,
    threshold: float,
    tolerance: float,
    champ: tuple[str, float] | None,
    baseline: BaselineRule | None = None,
) -> GateDecision:
    """Pass iff value >= threshold, value >= baseline + margin (when the baseline is required) and
    value >= champion - tolerance."""
    ok_threshold = beats_threshold(metric, value, threshold)
    rel = "≥" if ok_threshold else "<"
    reason = f"{metric} {value:.4f} {rel} threshold {threshold:.4f}"
    ok_baseline, baseline_passed = True, None
    if baseline is not None and baseline.mode != "off":
        baseline_passed = beats_baseline(metric, value, baseline)
        ok_baseline = baseline_passed or baseline.mode == "warn"
        rel = "≥" if baseline_passed else "<"
        margin = f" + margin {baseline.margin:.4f}" if baseline.margin else ""
        note = " (warn only)" if baseline.mode == "warn" and not baseline_passed else ""
        if note:
            log.warning("%s %.4f does not beat the baseline %s %.4f%s; gate.baseline is warn, so it may still pass",
                        metric, value, baseline.kind, baseline.value, margin)  # fmt: skip
        reason += f", {rel} baseline {baseline.kind} {baseline.value:.4f}{margin}{note}"
    ok_champion = True
    if champ is not None:
        version, champ_value = champ
        ok_champion = value >= champ_value - tolerance
        rel = "≥" if ok_champion else "<"
        reason += f" and {rel} champion v{version} {champ_value:.4f} − {tolerance:.4f}"
    else:
        reason += " (no champion to compare with)"
    return GateDecision(
        passed=ok_threshold and ok_baseline and ok_champion,
        reason=reason,
        metric=metric,
        value=value,
        threshold=threshold,
        tolerance=tolerance,
        champion_version=champ[0] if champ else None,
        champion_value=champ[1] if champ else None,
        baseline_mode=baseline.mode if baseline else "off",
        baseline_kind=baseline.kind if baseline else None,
        baseline_value=baseline.value if baseline else None,
        baseline_margin=baseline.margin if baseline else 0.0,
        baseline_passed=baseline_passed,
    )


def judge(cfg: PipelineConfig, metrics: dict[str, Any], client: Any) -> GateDecision:
    """The gate of this configuration for a test report: threshold, the baseline in `metrics["baseline"]` (fitted
    on the same splits) and the registered model's champion. evaluate and validate both decide with it."""
    metric = config_names.gate_metric(cfg)
    champ = champion(client, config_names.registered_model(cfg), metric)
    figures = metrics.get("baseline")
    rule = None
    if figures and cfg.gate.baseline != "off":
        rule = BaselineRule(
            cfg.gate.baseline, str(figures["kind"]), float(figures["baseline"]), cfg.gate.baseline_margin
        )
    return decide(float(metrics[metric]), metric, cfg.gate.threshold, cfg.gate.tolerance, champ, rule)
