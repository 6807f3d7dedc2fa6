"""The ERNIE tokenizer the train step uses, loaded without the model code: prepare-data tokenizes the train split
with it once (the n-gram table, steps/runtime/data/ngram_counts.py), the train step and the export per batch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Local and test runs must never reach a model hub; a configured directory is all we load.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from paddlenlp.transformers import ErnieTokenizer  # noqa: E402


def load_tokenizer(path: Path) -> Any:
    """A `vocab.txt` file (character vocabulary) or a directory saved with `save_pretrained`."""
    if path.is_file():
        return ErnieTokenizer(str(path))
    return ErnieTokenizer.from_pretrained(str(path))
