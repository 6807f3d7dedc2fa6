"""The interface every task type implements, and the model-row plumbing they share.

A task type turns its data into split files (`prepare`), its rows and requests into model rows (`encode`), the
model's logits into answers (`results`) and answers into scores (`scores`). Training, evaluation, validation and
the model server all go through it, so a text is encoded and an answer decoded the same way everywhere.

Model rows are what the ERNIE model sees: `input_ids` and `token_type_ids` of one sequence, unpadded. An
instance (one text, or one pair) becomes one row, except a long text in token classification, which becomes
several windows (`owner` says whose row it is, `offset` where in the instance's text the window starts).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TaskSpec
from steps.runtime.runner import StepError

# Targets that take no part in the loss (the [CLS]/[SEP] positions and padding of a token-level target).
IGNORE_INDEX = -100
Instance = Any  # a text (str) or a pair ({"text_a": str, "text_b": str}), as a V1 request holds it
# Padded int64 `input_ids`, `token_type_ids` -> logits ([rows, labels] or [rows, width, labels]).
Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass
class ModelRows:
    input_ids: list[list[int]] = field(default_factory=list)
    token_type_ids: list[list[int]] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)  # index of the instance each row belongs to
    offset: list[int] = field(default_factory=list)  # character offset of the row's first token in its instance

    def add(self, ids: list[int], types: list[int], owner: int, offset: int = 0) -> None:
        self.input_ids.append(ids)
        self.token_type_ids.append(types)
        self.owner.append(owner)
        self.offset.append(offset)

    def __len__(self) -> int:
        return len(self.input_ids)

    def padded(self, indices: Sequence[int], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows at `indices` as one batch: int64 `input_ids` padded with `pad_id` to the longest, and
        `token_type_ids` padded with 0 to the same width."""
        input_ids = pad([self.input_ids[i] for i in indices], pad_id)
        return input_ids, pad([self.token_type_ids[i] for i in indices], 0, input_ids.shape[1])


def pad(rows: Sequence[Sequence[int]], value: int, width: int | None = None) -> np.ndarray:
    """int64 [len(rows), width] (width: the longest row), `value` after each row."""
    width = width or max(len(row) for row in rows)
    out = np.full((len(rows), width), value, dtype="int64")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def run_rows(forward: Forward, rows: ModelRows, batch_size: int, pad_id: int) -> list[np.ndarray]:
    """The logits of every model row (in row order), each cut to the row's own length when they are per token.
    Rows run in batches of similar length, so little of each batch is padding."""
    out: list[np.ndarray] = [np.empty(0)] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: len(rows.input_ids[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        logits = forward(*rows.padded(chunk, pad_id))
        for position, i in enumerate(chunk):
            row = np.asarray(logits[position], dtype="float32")
            out[i] = row[: len(rows.input_ids[i])] if row.ndim == 2 else row
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def read_jsonl_rows(path: Path, keys: Sequence[str], limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of a split file prepare-data wrote (the first `limit`, read no further); each must have `keys`."""
    if not path.is_file():
        raise StepError(f"{path} does not exist; run prepare-data into this workspace first.")
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines() if limit is None else _lines(path)
    for number, line in enumerate(lines, start=1):
        if limit is not None and len(rows) >= limit:
            break
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or any(k not in row for k in keys):
            shape = "{" + ", ".join(repr(k) for k in keys) + "}"
            raise StepError(f"{path} line {number} is not a {shape} object; rerun prepare-data.")
        rows.append(row)
    return rows


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as handle:
        yield from handle


class Task(ABC):
    """A task type at run time (its declaration, `spec`, lives in paddle_mlops_core/config/tasks.py)."""

    spec: TaskSpec
    # The split file's keys, and the one that holds what the model learns (MLflow's dataset `targets`).
    row_keys: tuple[str, ...]
    target_key: str

    @abstractmethod
    def prepare(self, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
        """Read the configured data, split it deterministically, write the data area into `out`; the stats."""

    def read_rows(self, path: Path, limit: int | None = None) -> list[dict[str, Any]]:
        return read_jsonl_rows(path, self.row_keys, limit)

    @abstractmethod
    def instance(self, row: dict[str, Any]) -> Instance:
        """What a client would send for this row."""

    @abstractmethod
    def vocab_texts(self, row: dict[str, Any]) -> list[str]:
        """The texts of a row a character vocabulary is built from."""

    @abstractmethod
    def encode(self, tokenizer: Any, instances: Sequence[Instance], max_seq_len: int) -> ModelRows:
        """The model rows of `instances` (no targets)."""

    @abstractmethod
    def encode_training(
        self, tokenizer: Any, rows: Sequence[dict[str, Any]], max_seq_len: int, labels: dict[int, str]
    ) -> tuple[ModelRows, list[Any]]:
        """The model rows of `rows` and each row's target (a label id, or a label id per token; ids of `labels`)."""

    @abstractmethod
    def targets_batch(self, targets: Sequence[Any], width: int) -> np.ndarray:
        """int64 targets of one padded batch `width` tokens wide."""

    @abstractmethod
    def results(
        self,
        instances: Sequence[Instance],
        rows: ModelRows,
        logits: list[np.ndarray],
        labels: dict[int, str],
        transitions: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        """One answer per instance (the V1 `predictions` entries) from the logits of its rows; `transitions`: the
        export's tag-transition scores (token classification, steps/runtime/data/tag_transitions.py), or None."""

    @abstractmethod
    def scores(self, rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]], labels: dict[int, str]) -> dict:
        """The task's metrics (`spec.metrics`, plus per-class or per-type detail) of `answers` against `rows`."""


class SingleText:
    """Rows with one text (`text`): the instance a client sends is that text, and the vocabulary is built from it."""

    def instance(self, row: dict[str, Any]) -> Instance:
        return row["text"]

    def vocab_texts(self, row: dict[str, Any]) -> list[str]:
        return [row["text"]]
