"""The tokenizer the train step will use, at prepare-data time: what prepare-data tokenizes the train split with
once (the n-gram table, steps/runtime/data/ngram_counts.py), so its token ids are the train step's.

From scratch (no `model.pretrained`, or a name staged nowhere with `model.scratch_if_unstaged`): the character
vocabulary prepare-data just wrote. A name: only the tokenizer files of the staged digest prepare-data resolved,
each checked against its manifest (the weights themselves stay where they are until the train step fetches them).
A directory or s3:// prefix: read from there. A pvc:// location is mounted only in the training pods, so there is
nothing prepare-data can read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import pvc_location
from steps.runtime.runner import StepError
from steps.runtime.storage import workspace
from steps.runtime.storage.objectstore import fetching
from steps.runtime.weights import pretrained


def location(cfg: PipelineConfig, record: dict[str, Any] | None, data_dir: Path, scratch: Path) -> Path:
    """A `vocab.txt` or a directory of tokenizer files (`ernie_tokenizer.load_tokenizer` reads either) for the
    train step's tokenizer; `scratch`: an empty directory the staged files may be fetched into."""
    if pretrained.trains_from_scratch(cfg, record):
        vocab = data_dir / "vocab.txt"
        if not vocab.is_file():
            raise StepError(f"{vocab} does not exist: prepare-data writes it before the n-gram table")
        return vocab
    if record is not None:
        return _staged_tokenizer(record, cfg, scratch)
    where = str(cfg.model.pretrained)
    if pvc_location(where) is not None:
        raise StepError(
            f"model.pretrained {where}: the n-gram table (model.char_ngram_min_count >= 1) is counted in "
            "prepare-data with the weights' tokenizer, and a claim is mounted only in the training pods. Stage the "
            "weights by name (paddle-mlops weights stage) or set model.char_ngram_buckets to 0"
        )
    try:
        return workspace.stage_in(where, endpoint_url=cfg.storage.endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(
            f"model.pretrained {where}: {exc}. Point it at a directory of PaddleNLP ERNIE weights."
        ) from None


def _staged_tokenizer(record: dict[str, Any], cfg: PipelineConfig, into: Path) -> Path:
    """`into`, holding only the tokenizer files of the weights `record` names, each checked against the staged
    manifest as `pretrained.materialize` checks them all; a download (`model.allow_download`): PaddleNLP's
    tokenizer of the name, saved there."""
    from paddlenlp.transformers import AutoTokenizer, ErnieTokenizer
    from paddlenlp.transformers.tokenizer_utils_base import (
        ADDED_TOKENS_FILE,
        SPECIAL_TOKENS_MAP_FILE,
        TOKENIZER_CONFIG_FILE,
    )

    name = record["name"]
    if record.get("download"):
        AutoTokenizer.from_pretrained(name).save_pretrained(str(into))
        return into
    store, staged = pretrained._nearest(cfg, record)
    uri = store.version_uri(name, record["digest"])
    if staged is None:
        raise StepError(
            f"{uri} is not staged (prepare-data resolved {name} to it); stage the weights there again "
            f"({pretrained.stage_command(name, store)}) and rerun prepare-data"
        )
    wanted = {*ErnieTokenizer.resource_files_names.values(), TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE,
              ADDED_TOKENS_FILE}  # fmt: skip
    published = {**staged.manifest, "files": [f for f in staged.manifest["files"] if f["path"] in wanted]}
    return fetching.fetch(
        uri, into, store.endpoint_url, published=published, exact=store.exact, credentials=store.credentials
    )
