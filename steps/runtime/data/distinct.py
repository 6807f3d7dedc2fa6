"""Deduplication in bounded memory: records (key, payload) in source order, each key kept once when it came with one
payload only (a text with one label, a pair with one label, a sentence tagged one way), in first-occurrence order.

Records spill, in order, to hash partitions on disk (a temporary directory: about the corpus's size, under $TMPDIR);
each partition is deduplicated alone into a file of its kept records, still in source order; `kept()` merges those
files by first index (heapq.merge). Memory holds one partition at a time, and `partitions_for` sizes partitions so
one stays under PARTITION_BYTES of spilled records, whatever the corpus's size.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PARTITION_BYTES = 32 << 20  # spilled bytes per partition: its dictionary takes a few times that in memory
MAX_PARTITIONS = 512  # open files while spilling


def partitions_for(size: int) -> int:
    """How many partitions a source of `size` bytes spills into (its records take about its size)."""
    return max(1, min(MAX_PARTITIONS, -(-size // PARTITION_BYTES)))


@dataclass
class Counts:
    """What deduplication saw. `duplicates`: records whose (key, payload) came before; `repeats`: records whose key
    came before (a conflicting record is a repeat, not a duplicate); `tally`: kept records per payload (when asked)."""

    seen: int = 0
    kept: int = 0
    duplicates: int = 0
    repeats: int = 0
    conflicts: int = 0
    conflict_examples: list[str] = field(default_factory=list)  # the first three keys dropped as conflicts
    tally: Counter[str] = field(default_factory=Counter)


class Distinct:
    """`add` every record, `finish` once, then iterate `kept()` (as often as needed) while `directory` exists."""

    def __init__(self, directory: Path, partitions: int, tally: bool = False) -> None:
        self._directory = directory
        self._tally = tally
        self._spills: list[IO[str]] = [
            (directory / f"spill-{p}.jsonl").open("w", encoding="utf-8") for p in range(partitions)
        ]
        self._seen = 0

    def add(self, key: str, payload: str) -> None:
        spill = self._spills[hash(key) % len(self._spills)]
        spill.write(json.dumps([self._seen, key, payload], ensure_ascii=False) + "\n")
        self._seen += 1

    def finish(self) -> Counts:
        """Deduplicate each partition alone; the counts over all of them."""
        counts = Counts(seen=self._seen)
        conflicts: list[tuple[int, str]] = []
        for p, spill in enumerate(self._spills):
            spill.close()
            conflicts = heapq.nsmallest(3, [*conflicts, *self._deduplicate(p, counts)])
        counts.conflict_examples = [key for _, key in conflicts]
        return counts

    def _deduplicate(self, p: int, counts: Counts) -> list[tuple[int, str]]:
        """Write partition `p`'s kept records; add its counts to `counts`; its first three conflicts (index, key)."""
        spilled = self._directory / f"spill-{p}.jsonl"
        first: dict[str, tuple[int, set[str]]] = {}
        with spilled.open(encoding="utf-8") as lines:
            for line in lines:
                index, key, payload = json.loads(line)
                entry = first.setdefault(key, (index, set()))
                if entry[0] != index:
                    counts.repeats += 1
                    counts.duplicates += payload in entry[1]
                entry[1].add(payload)
        spilled.unlink()
        conflicts: list[tuple[int, str]] = []
        with (self._directory / f"kept-{p}.jsonl").open("w", encoding="utf-8") as out:
            for key, (index, payloads) in first.items():  # insertion order: first index ascending
                if len(payloads) > 1:
                    counts.conflicts += 1
                    if len(conflicts) < 3:
                        conflicts.append((index, key))
                    continue
                (payload,) = payloads
                counts.kept += 1
                if self._tally:
                    counts.tally[payload] += 1
                out.write(json.dumps([index, key, payload], ensure_ascii=False) + "\n")
        return conflicts

    def kept(self) -> Iterator[tuple[str, str]]:
        """(key, payload) of every kept record, in first-occurrence order."""
        files = [(self._directory / f"kept-{p}.jsonl").open(encoding="utf-8") for p in range(len(self._spills))]
        try:
            for _, key, payload in heapq.merge(*(map(json.loads, f) for f in files)):
                yield key, payload
        finally:
            for f in files:
                f.close()
