"""The train split's n-gram table (`ngrams.npz`), counted once per data content in prepare-data.

The character n-gram embedding with a vocabulary (`model.char_ngram_min_count` >= 1, steps/runtime/weights/
char_ngrams.py) gives each bigram (and trigram) of token ids seen at least that often in the train split its own row,
most frequent first. Counting them needs the whole split tokenized as the train step tokenizes it; the tokenizer
does ~3,200 texts/s on one core, so that is done here, once, in a pool of processes (one per core, chunks of
CHUNK rows streamed from the split file, a bounded number in flight), and never in a training rank.

Each chunk is encoded with the task's `encode_training` at `model.max_seq_len` (NER: its windows), each model row
padded with the pad id on both sides (as CharBigramEmbedding.fit_vocabulary pads), and its n-grams counted with
numpy: an n-gram of ids is one int64 key (RADIX bits an id), `np.unique` gives each key's count and first position.
The chunks' counts are merged, first positions made global (the stream's order), and the n-grams ordered exactly as
`collections.Counter.most_common()` orders them (count descending, ties in the order first seen).

`ngrams.npz` (docs/contracts.md): `bigrams` int32 [k, 2], `bigram_counts` int64 [k] (those seen at least min_count
times, in that order), `distinct_bigrams` int64 (all distinct bigrams); with `model.char_ngram_trigrams` the same for
`trigrams` [m, 3].
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from itertools import chain
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.data import labelled_text, tasks, train_tokenizer
from steps.runtime.runner import StepError
from steps.runtime.serving import cpu_quota

log = logging.getLogger("steps.ngram_counts")
NGRAMS = "ngrams.npz"
CHUNK = 4096  # rows a worker encodes and counts at a time (~1.3 s of tokenizing)
RADIX = 21  # bits of one token id in a key: a trigram's three fill an int64 (vocabularies below 2,097,152 ids)
MERGE_AT = 1 << 22  # chunk entries held before they are merged into the running counts


def needed(cfg: PipelineConfig) -> bool:
    """Whether the model's n-gram embedding has a vocabulary, so the train step reads the table."""
    return cfg.model.char_ngram_buckets > 0 and cfg.model.char_ngram_min_count >= 1


def settings(cfg: PipelineConfig) -> dict[str, Any] | None:
    """What the table's content depends on beyond the split and the tokenizer (prepare-data's key): the least count
    and whether trigrams are counted; None where no table is written (the table's size, `char_ngram_buckets`, and
    the embedding's other settings change no count)."""
    if not needed(cfg):
        return None
    return {"min_count": cfg.model.char_ngram_min_count, "trigrams": cfg.model.char_ngram_trigrams}


@dataclass
class Tally:
    """Distinct n-gram keys (sorted), each one's count and the stream position it was first seen at."""

    keys: np.ndarray
    counts: np.ndarray
    first: np.ndarray

    @classmethod
    def empty(cls) -> Tally:
        return cls(*(np.zeros(0, dtype="int64") for _ in range(3)))

    def shifted(self, offset: int) -> Tally:
        return Tally(self.keys, self.counts, self.first + offset)


def ngram_keys(rows: Sequence[Sequence[int]], pad: int, n: int) -> np.ndarray:
    """int64 keys of the n-grams (n = 2 or 3) of each row padded with `pad` on both sides, in stream order (row by
    row, left to right): members a, b(, c) -> a << RADIX(2) | b << RADIX | c."""
    lengths = np.fromiter((len(r) for r in rows), dtype="int64", count=len(rows))
    ids = np.fromiter((t for r in rows for t in r), dtype="int64", count=int(lengths.sum()))
    if ids.size and (ids.min() < 0 or ids.max() >> RADIX):
        raise StepError(f"token ids must lie in [0, 2**{RADIX}) for the n-gram table")
    padded = lengths + 2
    ends = np.cumsum(padded)
    flat = np.full(int(ends[-1]) if len(rows) else 0, pad, dtype="int64")
    # each row's ids go one place after its row's start: its start is (sum of the rows before it) + 2 pads each
    flat[np.arange(ids.size) + np.repeat(np.arange(len(rows)) * 2 + 1, lengths)] = ids
    width = len(flat) - n + 1
    if width <= 0:
        return np.zeros(0, dtype="int64")
    keys = flat[:width].copy()
    for k in range(1, n):
        keys = (keys << RADIX) | flat[k : k + width]
    # an n-gram starting in the last n - 1 places of a row reaches into the next one
    valid = np.ones(width, dtype=bool)
    for back in range(1, n):
        cut = ends - back
        valid[cut[cut < width]] = False
    return keys[valid]


def tally(keys: np.ndarray) -> Tally:
    """The distinct keys of one stream of n-grams, their counts and first positions in it."""
    distinct, first, counts = np.unique(keys, return_index=True, return_counts=True)
    return Tally(distinct, counts.astype("int64"), first.astype("int64"))


def merge(parts: Sequence[Tally]) -> Tally:
    """One tally of several (positions already global): counts added, the earliest first position kept."""
    if len(parts) == 1:
        return parts[0]
    keys = np.concatenate([p.keys for p in parts])
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    if not keys.size:
        return Tally.empty()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.add.reduceat(np.concatenate([p.counts for p in parts])[order], starts)
    first = np.minimum.reduceat(np.concatenate([p.first for p in parts])[order], starts)
    return Tally(keys[starts], counts, first)


def most_common(counts: Tally, min_count: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-grams seen at least `min_count` times as int32 [k, n] ids and int64 [k] counts, in
    `Counter.most_common()` order: count descending, ties in the order first seen."""
    keep = counts.counts >= min_count
    keys, seen, first = counts.keys[keep], counts.counts[keep], counts.first[keep]
    order = np.lexsort((first, -seen))
    mask = (1 << RADIX) - 1
    grams = np.stack([(keys[order] >> (RADIX * (n - 1 - k))) & mask for k in range(n)], axis=1)
    return grams.astype("int32").reshape(-1, n), seen[order]


class Counting:
    """Running counts of one n-gram size, fed chunk by chunk in stream order."""

    def __init__(self) -> None:
        self.merged, self.pending, self.held, self.position = Tally.empty(), list[Tally](), 0, 0

    def add(self, part: Tally, total: int) -> None:
        """A chunk's tally (positions within the chunk) and its number of n-grams."""
        self.pending.append(part.shifted(self.position))
        self.position += total
        self.held += part.keys.size
        if self.held > max(MERGE_AT, 2 * self.merged.keys.size):
            self.done()

    def done(self) -> Tally:
        self.merged, self.pending, self.held = merge([self.merged, *self.pending]), [], 0
        return self.merged


# --- the workers ----------------------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _start(
    tokenizer_path: str, task_type: str, max_seq_len: int, labels: dict[int, str], sizes: tuple[int, ...]
) -> None:
    """A worker's setup: the tokenizer loaded once."""
    from steps.runtime.weights import ernie_tokenizer

    tokenizer = ernie_tokenizer.load_tokenizer(Path(tokenizer_path))
    _WORKER.update(tokenizer=tokenizer, task=tasks.for_type(task_type), max_seq_len=max_seq_len, labels=labels,
                   sizes=sizes, pad=int(tokenizer.pad_token_id or 0))  # fmt: skip


def _count_chunk(lines: list[str]) -> list[tuple[Tally, int]]:
    """One chunk of split lines: per n-gram size, its tally (positions within the chunk) and its n-grams."""
    rows = [json.loads(line) for line in lines]
    w = _WORKER
    encoded, _ = w["task"].encode_training(w["tokenizer"], rows, w["max_seq_len"], w["labels"])
    out = []
    for n in w["sizes"]:
        keys = ngram_keys(encoded.input_ids, w["pad"], n)
        out.append((tally(keys), int(keys.size)))
    return out


def _chunks(path: Path) -> Iterator[list[str]]:
    """The split file's non-blank lines, CHUNK at a time (the file is never held whole)."""
    chunk: list[str] = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                chunk.append(line)
                if len(chunk) == CHUNK:
                    yield chunk
                    chunk = []
    if chunk:
        yield chunk


def count(
    split: Path, tokenizer_path: Path, task_type: str, max_seq_len: int, labels: dict[int, str],
    sizes: tuple[int, ...] = (2,), workers: int | None = None,
) -> list[Tally]:  # fmt: skip
    """The n-gram tallies (one per size in `sizes`) of the split file `split`, encoded as the train step encodes it
    (first positions: in stream order). A split of one chunk is counted in this process; more, in `workers`
    processes (by default as many as the container's CPU quota allows: os.cpu_count() is the node's in a pod), at
    most two chunks each in flight."""
    counting = [Counting() for _ in sizes]
    setup = (str(tokenizer_path), task_type, max_seq_len, labels, sizes)
    chunks = _chunks(split)
    head = [c for _, c in zip(range(2), chunks, strict=False)]
    if len(head) < 2:
        _start(*setup)
        for chunk in head:
            for counter, (part, total) in zip(counting, _count_chunk(chunk), strict=True):
                counter.add(part, total)
        return [c.done() for c in counting]
    workers = workers or cpu_quota.default_threads()
    # fork: the workers start from this process, PaddleNLP imported once here (a fresh interpreter takes ~5 s)
    from steps.runtime.weights import ernie_tokenizer  # noqa: F401

    with ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=_start, initargs=setup) as pool:
        flight: deque[Future[list[tuple[Tally, int]]]] = deque()
        for chunk in chain(head, chunks):
            flight.append(pool.submit(_count_chunk, chunk))
            if len(flight) >= 2 * workers:
                _collect(flight.popleft(), counting)
        while flight:
            _collect(flight.popleft(), counting)
    return [c.done() for c in counting]


def _collect(future: Future[list[tuple[Tally, int]]], counting: list[Counting]) -> None:
    for counter, (part, total) in zip(counting, future.result(), strict=True):
        counter.add(part, total)


def write(cfg: PipelineConfig, record: dict[str, Any] | None, data_dir: Path) -> dict[str, Any] | None:
    """`ngrams.npz` of the data area `data_dir` (its train split and label map written), where the configuration's
    n-gram embedding has a vocabulary; what was counted (None where nothing is)."""
    (data_dir / NGRAMS).unlink(missing_ok=True)
    if not needed(cfg):
        return None
    started = time.monotonic()
    mcfg = cfg.model
    sizes = (2, 3) if mcfg.char_ngram_trigrams else (2,)
    labels = labelled_text.read_label_map(data_dir / "label_map.json")
    with tempfile.TemporaryDirectory(prefix="tokenizer-") as scratch:
        where = train_tokenizer.location(cfg, record, data_dir, Path(scratch) / "tokenizer")
        tallies = count(data_dir / "train.jsonl", where, mcfg.task, mcfg.max_seq_len, labels, sizes)
    arrays: dict[str, np.ndarray] = {}
    stats: dict[str, Any] = {}
    for n, name, counted in zip(sizes, ("bigram", "trigram"), tallies, strict=False):
        grams, seen = most_common(counted, mcfg.char_ngram_min_count, n)
        distinct = np.array(counted.keys.size, dtype="int64")
        arrays |= {f"{name}s": grams, f"{name}_counts": seen, f"distinct_{name}s": distinct}
        stats |= {f"distinct_{name}s": int(counted.keys.size), f"{name}s": len(seen)}
    np.savez(data_dir / NGRAMS, **arrays)
    stats["seconds"] = round(time.monotonic() - started, 1)
    log.info("n-gram table: %s (seen at least %d times) in %.1f s", ", ".join(
        f"{stats[f'{k}s']} of {stats[f'distinct_{k}s']} {k}s" for k in ("bigram", "trigram")[: len(sizes)]
    ), mcfg.char_ngram_min_count, stats["seconds"])  # fmt: skip
    return stats
