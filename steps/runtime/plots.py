"""Training and evaluation plots as PNG files, for MLflow artifacts and `paddle-mlops report`.

Figures are built with `matplotlib.figure.Figure` on the Agg canvas, never through pyplot: no GUI
backend is touched, no global figure state leaks between calls, and it works in headless pods.
Sizes are fixed so reports line up: curves and per-class bars are 800x500 px, the confusion matrix
600x600 px (all at 100 dpi; `bbox_inches` stays unset because "tight" would change the size).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100
CURVES_SIZE = (800, 500)
CONFUSION_SIZE = (600, 600)
PER_CLASS_SIZE = (800, 500)

# Artifact names under `PLOTS_DIR` in an MLflow run; the report looks for exactly these.
PLOTS_DIR = "plots"
CURVES_PNG = "curves.png"
CONFUSION_PNG = "confusion_matrix.png"
PER_CLASS_PNG = "per_class.png"


def _figure(size: tuple[int, int]) -> Figure:
    fig = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=DPI, format="png")
    return target


def plot_curves(history: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Train loss (left) and the dev metrics (right: every `dev_*` key, e.g. accuracy and macro-F1, or entity
    F1, precision and recall) per epoch.

    `history` holds one dict per epoch with any of `train_loss` and `dev_<metric>` keys, and optionally
    `epoch` (1-based; the position is used when it is missing).
    """
    if not history:
        raise ValueError("no epochs to plot: the history is empty")
    epochs = [int(r.get("epoch", i + 1)) for i, r in enumerate(history)]

    def series(key: str) -> list[float]:
        return [float(r[key]) if r.get(key) is not None else np.nan for r in history]

    fig = _figure(CURVES_SIZE)
    loss_ax, score_ax = fig.subplots(1, 2)
    loss_ax.plot(epochs, series("train_loss"), marker="o", color="tab:red", label="train loss")
    loss_ax.set(title="Training loss", xlabel="epoch", ylabel="loss")
    dev_keys = list(dict.fromkeys(k for r in history for k in r if k.startswith("dev_")))
    for key, marker in zip(dev_keys, "osd^v<>", strict=False):
        score_ax.plot(epochs, series(key), marker=marker, label=key.replace("_", " ", 1).replace("_", "-"))
    score_ax.set(title="Dev metrics", xlabel="epoch", ylabel="score", ylim=(0, 1.02))
    for ax in (loss_ax, score_ax):
        ax.set_xticks(epochs)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    return _save(fig, path)


def plot_confusion_matrix(matrix: Sequence[Sequence[float]], labels: Sequence[str], path: str | Path) -> Path:
    """Counts of true (rows) against predicted (columns) labels, each cell annotated."""
    data = np.asarray(matrix, dtype=float)
    if data.ndim != 2 or data.shape[0] != data.shape[1] or data.shape[0] != len(labels):
        raise ValueError(f"confusion matrix of shape {data.shape} does not match {len(labels)} labels")
    fig = _figure(CONFUSION_SIZE)
    ax = fig.subplots()
    image = ax.imshow(data, cmap="Blues", vmin=0)
    fig.colorbar(image, ax=ax, shrink=0.8)
    ticks = range(len(labels))
    ax.set_xticks(ticks, labels=list(labels), rotation=45, ha="right")
    ax.set_yticks(ticks, labels=list(labels))
    ax.set(title="Confusion matrix", xlabel="predicted", ylabel="true")
    threshold = data.max() / 2 if data.size else 0
    for (row, col), value in np.ndenumerate(data):
        ax.text(col, row, f"{value:g}", ha="center", va="center", color="white" if value > threshold else "black")
    return _save(fig, path)


def plot_per_class(per_class: Mapping[str, Mapping[str, float]], path: str | Path) -> Path:
    """Precision, recall and F1 per class as grouped bars.

    Accepts sklearn's `classification_report(output_dict=True)` rows (`f1-score`) or `f1`;
    aggregate rows (`accuracy`, `macro avg`, `weighted avg`) are skipped.
    """
    rows = {
        name: stats
        for name, stats in per_class.items()
        if isinstance(stats, Mapping) and name not in ("macro avg", "weighted avg", "micro avg")
    }
    if not rows:
        raise ValueError("no per-class metrics to plot")
    names = list(rows)
    keys = (("precision", "precision"), ("recall", "recall"), ("f1", "F1"))
    x = np.arange(len(names))
    width = 0.8 / len(keys)
    fig = _figure(PER_CLASS_SIZE)
    ax = fig.subplots()
    for i, (key, title) in enumerate(keys):
        values = [float(rows[n].get(key, rows[n].get(f"{key}-score", np.nan))) for n in names]
        ax.bar(x + (i - 1) * width, values, width, label=title)
    ax.set_xticks(x, labels=names)
    ax.set(title="Per-class metrics", ylabel="score", ylim=(0, 1.05))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower right")
    return _save(fig, path)
