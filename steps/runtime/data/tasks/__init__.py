"""The task types at run time, by the name `model.task` gives (declared in paddle_mlops_core/config/tasks.py).

- `classification`: text-classification (sentiment)
- `matching`: text-matching (sentence pairs)
- `ner`: token-classification (person/place/organisation names, BIO per character)
- `base`: the interface and the model-row plumbing they share

`prepare(cfg, out)` writes the configured task's data area (prepare-data, and validate's held-out test set): the
task type reads and shapes its rows, steps/runtime/data/area.py splits and writes them the same way for every type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION, TEXT_MATCHING, TOKEN_CLASSIFICATION
from steps.runtime.data.area import require_source
from steps.runtime.data.tasks.base import IGNORE_INDEX, Instance, ModelRows, Task, run_rows
from steps.runtime.data.tasks.classification import TextClassification
from steps.runtime.data.tasks.matching import TextMatching
from steps.runtime.data.tasks.ner import TokenClassification

TASKS: dict[str, Task] = {
    TEXT_CLASSIFICATION: TextClassification(),
    TEXT_MATCHING: TextMatching(),
    TOKEN_CLASSIFICATION: TokenClassification(),
}


def for_type(task_type: str) -> Task:
    if task_type not in TASKS:
        raise KeyError(f"unknown task type {task_type!r}; known: {', '.join(TASKS)}")
    return TASKS[task_type]


def for_config(cfg: PipelineConfig) -> Task:
    return for_type(cfg.model.task)


def prepare(cfg: PipelineConfig, out: Path) -> dict[str, Any]:
    """Write the configured task's data area into `out` and return the stats (StepError first when the task needs
    a data file and none is configured)."""
    require_source(cfg)
    return for_config(cfg).prepare(cfg, out)


__all__ = ["IGNORE_INDEX", "Instance", "ModelRows", "TASKS", "Task", "for_config", "for_type", "prepare", "run_rows"]
