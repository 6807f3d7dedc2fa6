"""CronWorkflow `scheduled-retrain`: run `train-deploy` on the latest commit on a schedule.

Fresh data arrives without a push; the schedule retrains anyway. It references the
WorkflowTemplate rather than copying it, so there is still one definition of the DAG.
"""

from __future__ import annotations

from hera.workflows import CronWorkflow, Parameter
from hera.workflows import models as m

from paddle_mlops.config import PipelineConfig
from pipelines import templates, train_deploy

NAME = "scheduled-retrain"
BRANCH = "main"
# Same placeholder host as the registry in configs/pipeline.yaml; a config field would be better.
SOURCE_REPO = "https://git.example.com/ml/paddle-mlops.git"


def build(cfg: PipelineConfig) -> CronWorkflow:
    """The `scheduled-retrain` CronWorkflow for this configuration (no side effects)."""
    settings = templates.workflow_settings(cfg)
    return CronWorkflow(
        name=NAME,
        schedule=cfg.cluster.retrain_schedule,
        timezone="UTC",
        # A retrain still running when the next is due is left alone rather than doubled.
        concurrency_policy="Forbid",
        # A controller outage longer than this skips the run instead of firing late.
        starting_deadline_seconds=3600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=3,
        workflow_template_ref=m.WorkflowTemplateRef(name=train_deploy.NAME),
        # Inherited from the template too; said again so the cron's own spec is complete.
        on_exit="exit-handler",
        arguments=[
            # No push, so no commit: the build step resolves the branch name to its head commit.
            Parameter(name="git-sha", value=BRANCH),
            Parameter(name="git-branch", value=BRANCH),
            Parameter(name="git-repo", value=SOURCE_REPO),
        ],
        **settings,
    )
