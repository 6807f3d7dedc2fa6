"""Paired statistics of two models answering the same test examples: McNemar's exact test of their errors
(accuracy) and a paired bootstrap of a metric's difference (any metric that is a function of per-example counts:
accuracy, F1, precision, recall), with its percentile confidence interval."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Summed per-example counts ([..., columns]) -> the metric ([...]).
MetricOfCounts = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class McNemar:
    model_only: int  # examples the model gets right and the baseline wrong
    baseline_only: int  # the other way round
    p_value: float  # exact two-sided binomial test of model_only against model_only + baseline_only at 1/2


def mcnemar(model_correct: np.ndarray, baseline_correct: np.ndarray) -> McNemar:
    """McNemar's exact test: under "both err alike", each discordant example is a fair coin (SciPy's binomtest)."""
    from scipy.stats import binomtest

    model_correct, baseline_correct = np.asarray(model_correct, bool), np.asarray(baseline_correct, bool)
    b = int(np.sum(model_correct & ~baseline_correct))
    c = int(np.sum(~model_correct & baseline_correct))
    p = 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    return McNemar(b, c, p)


@dataclass(frozen=True)
class Bootstrap:
    difference: float  # metric(model) - metric(baseline) on the test split itself
    low: float
    high: float
    confidence: float
    p_value: float  # two-sided: twice the smaller share of resampled differences on either side of 0
    samples: int


def bootstrap_difference(
    model_counts: np.ndarray,
    baseline_counts: np.ndarray,
    metric: MetricOfCounts,
    samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Bootstrap:
    """Resample the test examples with replacement (the same indices for both models: paired), recompute both
    metrics from the resampled counts and take the percentile interval of their difference."""
    model_counts, baseline_counts = np.asarray(model_counts, float), np.asarray(baseline_counts, float)
    if model_counts.shape != baseline_counts.shape:
        raise ValueError(f"paired counts differ in shape: {model_counts.shape} vs {baseline_counts.shape}")
    n = len(model_counts)
    observed = float(metric(model_counts.sum(axis=0)) - metric(baseline_counts.sum(axis=0)))
    rng = np.random.default_rng(seed)
    differences = np.empty(samples)
    chunk = max(1, 2_000_000 // max(n, 1))  # bounded memory: [chunk, n] weights at a time
    for start in range(0, samples, chunk):
        size = min(chunk, samples - start)
        weights = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(size)]).astype(float)
        differences[start : start + size] = metric(weights @ model_counts) - metric(weights @ baseline_counts)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(differences, [alpha, 1 - alpha])
    p = min(1.0, 2 * min(float(np.mean(differences <= 0)), float(np.mean(differences >= 0))))
    return Bootstrap(observed, float(low), float(high), confidence, p, samples)
