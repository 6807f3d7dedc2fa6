"""text-matching: do two texts match? ErnieForSequenceClassification over `[CLS] text_a [SEP] text_b [SEP]`.

Data: the user's LCQMC-style pairs (text_a, text_b, label; TSV, CSV or JSONL; steps/runtime/data/corpora/pairs.py),
both texts normalised, exact duplicates dropped, a pair seen with two labels dropped. Rows:
`{"text_a", "text_b", "label": id}`. Request instance: `{"text_a": …, "text_b": …}`; answer as for classification.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TEXT_MATCHING, spec
from steps.runtime.data import area, labelled_text
from steps.runtime.data.corpora import pairs
from steps.runtime.data.tasks.base import Instance, ModelRows
from steps.runtime.data.tasks.classification import SequenceLabels, per_label
from steps.runtime.runner import StepError

SEPARATOR = "\x00"  # joins a pair into one key for deduplication and the split hash


def clean_pairs(cfg: PipelineConfig, examples: list[pairs.PairExample]) -> tuple[list[tuple[str, str, str]], dict]:
    """Normalised (text_a, text_b, label) triples without duplicates or conflicting labels; the counts dropped."""
    limit = cfg.data.max_text_chars
    labels_of: dict[tuple[str, str], set[str]] = {}
    empty = duplicates = 0
    for ex in examples:
        a, b = labelled_text.normalise(ex.text_a, limit), labelled_text.normalise(ex.text_b, limit)
        if not a or not b:
            empty += 1
            continue
        seen = labels_of.setdefault((a, b), set())
        if str(ex.label) in seen:
            duplicates += 1
        seen.add(str(ex.label))
    kept = [(a, b, next(iter(ls))) for (a, b), ls in labels_of.items() if len(ls) == 1]
    conflicts = sum(1 for ls in labels_of.values() if len(ls) > 1)
    counts = {"raw_lines": len(examples), "empty_dropped": empty, "duplicates_dropped": duplicates,
              "conflicts_dropped": conflicts}  # fmt: skip
    return kept, counts


class TextMatching(SequenceLabels):
    spec = spec(TEXT_MATCHING)
    row_keys = ("text_a", "text_b", "label")

    def instance(self, row: dict[str, Any]) -> Instance:
        return {"text_a": row["text_a"], "text_b": row["text_b"]}

    def vocab_texts(self, row: dict[str, Any]) -> list[str]:
        return [row["text_a"], row["text_b"]]

    def encode(self, tokenizer: Any, instances: Sequence[Instance], max_seq_len: int) -> ModelRows:
        """`[CLS] a [SEP] b [SEP]`, segment 0 then 1; the longer text is cut first when the pair is too long."""
        rows = ModelRows()
        if not instances:
            return rows
        encoded = tokenizer(
            [i["text_a"] for i in instances],
            text_pair=[i["text_b"] for i in instances],
            max_length=max_seq_len,
            truncation=True,
            return_token_type_ids=True,
        )
        for i, (ids, types) in enumerate(zip(encoded["input_ids"], encoded["token_type_ids"], strict=True)):
            rows.add(ids, types, i)
        return rows

    def prepare(self, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
        source = str(cfg.data.source)
        examples = list(pairs.read_pairs(area.source_bytes(cfg), source))
        kept, counts = clean_pairs(cfg, examples)
        if not kept:
            raise StepError(f"data.source {source} holds no usable pairs ({len(examples)} rows read). Add pairs.")
        labels = labelled_text.label_map(label for _, _, label in kept)
        if len(labels) < 2:
            raise StepError(
                f"data.source {source} has only one label ({labels[0]!r}); matching needs pairs that match and "
                "pairs that do not (label 1 and 0)."
            )
        id_of = {name: i for i, name in labels.items()}
        rows = [{"text_a": a, "text_b": b, "label": id_of[label]} for a, b, label in kept]
        rows, capped = area.capped(rows, _key, cfg)
        splits = area.split(rows, _key, cfg)
        stats = {**counts, "capped_dropped": capped, "examples": len(rows)}
        return area.write_area(cfg, out, splits, labels, lambda part: per_label(part, labels), stats, self.vocab_texts)


def _key(row: dict[str, Any]) -> str:
    return f"{row['text_a']}{SEPARATOR}{row['text_b']}"
