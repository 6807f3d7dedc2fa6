"""Distillation from the cheap baseline: the train step's soft targets for sequence-level tasks mix each training
example's one-hot label with the baseline's probabilities for it, `training.distill_weight` of the latter.

The probabilities are cross-fitted (K folds: each example is answered by a baseline fitted without it), since a
baseline answering its own training examples is near-certain and teaches nothing but the labels again. The fold
models use the C the baseline itself chooses on the dev split (steps/runtime/data/baselines/text.py).

They are computed once per data content, in prepare-data, into `teacher.npy` (float32 [train rows, classes], row i
for train row i); the train step reads the rows of each batch from it memory-mapped (`load_teacher`), so no rank
fits the baseline or holds the whole table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config.tasks import TEXT_MATCHING
from steps.runtime.data.baselines import pairs, text
from steps.runtime.runner import StepError

log = logging.getLogger("steps.distillation")
FOLDS = 5
TEACHER = "teacher.npy"  # in the data area: the train split's cross-fitted baseline probabilities


def teacher_probabilities(
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


def soft_targets(labels: Sequence[int], teacher: np.ndarray, weight: float) -> list[list[float]]:
    """weight · teacher + (1 − weight) · one-hot(label), one distribution per example."""
    one_hot = np.eye(teacher.shape[1], dtype="float32")[np.asarray(labels, dtype="int64")]
    return (weight * teacher + (1 - weight) * one_hot).tolist()


def load_teacher(data_dir: Path, rows: int, classes: int) -> np.ndarray:
    """The data area's teacher probabilities, memory-mapped ([rows, classes]: one per train row); StepError when
    prepare-data did not write them for this train split."""
    path = data_dir / TEACHER
    if not path.is_file():
        raise StepError(f"{path} does not exist: training.distill_weight > 0 trains on the baseline's probabilities "
                        "prepare-data writes there; rerun prepare-data with this configuration")  # fmt: skip
    try:
        teacher = np.load(path, mmap_mode="r")
    except ValueError:
        raise StepError(f"{path} is not a .npy array; rerun prepare-data with this configuration") from None
    if teacher.shape != (rows, classes):
        raise StepError(f"{path} holds {teacher.shape} probabilities, not ({rows}, {classes}) for the train split "
                        "and label map beside it; rerun prepare-data with this configuration")  # fmt: skip
    return teacher
