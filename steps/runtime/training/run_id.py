"""The training run id: what a train step's checkpoints are keyed by, the same for every restart of one run.

A workflow's name changes on `argo resubmit`, a TrainJob's on every new workflow, and neither says whether two
attempts train the same thing. The run id does: the `run-id` workflow parameter when one is given, else a digest of
what the training's result depends on (docs/training.md "Run id"). Kueue preemption, JobSet restarts, an Argo step
retry, `argo retry` and `argo resubmit` all compute the same id, so each finds the checkpoints of the attempt before.
Issue #41 (content-keyed step caching) refines this digest into the train step's full content key: keep it here,
in one function.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import PRETRAINED_RECORD
from steps.runtime.runner import StepError

# Training settings that change where or how fast a run trains, never what it learns (the batch layout, which does
# matter, is hashed separately: world size instead of nproc or job.workers).
_NOT_TRAINED_BY = {"job", "placement", "checkpoint", "metrics_port", "nproc", "backend"}
# Files of data/ the trainer reads besides the splits (whose digests stats.json records).
_DATA_FILES = ("label_map.json", "vocab.txt", PRETRAINED_RECORD)
_EXPLICIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def training_inputs(git_sha: str, cfg: PipelineConfig, data_dir: Path, layout: dict[str, int]) -> dict[str, Any]:
    """What the digest covers: the commit, the task, the resolved model and training configuration, the data's
    digests (prepare-data's stats.json and the other files training reads) and the batch layout."""
    stats_path = data_dir / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    files = {name: hashlib.sha256((data_dir / name).read_bytes()).hexdigest()
             for name in _DATA_FILES if (data_dir / name).is_file()}  # fmt: skip
    return {
        "git_sha": git_sha,
        "task": cfg.task,
        "model": cfg.model.model_dump(mode="json"),
        "training": cfg.training.model_dump(mode="json", exclude=_NOT_TRAINED_BY),
        "data": {"splits": stats.get("sha256") or {}, "files": files},
        "layout": layout,
    }


def run_id(explicit: str | None, git_sha: str, cfg: PipelineConfig, data_dir: Path, layout: dict[str, int]) -> str:
    """`explicit` (the `run-id` parameter) when given, else `r-` and 20 hex digits of the training inputs' sha256."""
    if explicit:
        if not _EXPLICIT.match(explicit):
            raise StepError(
                f"run id {explicit!r} is not usable as a store key: use letters, digits, '.', '_' and '-' "
                "(starting with a letter or digit, at most 128 characters)"
            )
        return explicit
    inputs = json.dumps(training_inputs(git_sha, cfg, data_dir, layout), sort_keys=True, ensure_ascii=False)
    return "r-" + hashlib.sha256(inputs.encode("utf-8")).hexdigest()[:20]
