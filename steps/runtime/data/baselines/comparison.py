"""The figures evaluate and validate report for a model beside its baseline on the same test split: both values of
the gate metric, their difference with its confidence interval (paired bootstrap) and a paired test (McNemar's
exact test for accuracy, the bootstrap's for any other metric), plus the baseline's own scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TOKEN_CLASSIFICATION
from steps.runtime.data import tasks
from steps.runtime.data.baselines import counts, statistics
from steps.runtime.data.baselines.fitted import Fitted
from steps.runtime.data.tasks.ner import entity_types


def per_example(task_type: str, metric: str, rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]],
                labels: dict[int, str]) -> tuple[np.ndarray, statistics.MetricOfCounts]:  # fmt: skip
    """Per-example counts of `answers` and the function of their sum that gives `metric`."""
    if task_type == TOKEN_CLASSIFICATION:
        types = entity_types(labels)
        return counts.entity_counts(rows, answers, types), counts.entity_metric(metric, len(types))
    return counts.label_counts(rows, answers, labels), counts.label_metric(metric, len(labels))


def compare(
    cfg: PipelineConfig,
    rows: Sequence[dict[str, Any]],
    model_answers: Sequence[dict[str, Any]],
    fitted: Fitted,
    labels: dict[int, str],
) -> dict[str, Any]:
    """What metrics.json's `baseline` holds: the baseline, its scores, and the paired comparison on `gate.metric`."""
    task_type, metric = cfg.model.task, str(cfg.gate.metric)
    scores = tasks.for_type(task_type).scores(rows, fitted.answers, labels)
    model_counts, of = per_example(task_type, metric, rows, model_answers, labels)
    baseline_counts, _ = per_example(task_type, metric, rows, fitted.answers, labels)
    b = cfg.baseline
    boot = statistics.bootstrap_difference(model_counts, baseline_counts, of, b.bootstrap_samples, b.confidence, b.seed)
    model_value, baseline_value = float(of(model_counts.sum(0))), float(of(baseline_counts.sum(0)))
    test: dict[str, Any] = {"name": "paired bootstrap", "p_value": boot.p_value}
    if metric == "accuracy":
        exact = statistics.mcnemar(_correct(model_counts, len(labels)), _correct(baseline_counts, len(labels)))
        test = {"name": "McNemar exact", "p_value": exact.p_value, "model_only_correct": exact.model_only,
                "baseline_only_correct": exact.baseline_only}  # fmt: skip
    figures = {
        "kind": fitted.kind,
        "description": fitted.description,
        "settings": fitted.settings,
        "seconds": fitted.seconds,
        "cached": fitted.cached,
        "key": fitted.key,
        "versions": fitted.versions,
        "metrics": {name: float(scores[name]) for name in tasks.for_type(task_type).spec.metrics},
        "metric": metric,
        "model": model_value,
        "baseline": baseline_value,
        "difference": model_value - baseline_value,
        "ci_low": boot.low,
        "ci_high": boot.high,
        "confidence": boot.confidence,
        "bootstrap_samples": boot.samples,
        "test": test,
    }
    return figures | {"line": summary_line(figures)}


def _correct(label_counts: np.ndarray, classes: int) -> np.ndarray:
    """Whether each example was answered correctly (its one-hot `correct` columns sum to 1)."""
    return label_counts[:, :classes].sum(axis=1) > 0


def summary_line(figures: dict[str, Any]) -> str:
    """`accuracy 0.8120 vs baseline tfidf-logreg 0.8560: −0.0440 (95 % CI −0.0650 … −0.0230, McNemar p 0.0001)`."""
    pct = round(figures["confidence"] * 100)
    test = figures["test"]
    name = "McNemar" if test["name"].startswith("McNemar") else "bootstrap"
    return (
        f"{figures['metric']} {figures['model']:.4f} vs baseline {figures['kind']} {figures['baseline']:.4f}: "
        f"{figures['difference']:+.4f} ({pct} % CI {figures['ci_low']:+.4f} … {figures['ci_high']:+.4f}, "
        f"{name} p {_p(test['p_value'])})"
    )


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else "< 0.0001"
