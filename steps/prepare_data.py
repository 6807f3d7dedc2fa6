"""prepare-data: read the task's corpus, clean it, split it deterministically, write the workspace `data/` area.

Outputs (docs/contracts.md): train/dev/test.jsonl (rows in the task type's shape), label_map.json, vocab.txt
(character vocabulary, only when training from scratch), pretrained.json (a `model.pretrained` name: the staged
digest the train step fetches), stats.json; the tables computed once from the train split: ngrams.npz (the n-gram
embedding's vocabulary, steps/runtime/data/ngram_counts.py) and teacher.npy (distillation's soft targets,
steps/runtime/data/teacher.py), where the configuration uses them.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run as a script path: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import runner
from steps.runtime.caching import keys as cache_keys
from steps.runtime.caching import reuse
from steps.runtime.data import area, ngram_counts, split_index, tasks, teacher
from steps.runtime.storage import s3, workspace
from steps.runtime.weights import pretrained

log = logging.getLogger("steps.prepare_data")
# The name of the data area in a cache entry, and the configuration its content depends on.
DATA = "data"
CONFIG_SECTIONS = ("task", "data", "model.task", "model.pretrained", "model.max_seq_len", "model.allow_download",
                   "model.scratch_if_unstaged")  # fmt: skip


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, help="workspace data directory (local path or s3:// URI)")


def tables(cfg: PipelineConfig) -> dict[str, Any]:
    """The settings of the tables computed from the train split (`ngram_counts`, `teacher`) that change their
    content: only those, so a setting the data area does not depend on recomputes nothing here."""
    return {"ngrams": ngram_counts.settings(cfg), "teacher": teacher.needed(cfg)}


def cache_key(cfg: PipelineConfig, record: dict[str, Any] | None) -> cache_keys.Key:
    """What the data area depends on (docs/caching.md): this step's code, the data and task settings, the settings
    of its tables, the corpus's content, the pretrained weights it resolved (their tokenizer decides the vocabulary
    and the n-gram table's ids), the locked libraries."""
    return cache_keys.Key(
        STEP.name,
        {
            "code": cache_keys.code_digest("steps.prepare_data"),
            "config": cache_keys.config_part(cfg, *CONFIG_SECTIONS),
            "tables": cache_keys.digest_json(tables(cfg)),
            "source": area.source_identity(cfg),
            "pretrained": cache_keys.digest_json(record),
            "libraries": cache_keys.lock_digest(),
        },
    )


def write_tables(cfg: PipelineConfig, record: dict[str, Any] | None, data_dir: Path) -> None:
    """What is computed from the splits of `data_dir` once per data content, never in a training rank: the split
    index training reads its split by, and where the configuration needs them the n-gram table and the distillation
    teacher (docs/contracts.md). Also for a data area written by hand (the benchmarks' random splits)."""
    split_index.write(data_dir, tasks.for_config(cfg).vocab_texts)
    ngram_counts.write(cfg, record, data_dir)
    teacher.write(cfg, data_dir)


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    # model.pretrained as a name: which staged weights this run trains from, or why it cannot, before anything
    # is written (validate re-prepares the test split and needs no weights, so only this step resolves).
    record = pretrained.resolve(cfg)
    cached = reuse.begin(args, cache_key(cfg, record), cfg.storage.endpoint_url)
    restored = cached.restore({DATA: args.output})
    if restored is not None:
        return restored
    local = Path(tempfile.mkdtemp(prefix="prepare-data-")) if s3.is_s3(args.output) else Path(args.output)
    pretrained.write_record(local, record)
    stats = tasks.prepare(cfg, local)
    write_tables(cfg, record, local)
    workspace.stage_out(local, args.output, cfg.storage.endpoint_url)
    sizes = ", ".join(f"{k} {v['total']}" for k, v in stats["splits"].items())
    log.info(
        "prepared %d %s examples from %s (%d duplicates, %d conflicting dropped): %s -> %s",
        stats["examples"],
        stats["task_type"],
        stats["source"],
        stats.get("duplicates_dropped", 0),
        stats.get("conflicts_dropped", 0),
        sizes,
        args.output,
    )
    return cached.record({DATA: local}, {})


STEP = runner.Step("prepare-data", __doc__, run, _arguments, cacheable=True)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
