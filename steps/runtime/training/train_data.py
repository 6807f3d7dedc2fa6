"""The train step's data path: the train split read by row number and encoded one batch at a time, the dev split
read when it is first scored.

Setup reads nothing of the splits but the train index's lengths array (4 bytes a row, for the sampler) and opens
the files: no rank reads, tokenizes or counts the whole train split (what is computed once from it, the n-gram
table and the distillation teacher, prepare-data computed: steps/runtime/weights/char_ngrams.py `apply_table`,
distillation.py `load_teacher`). A step reads its sampled rows (steps/runtime/data/split_index.py) and encodes
them with the task's `encode_training` (~20 ms for 64 texts). A batch is the sampled rows' model rows: one per row,
or for token classification every window of each sampled row (a long row is read in several windows), so a step's
size counts rows, not windows. The label-id check that reading a split once did is made per batch.

Scoring on dev (rank 0, once an epoch) still holds the dev split and its encoding in memory while it scores; the
dev split is a fixed fraction of the data, read each time it is scored (not at setup) and let go after, so between
scorings rank 0 holds no more than the other ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.data import split_index
from steps.runtime.data.tasks import ModelRows, Task
from steps.runtime.runner import StepError
from steps.runtime.training import distillation


def check_labels(rows: Sequence[dict[str, Any]], task: Task, labels: dict[int, str], where: str) -> None:
    """StepError when a row's label is not in label_map.json (a split and a label map of two preparations)."""
    if "label" in task.row_keys:
        bad = sorted({int(r["label"]) for r in rows} - set(labels))
        if bad:
            raise StepError(f"{where} has labels {bad} missing from label_map.json; rerun prepare-data.")


def read_split(task: Task, data_dir: Path, split: str, labels: dict[int, str]) -> list[dict[str, Any]]:
    """A whole split's rows (the dev split, for scoring), checked as a train batch is."""
    path = data_dir / f"{split}.jsonl"
    rows = task.read_rows(path)
    if not rows:
        raise StepError(f"{path} is empty; rerun prepare-data with more data.")
    check_labels(rows, task, labels, path.name)
    return rows


class DevSplit:
    """The dev split's rows, read each time they are asked for and not kept (rank 0 scores them; the other ranks
    never read them)."""

    def __init__(self, task: Task, data_dir: Path, labels: dict[int, str]) -> None:
        self.task, self.data_dir, self.labels = task, data_dir, labels

    @property
    def rows(self) -> list[dict[str, Any]]:
        return read_split(self.task, self.data_dir, "dev", self.labels)


class TrainData:
    """The train split by row number: its lengths for the sampler, and any batch of its rows encoded."""

    def __init__(self, cfg: PipelineConfig, task: Task, tokenizer: Any, data_dir: Path, labels: dict[int, str]):
        self.task, self.tokenizer, self.labels = task, tokenizer, labels
        self.max_seq_len = cfg.model.max_seq_len
        self.rows = split_index.SplitRows(data_dir / "train.jsonl", task.row_keys)
        if not len(self.rows):
            raise StepError(f"{self.rows.path} is empty; rerun prepare-data with more data.")
        self.distill_weight = cfg.training.distill_weight
        self.teacher = (
            distillation.load_teacher(data_dir, len(self.rows), len(labels)) if self.distill_weight > 0 else None
        )

    def __len__(self) -> int:
        return len(self.rows)

    def lengths(self) -> np.ndarray:
        """uint16 [rows]: each row's length in characters (a token each, for Chinese text), at most max_seq_len
        (the model reads no more; a longer row is one truncated row, or windows of at most that)."""
        lengths = self.rows.lengths()
        return np.minimum(lengths, self.max_seq_len, out=lengths)

    def encode(self, indices: Sequence[int]) -> tuple[ModelRows, list[Any]]:
        """The model rows of the train rows at `indices` and their targets (soft ones when distilling)."""
        rows = self.rows.take(indices)
        check_labels(rows, self.task, self.labels, self.rows.path.name)
        encoded, targets = self.task.encode_training(self.tokenizer, rows, self.max_seq_len, self.labels)
        if self.teacher is not None:
            teacher = np.asarray(self.teacher[np.asarray(indices, dtype=np.int64)], dtype="float32")
            targets = distillation.soft_targets(targets, teacher, self.distill_weight)
        return encoded, targets

    def batch(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, ModelRows]:
        """One padded batch of the rows at `indices`: input_ids, token_type_ids, targets, and the model rows."""
        encoded, targets = self.encode(indices)
        input_ids, token_type_ids = encoded.padded(range(len(encoded)), self.tokenizer.pad_token_id)
        return input_ids, token_type_ids, self.task.targets_batch(targets, input_ids.shape[1]), encoded
