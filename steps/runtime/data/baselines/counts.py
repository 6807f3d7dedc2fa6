"""Per-example counts of a task's metrics, so a metric of any resample of the test split is a sum and a ratio
(what the paired bootstrap needs). They reproduce the task's own scores exactly: `metric(counts.sum(0))` equals
`task.scores(...)[metric]` (tests/test_baselines.py checks it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from steps.runtime.data.baselines.statistics import MetricOfCounts


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    return np.divide(numerator, denominator, out=np.zeros_like(numerator, dtype=float), where=denominator > 0)


def _f1(tp: np.ndarray, predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """2·tp / (predicted + gold): the F1 of precision tp/predicted and recall tp/gold, 0 where both are 0."""
    return _ratio(2 * tp, predicted + gold)


def label_counts(
    rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]], labels: dict[int, str]
) -> np.ndarray:
    """[examples, 3 × classes]: one-hot correct, predicted and gold class of each example."""
    ids = sorted(labels)
    index = {labels[i]: k for k, i in enumerate(ids)}
    k = len(ids)
    out = np.zeros((len(rows), 3 * k))
    for n, (row, answer) in enumerate(zip(rows, answers, strict=True)):
        gold, predicted = ids.index(int(row["label"])), index[answer["label"]]
        out[n, k + predicted] = 1
        out[n, 2 * k + gold] = 1
        out[n, gold] += gold == predicted
    return out


def entity_counts(
    rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]], types: Sequence[str]
) -> np.ndarray:
    """[sentences, 3 × (types + 1)]: correct, predicted and gold entities per type, then of every type (the micro
    totals also count types outside `types`, as entity_scores does)."""
    k = len(types) + 1
    out = np.zeros((len(rows), 3 * k))
    for n, (row, answer) in enumerate(zip(rows, answers, strict=True)):
        gold = {(int(s), int(e), str(t)) for s, e, t in row["entities"]}
        predicted = {(int(e["start"]), int(e["end"]), str(e["type"])) for e in answer["entities"]}
        for offset, spans in ((0, gold & predicted), (k, predicted), (2 * k, gold)):
            for _, _, entity_type in spans:
                if entity_type in types:
                    out[n, offset + list(types).index(entity_type)] += 1
                out[n, offset + k - 1] += 1
    return out


def label_metric(name: str, classes: int) -> MetricOfCounts:
    """accuracy or macro_f1 (over every class) of summed label counts."""
    k = classes

    def metric(summed: np.ndarray) -> np.ndarray:
        tp, predicted, gold = summed[..., :k], summed[..., k : 2 * k], summed[..., 2 * k :]
        if name == "accuracy":
            return _ratio(tp.sum(axis=-1), gold.sum(axis=-1))
        return _f1(tp, predicted, gold).mean(axis=-1)

    _check(name, ("accuracy", "macro_f1"))
    return metric


def entity_metric(name: str, types: int) -> MetricOfCounts:
    """micro_f1, precision, recall or macro_f1 (over the types) of summed entity counts."""
    k = types + 1

    def metric(summed: np.ndarray) -> np.ndarray:
        tp, predicted, gold = summed[..., :k], summed[..., k : 2 * k], summed[..., 2 * k :]
        if name == "macro_f1":
            return _f1(tp[..., :-1], predicted[..., :-1], gold[..., :-1]).mean(axis=-1)
        if name == "precision":
            return _ratio(tp[..., -1], predicted[..., -1])
        if name == "recall":
            return _ratio(tp[..., -1], gold[..., -1])
        return _f1(tp[..., -1], predicted[..., -1], gold[..., -1])

    _check(name, ("micro_f1", "precision", "recall", "macro_f1"))
    return metric


def _check(name: str, known: tuple[str, ...]) -> None:
    if name not in known:
        raise ValueError(f"no per-example counts for metric {name!r}; known: {', '.join(known)}")
