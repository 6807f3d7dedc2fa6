"""Distillation from the cheap baseline: the train step's soft targets for sequence-level tasks mix each training
example's one-hot label with the baseline's probabilities for it, `training.distill_weight` of the latter.

The probabilities (cross-fitted, steps/runtime/data/teacher.py) are computed once per data content, in prepare-data,
into `teacher.npy` (float32 [train rows, classes], row i for train row i); the train step reads the rows of each
batch from it memory-mapped (`load_teacher`), so no rank fits the baseline or holds the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from steps.runtime.data.teacher import TEACHER
from steps.runtime.runner import StepError


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
