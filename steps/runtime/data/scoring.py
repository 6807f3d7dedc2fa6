"""Classification scores, one definition for training (dev) and evaluation (test): accuracy, macro-F1 and the
per-class report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def classification_metrics(
    labels: Sequence[int], predictions: Sequence[int], label_ids: Sequence[int] | None = None
) -> dict[str, float]:
    """Accuracy and macro-F1; `label_ids` fixes the classes the macro average runs over (default: those seen)."""
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(f1_score(labels, predictions, labels=label_ids, average="macro", zero_division=0)),
    }


def classification_report(labels: Sequence[int], predictions: Sequence[int], names: dict[int, str]) -> dict[str, Any]:
    """Accuracy, macro-F1 over every class in `names`, per-class precision/recall/F1/support and the confusion
    matrix."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    ids = sorted(names)
    precision, recall, f1, support = precision_recall_fscore_support(labels, predictions, labels=ids, zero_division=0)
    return {
        **classification_metrics(labels, predictions, ids),
        "per_class": {
            names[i]: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for i, p, r, f, s in zip(ids, precision, recall, f1, support, strict=True)
        },
        "confusion_matrix": confusion_matrix(labels, predictions, labels=ids).tolist(),
    }
