"""text-matching: do two texts match? ErnieForSequenceClassification over `[CLS] text_a [SEP] text_b [SEP]`.

Data: the user's LCQMC-style pairs (text_a, text_b, label; TSV, CSV or JSONL; steps/runtime/data/corpora/pairs.py),
streamed, both texts normalised, exact duplicates dropped, a pair seen with two labels dropped (in bounded memory:
area.deduplicator). Rows:
`{"text_a", "text_b", "label": id}`. Request instance: `{"text_a": …, "text_b": …}`; answer as for classification.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TEXT_MATCHING, spec
from steps.runtime.data import area, labelled_text
from steps.runtime.data.corpora import pairs
from steps.runtime.data.distinct import Distinct
from steps.runtime.data.tasks.base import Instance, ModelRows
from steps.runtime.data.tasks.classification import SequenceLabels, label_rows
from steps.runtime.runner import StepError

SEPARATOR = "\x00"  # joins a pair into one key for deduplication and the split hash


def clean_pairs(cfg: PipelineConfig, examples: Iterable[pairs.PairExample], distinct: Distinct) -> dict[str, int]:
    """Normalise both texts of each pair and hand it to `distinct` (key `text_a SEPARATOR text_b`, payload the label
    as a string), which drops duplicates and pairs seen with two labels; the counts read and dropped as empty."""
    limit = cfg.data.max_text_chars
    raw = empty = 0
    for ex in examples:
        raw += 1
        a, b = labelled_text.normalise(ex.text_a, limit), labelled_text.normalise(ex.text_b, limit)
        if not a or not b:
            empty += 1
            continue
        distinct.add(f"{a}{SEPARATOR}{b}", str(ex.label))
    return {"raw_lines": raw, "empty_dropped": empty}


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
        source = area.open_source(cfg)
        with tempfile.TemporaryDirectory(prefix="prepare-data-") as spill:
            distinct = area.deduplicator(Path(spill), source.size, tally=True)
            counts = clean_pairs(cfg, pairs.read_pairs(source.chunks, source.name), distinct)
            found = distinct.finish()
            if not found.kept:
                raise StepError(
                    f"data.source {source.name} holds no usable pairs ({counts['raw_lines']} rows read). Add pairs."
                )
            labels = labelled_text.label_map(found.tally)
            if len(labels) < 2:
                raise StepError(
                    f"data.source {source.name} has only one label ({labels[0]!r}); matching needs pairs that match "
                    "and pairs that do not (label 1 and 0)."
                )
            id_of = {name: i for i, name in labels.items()}
            kept, capped = area.capped(distinct.kept(), found.kept, cfg)
            rows = (_row(key, id_of[label]) for key, label in kept)
            stats = {**counts, "duplicates_dropped": found.duplicates, "conflicts_dropped": found.conflicts,
                     "capped_dropped": capped, "examples": found.kept - capped}  # fmt: skip
            shape = label_rows(_key, self.vocab_texts, labels)
            return area.write_area(cfg, out, rows, shape, labels, stats)


def _row(key: str, label: int) -> dict[str, Any]:
    text_a, text_b = key.split(SEPARATOR, 1)
    return {"text_a": text_a, "text_b": text_b, "label": label}


def _key(row: dict[str, Any]) -> str:
    return f"{row['text_a']}{SEPARATOR}{row['text_b']}"
