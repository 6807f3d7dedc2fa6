"""Deduplication in bounded memory: records (key, payload) in source order, each key kept once when it came with one
payload only (a text with one label, a pair with one label, a sentence tagged one way), in first-occurrence order.

Records gather in memory, in order. A source whose records stay under `buffer_chars()` characters (a partition's
worth) is deduplicated there, without touching the disk. Past that, each full buffer spills, one pickled batch per
partition, to hash partitions in a temporary directory (about the corpus's size, under $TMPDIR); `finish` deduplicates
each partition alone into a file of its kept records (pickled batches, still in source order), and `kept()` merges
those files by first index (heapq.merge).

Memory, whatever the corpus's size: the buffer (`buffer_chars()` characters of records) while reading; one partition's
dictionary (`partitions_for` sizes partitions at PARTITION_BYTES of source: a few times that in memory) while
deduplicating; one batch per partition (`buffer_chars()` characters over all of them) while merging.
"""

from __future__ import annotations

import heapq
import pickle
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

PARTITION_BYTES = 32 << 20  # source bytes per partition: its dictionary takes a few times that in memory
MAX_PARTITIONS = 512  # open files while spilling


def partitions_for(size: int) -> int:
    """How many partitions a source of `size` bytes spills into (its records take about its size)."""
    return max(1, min(MAX_PARTITIONS, -(-size // PARTITION_BYTES)))


def buffer_chars() -> int:
    """Characters of records held before a spill (a CJK character is 3 bytes of source): a partition's worth."""
    return max(1, PARTITION_BYTES // 3)


Record = tuple[int, str, str]  # (index in the source, key, payload)


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

    def add(self, other: Counts) -> None:
        self.kept += other.kept
        self.duplicates += other.duplicates
        self.repeats += other.repeats
        self.conflicts += other.conflicts
        self.tally.update(other.tally)


class Distinct:
    """`add` every record, `finish` once, then iterate `kept()` (as often as needed) while `directory` exists."""

    def __init__(self, directory: Path, partitions: int, tally: bool = False) -> None:
        self._directory = directory
        self._partitions = partitions
        self._tally = tally
        self._buffer: list[Record] = []
        self._buffered = 0  # characters in the buffer
        self._limit = buffer_chars()
        self._spills: list[IO[bytes]] = []  # opened at the first spill
        self._kept: list[Record] | None = None  # kept records when nothing spilled
        self._seen = 0

    def add(self, key: str, payload: str) -> None:
        self._buffer.append((self._seen, key, payload))
        self._seen += 1
        self._buffered += len(key) + len(payload)
        if self._buffered >= self._limit:
            self._spill()

    def _spill(self) -> None:
        """The buffer, one pickled batch per partition (records by hash(key); Python's string hash is this
        process's, and every record is split by it here, so a key's records meet in one partition)."""
        if not self._spills:
            self._spills = [(self._directory / f"spill-{p}.pickle").open("wb") for p in range(self._partitions)]
        batches: list[list[Record]] = [[] for _ in self._spills]
        n = len(batches)
        for record in self._buffer:
            batches[hash(record[1]) % n].append(record)
        for batch, spill in zip(batches, self._spills, strict=True):
            if batch:
                pickle.dump(batch, spill, pickle.HIGHEST_PROTOCOL)
        self._buffer, self._buffered = [], 0

    def finish(self) -> Counts:
        """Deduplicate the buffer, or else each partition alone; the counts over all of them."""
        counts = Counts(seen=self._seen)
        if not self._spills:
            self._kept, found, conflicts = _deduplicate(self._buffer, self._tally)
            self._buffer = []
            counts.add(found)
            counts.conflict_examples = [key for _, key in conflicts]
            return counts
        self._spill()
        for spill in self._spills:
            spill.close()
        jobs = [(self._directory, p, self._tally, self._limit // self._partitions) for p in range(self._partitions)]
        results = [_deduplicate_partition(job) for job in jobs]
        for found, _ in results:
            counts.add(found)
        first = heapq.nsmallest(3, (conflict for _, conflicts in results for conflict in conflicts))
        counts.conflict_examples = [key for _, key in first]
        return counts

    def kept(self) -> Iterator[tuple[str, str]]:
        """(key, payload) of every kept record, in first-occurrence order."""
        if self._kept is not None:
            for _, key, payload in self._kept:
                yield key, payload
            return
        files = [(self._directory / f"kept-{p}.pickle").open("rb") for p in range(self._partitions)]
        try:
            for _, key, payload in heapq.merge(*map(_records, files)):
                yield key, payload
        finally:
            for f in files:
                f.close()


def _records(file: IO[bytes]) -> Iterator[Record]:
    """The records of a file of pickled batches, a batch in memory at a time."""
    while True:
        try:
            batch = pickle.load(file)
        except EOFError:
            return
        yield from batch


class _Deduplicated:
    """One pass over records: each key's first index and payload, the other payloads of a conflicting key; then
    `kept()` yields the kept records in first-index order, counting them (and the conflicts) as it goes."""

    def __init__(self, records: Iterable[Record], tally: bool) -> None:
        self.first: dict[str, tuple[int, str]] = {}  # key -> (its first index, its first payload)
        self.others: dict[str, set[str]] = {}  # key -> its other payloads (the key conflicts)
        self.counts = Counts()
        self.conflicts: list[tuple[int, str]] = []  # the first three (index, key) dropped as conflicts
        self._tally = tally
        first, others, counts = self.first, self.others, self.counts
        for index, key, payload in records:
            entry = first.get(key)
            if entry is None:
                first[key] = (index, payload)
                continue
            counts.repeats += 1
            if payload == entry[1]:
                counts.duplicates += 1
                continue
            seen = others.setdefault(key, set())
            counts.duplicates += payload in seen
            seen.add(payload)

    def kept(self) -> Iterator[Record]:
        counts, others = self.counts, self.others
        for key, (index, payload) in self.first.items():  # insertion order: first index ascending
            if key in others:
                counts.conflicts += 1
                if len(self.conflicts) < 3:
                    self.conflicts.append((index, key))
                continue
            counts.kept += 1
            if self._tally:
                counts.tally[payload] += 1
            yield index, key, payload


def _deduplicate(records: Iterable[Record], tally: bool) -> tuple[list[Record], Counts, list[tuple[int, str]]]:
    """The kept records (first index ascending), the counts, the first three conflicts (index, key)."""
    found = _Deduplicated(records, tally)
    kept = list(found.kept())
    return kept, found.counts, found.conflicts


def _deduplicate_partition(job: tuple[Path, int, bool, int]) -> tuple[Counts, list[tuple[int, str]]]:
    """Partition `p`'s kept records written to kept-p, in pickled batches of about `batch_chars` characters (the
    merge reads one batch per partition at a time); its counts and first three conflicts."""
    directory, p, tally, batch_chars = job
    spilled = directory / f"spill-{p}.pickle"
    with spilled.open("rb") as file:
        found = _Deduplicated(_records(file), tally)
    spilled.unlink()
    with (directory / f"kept-{p}.pickle").open("wb") as out:
        batch: list[Record] = []
        chars = 0
        for record in found.kept():
            batch.append(record)
            chars += len(record[1]) + len(record[2])
            if chars >= batch_chars:
                pickle.dump(batch, out, pickle.HIGHEST_PROTOCOL)
                batch, chars = [], 0
        if batch:
            pickle.dump(batch, out, pickle.HIGHEST_PROTOCOL)
    return found.counts, found.conflicts
