"""The task types at run time, by the name `model.task` gives (declared in paddle_mlops/config/tasks.py).

- `classification`: text-classification (sentiment)
- `matching`: text-matching (sentence pairs)
- `ner`: token-classification (person/place/organisation names, BIO per character)
- `base`: the interface and the model-row plumbing they share
"""

from __future__ import annotations

from paddle_mlops.config import PipelineConfig
from paddle_mlops.config.tasks import TEXT_CLASSIFICATION, TEXT_MATCHING, TOKEN_CLASSIFICATION
from steps.runtime.tasks.base import IGNORE_INDEX, Instance, ModelRows, Task, run_rows
from steps.runtime.tasks.classification import TextClassification
from steps.runtime.tasks.matching import TextMatching
from steps.runtime.tasks.ner import TokenClassification

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


__all__ = ["IGNORE_INDEX", "Instance", "ModelRows", "TASKS", "Task", "for_config", "for_type", "run_rows"]
