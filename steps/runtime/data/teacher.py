"""The distillation teacher (`teacher.npy`), computed once per data content in prepare-data.

With `training.distill_weight` > 0 the train step's soft targets mix each training example's one-hot label with the
cheap baseline's probabilities for it (steps/runtime/training/distillation.py). The probabilities are cross-fitted
(K folds: each example is answered by a baseline fitted without it), since a baseline answering its own training
examples is near-certain and teaches nothing but the labels again. The fold models use the C the baseline itself
chooses on the dev split (steps/runtime/data/baselines/text.py).

`teacher.npy` (docs/contracts.md): float32 [train rows, classes], row i the probabilities of train row i, read by
the train step memory-mapped, rows by index.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TEXT_MATCHING
from steps.runtime.data import labelled_text, tasks
from steps.runtime.data.baselines import pairs, text
from steps.runtime.runner import StepError

log = logging.getLogger("steps.teacher")
TEACHER = "teacher.npy"
FOLDS = 5


def needed(cfg: PipelineConfig) -> bool:
    """Whether the train step distils from the baseline, so reads the teacher."""
    return cfg.training.distill_weight > 0


def probabilities(
    task_type: str, train: Sequence[dict[str, Any]], dev: Sequence[dict[str, Any]], classes: int
) -> np.ndarray:
    """[len(train), classes] cross-fitted baseline probabilities of every training example."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    started = time.monotonic()
    y = np.array([int(r["label"]) for r in train])
    if task_type == TEXT_MATCHING:
        vec = text.vectorizer().fit([r[k] for r in train for k in ("text_a", "text_b")])
        x, dev_x = pairs.pair_features(vec, train), pairs.pair_features(vec, dev)
    else:
        vec = text.vectorizer()
        x, dev_x = vec.fit_transform([r["text"] for r in train]), vec.transform([r["text"] for r in dev])
    _, c = text.fit_on_dev(x, y, dev_x, [int(r["label"]) for r in dev])
    solver = "liblinear" if len(set(y.tolist())) <= 2 else "lbfgs"
    out = np.zeros((len(train), classes), dtype="float32")
    folds = StratifiedKFold(n_splits=min(FOLDS, max(2, int(np.bincount(y).min()))), shuffle=True, random_state=0)
    for fit_at, answer_at in folds.split(x, y):
        model = LogisticRegression(C=c, solver=solver, max_iter=1000).fit(x[fit_at], y[fit_at])
        out[np.ix_(answer_at, model.classes_)] = model.predict_proba(x[answer_at])
    agreement = float(np.mean(out.argmax(axis=1) == y))
    log.info("distillation teacher: cross-fitted baseline (C %g) agrees with %.3f of the training labels (%.0f s)",
             c, agreement, time.monotonic() - started)  # fmt: skip
    return out


def write(cfg: PipelineConfig, data_dir: Path) -> Path | None:
    """`teacher.npy` of the data area `data_dir` (its splits and label map written) where the configuration
    distils; None (a stale one removed) where it does not."""
    path = data_dir / TEACHER
    path.unlink(missing_ok=True)
    if not needed(cfg):
        return None
    task = tasks.for_config(cfg)
    train, dev = (task.read_rows(data_dir / f"{split}.jsonl") for split in ("train", "dev"))
    if not train or not dev:
        raise StepError(f"training.distill_weight: the teacher needs train and dev rows in {data_dir}; add data")
    classes = len(labelled_text.read_label_map(data_dir / "label_map.json"))
    np.save(path, probabilities(cfg.model.task, train, dev, classes))
    return path
