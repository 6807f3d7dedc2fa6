"""The names a loaded configuration always carries, typed as such.

`mlflow.experiment`, `mlflow.registered_model`, `serving.model_name` and `gate.metric` are declared `str | None` because
null in YAML means "the task's own" (`ernie-<task>`, the task type's gate metric); validation fills them in
(paddle_mlops_core/config/task_rules.py `fill_defaults`), so a PipelineConfig never holds None there. The steps read
them through these, which say so once for the type checker and fail with a clear error on a configuration built some
other way, instead of sending None to MLflow or the object store.
"""

from __future__ import annotations

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.runner import StepError


def experiment(cfg: PipelineConfig) -> str:
    return _filled(cfg.mlflow.experiment, "mlflow.experiment")


def registered_model(cfg: PipelineConfig) -> str:
    return _filled(cfg.mlflow.registered_model, "mlflow.registered_model")


def served_model(cfg: PipelineConfig) -> str:
    return _filled(cfg.serving.model_name, "serving.model_name")


def gate_metric(cfg: PipelineConfig) -> str:
    return _filled(cfg.gate.metric, "gate.metric")


def _filled(value: str | None, key: str) -> str:
    if value is None:
        raise StepError(
            f"{key} is not set: load the configuration with paddle_mlops_core.config.load_config, which fills in the "
            "task's default"
        )
    return value
