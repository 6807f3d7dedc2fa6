"""What every WorkflowTemplate of the project carries: the parameters a submitter may set (configuration, task,
workspace, step cache, priority, run id) and the shared spec settings (identity, cleanup, deadline, security,
priority, the exit handler)."""

from __future__ import annotations

from typing import Any

from hera.workflows import Parameter, WorkflowTemplate
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.config.loader import known_tasks
from paddle_mlops_core.contracts import (
    ARTIFACT_REPOSITORIES,
    ARTIFACT_REPOSITORY_KEY,
    PART_OF,
    RERUN_ALL,
    RERUN_PARAMETER,
    STEP_CACHE_PARAMETER,
)
from pipelines import k8s
from pipelines.labels import TEAM_LABEL


def priority_parameters(cfg: PipelineConfig) -> list[Parameter]:
    """`priority`: the Kueue WorkloadPriorityClass of the run's TrainJob (argo/kueue.yaml)."""
    if cfg.training.backend != "trainjob":
        return []
    return [
        Parameter(
            name="priority",
            value=cfg.training.placement.priority,
            enum=list(cfg.cluster.priority_classes),
            description="Kueue priority of the training job: admission order and preemption within the team queue",
        )
    ]


def run_parameters(cfg: PipelineConfig) -> list[Parameter]:
    """The parameters every WorkflowTemplate takes: which configuration and task the steps load, and the workspace."""
    return [
        Parameter(name="config", value="configs/pipeline.yaml"),
        Parameter(name="env", value="prod", enum=["local", "dev", "prod"]),
        Parameter(
            name="task",
            value=cfg.task,
            enum=known_tasks(),
            description="the task trained and served (configs/tasks/<task>.yaml): names its model, experiment, "
            "InferenceService and store prefix",
        ),
        Parameter(name="overrides", value="[]", description='JSON list of "a.b=c" config overrides'),
        Parameter(name="workspace", value=cfg.storage.workspace, description="per-run area; the run name is appended"),
        Parameter(
            name=STEP_CACHE_PARAMETER,
            value=cfg.storage.step_cache_uri(),
            description="step cache: outputs kept by content key and reused by any run with the same key "
            "(docs/caching.md); empty: no reuse",
        ),
        Parameter(
            name=RERUN_PARAMETER,
            value="",
            description=f"steps to compute even when the cache holds their outputs: '{RERUN_ALL}', or names separated "
            "by commas",
        ),
    ]


def run_id_parameters() -> list[Parameter]:
    """`run-id`: the training run the train step's checkpoints belong to (pipelines/run_scope.py)."""
    return [
        Parameter(
            name="run-id",
            value="",
            description="training run whose checkpoints a train step resumes (<workspace>/train/<task>/<run-id>/); "
            "empty: a digest of the commit, task, model and training configuration, data and batch layout, the same "
            "for every restart, retry and resubmission of this run",
        )
    ]


def workflow_template(cfg: PipelineConfig, name: str, arguments: list[Parameter]) -> WorkflowTemplate:
    """A WorkflowTemplate with the shared settings; its DAG is `main` and `exit-handler` runs on exit."""
    return WorkflowTemplate(
        name=name, entrypoint="main", arguments=arguments, on_exit="exit-handler", **workflow_settings(cfg)
    )


def workflow_settings(cfg: PipelineConfig) -> dict[str, Any]:
    """What every workflow spec carries: identity, cleanup, deadline, security, priority."""
    team = k8s.team_config(cfg)
    return {
        "namespace": cfg.cluster.namespace,
        "service_account_name": cfg.cluster.service_account,
        # Keep failed pods for their logs; successful runs clean up at once. Either way every step's log is archived
        # first (`archiveLogs`) through the namespace's artifact repository, named here so that a namespace without
        # it fails the workflow at once instead of archiving nothing (pipelines/platform/log_archive.py).
        "pod_gc": m.PodGC(strategy="OnWorkflowSuccess"),
        "archive_logs": True,
        "artifact_repository_ref": m.ArtifactRepositoryRef(
            config_map=ARTIFACT_REPOSITORIES, key=ARTIFACT_REPOSITORY_KEY
        ),
        "ttl_strategy": m.TTLStrategy(
            seconds_after_completion=cfg.cluster.ttl_seconds_after_completion,
            seconds_after_success=min(cfg.cluster.ttl_seconds_after_completion, 24 * 3600),
        ),
        "active_deadline_seconds": cfg.cluster.workflow_deadline_seconds,
        "security_context": k8s.pod_security_context(),
        "pod_priority_class_name": team.priority.name,
        "labels": {**PART_OF, TEAM_LABEL: team.name},
    }
