"""The pipeline's configuration: `PipelineConfig`, the sections a `configs/pipeline.yaml` holds, and the rules
that span sections.

Each section is a model of its own module (inputs, training, gate, baseline, stores, serving, images, cluster);
teams and regions are files of their own (teams.py, regions.py). Every model forbids unknown keys and is frozen
(strict.py). The defaults in these modules are the only defaults: `configs/pipeline.yaml` sets just what depends on
the site (service addresses, registry, cluster names) and never repeats a default. Both `pipelines/` and `steps/`
import the configuration; it imports neither.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from paddle_mlops_core.config import task_rules
from paddle_mlops_core.config.baseline import BaselineConfig
from paddle_mlops_core.config.cluster import ClusterConfig, TriggerConfig
from paddle_mlops_core.config.gate import GateConfig
from paddle_mlops_core.config.images import ImagesConfig
from paddle_mlops_core.config.inputs import DataConfig, ModelConfig
from paddle_mlops_core.config.serving import ServingConfig
from paddle_mlops_core.config.stores import MLflowConfig, StorageConfig
from paddle_mlops_core.config.strict import Strict
from paddle_mlops_core.config.tasks import DEFAULT_TASK, TASK_NAME_PATTERN
from paddle_mlops_core.config.training import TrainingConfig


class PipelineConfig(Strict):
    task: str = Field(
        DEFAULT_TASK,
        pattern=TASK_NAME_PATTERN,
        description="the task's name (configs/tasks/<task>.yaml, chosen with --task): names its registered model, "
        "MLflow experiment, InferenceService and object-store prefix",
    )
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    gate: GateConfig = GateConfig()
    baseline: BaselineConfig = BaselineConfig()
    storage: StorageConfig = StorageConfig()
    mlflow: MLflowConfig = MLflowConfig()
    serving: ServingConfig = ServingConfig()
    images: ImagesConfig = ImagesConfig()
    cluster: ClusterConfig = ClusterConfig()
    trigger: TriggerConfig = TriggerConfig()

    def smoke_payload(self) -> list[Any]:
        """The V1 `instances` a rollout sends before traffic moves: texts, or {"text_a", "text_b"} pairs."""
        return [
            {"text_a": i[0], "text_b": i[1]} if isinstance(i, tuple) else i for i in self.serving.smoke_instances or ()
        ]

    @model_validator(mode="before")
    @classmethod
    def _task_defaults(cls, data: Any) -> Any:
        return task_rules.fill_defaults(data)

    @model_validator(mode="after")
    def _task_consistent(self) -> PipelineConfig:
        task_rules.check(self)
        return self

    @model_validator(mode="after")
    def _workflow_outlives_its_training(self) -> PipelineConfig:
        train = self.training.job.step_deadline_seconds(self.training.backend)
        need = train + self.cluster.step_deadline_seconds
        if self.cluster.workflow_deadline_seconds < need:
            wait = "queue_timeout_seconds" if self.training.backend == "trainjob" else "schedule_timeout_seconds"
            raise ValueError(
                f"cluster.workflow_deadline_seconds ({self.cluster.workflow_deadline_seconds}) would end the workflow "
                f"before its train step may end: training.job.{wait} + active_deadline_seconds = {train}, plus one "
                f"cluster.step_deadline_seconds ({self.cluster.step_deadline_seconds}) for the other steps, is {need}. "
                f"Raise cluster.workflow_deadline_seconds to at least {need} or shorten the training deadlines."
            )
        return self

    @model_validator(mode="after")
    def _digests_have_an_overlay(self) -> PipelineConfig:
        if self.images.require_digest and not self.images.digest_overlay:
            raise ValueError(
                "images.require_digest needs images.digest_overlay: the kustomize overlay whose images: pin the "
                "install set by digest (overlays/prod)"
            )
        return self
