"""Which job the `train` step creates: `training.backend` names a TrainJob (the default, trainjob.py) or a legacy
PaddleJob (paddlejob.py). The train template builds it; the executor's Role grants exactly its resource."""

from __future__ import annotations

from paddle_mlops_core.config import PipelineConfig
from pipelines.job_spec import TrainingJobSpec
from pipelines.paddlejob import build_paddlejob
from pipelines.run_scope import WORKFLOW, RunScope
from pipelines.trainjob import trainjob


def training_job(cfg: PipelineConfig, scope: RunScope = WORKFLOW) -> TrainingJobSpec:
    """The job `training.backend` names: a TrainJob (default) or a legacy PaddleJob."""
    return trainjob(cfg, scope) if cfg.training.backend == "trainjob" else build_paddlejob(cfg, scope)
