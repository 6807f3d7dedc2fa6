"""The plots are real PNGs of the documented size with something drawn on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from steps.runtime import plots

HISTORY = [
    {"epoch": 1, "train_loss": 0.69, "dev_accuracy": 0.61, "dev_macro_f1": 0.58},
    {"epoch": 2, "train_loss": 0.52, "dev_accuracy": 0.74, "dev_macro_f1": 0.72},
    {"epoch": 3, "train_loss": 0.41, "dev_accuracy": 0.81, "dev_macro_f1": 0.80},
]


def assert_png(path: Path, size: tuple[int, int]) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == size
        pixels = np.asarray(image.convert("L"), dtype=float)
    assert pixels.var() > 0, "the image is blank"


def test_curves(tmp_path: Path) -> None:
    out = plots.plot_curves(HISTORY, tmp_path / "sub" / "curves.png")
    assert out == tmp_path / "sub" / "curves.png"
    assert_png(out, plots.CURVES_SIZE)


def test_curves_without_epoch_key_and_missing_values(tmp_path: Path) -> None:
    history = [{"train_loss": 0.7}, {"train_loss": 0.5, "dev_accuracy": 0.8, "dev_macro_f1": None}]
    assert_png(plots.plot_curves(history, tmp_path / "c.png"), plots.CURVES_SIZE)


def test_curves_reject_empty_history(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        plots.plot_curves([], tmp_path / "c.png")


def test_confusion_matrix(tmp_path: Path) -> None:
    out = plots.plot_confusion_matrix([[40, 3], [5, 52]], ["negative", "positive"], tmp_path / "cm.png")
    assert_png(out, plots.CONFUSION_SIZE)


def test_confusion_matrix_shape_must_match_labels(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not match 3 labels"):
        plots.plot_confusion_matrix([[1, 2], [3, 4]], ["a", "b", "c"], tmp_path / "cm.png")


def test_per_class_accepts_sklearn_report(tmp_path: Path) -> None:
    per_class = {
        "negative": {"precision": 0.9, "recall": 0.8, "f1-score": 0.85, "support": 43},
        "positive": {"precision": 0.8, "recall": 0.9, "f1": 0.85, "support": 57},
        "macro avg": {"precision": 0.85, "recall": 0.85, "f1-score": 0.85, "support": 100},
    }
    out = plots.plot_per_class(per_class, tmp_path / "pc.png")
    assert_png(out, plots.PER_CLASS_SIZE)


def test_per_class_rejects_empty(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no per-class"):
        plots.plot_per_class({"accuracy": 0.9}, tmp_path / "pc.png")  # type: ignore[dict-item]
