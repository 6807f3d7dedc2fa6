"""CronWorkflow `scheduled-retrain`: run `train-deploy` on the latest commit on a schedule.

Fresh data arrives without a push; the schedule retrains anyway. It references the
WorkflowTemplate rather than copying it, so there is still one definition of the DAG. There is no
push, so no commit: it passes an empty `git-sha`, which the build step resolves to the head commit
of `cluster.retrain_branch` (steps/build_image.py) — a branch name is never recorded as the commit.
`spec.schedules` needs Argo Workflows 3.6 (paddle_mlops_core/versions.py FEATURES).
"""

from __future__ import annotations

from hera.workflows import CronWorkflow, Parameter
from hera.workflows import models as m

from paddle_mlops_core.config import PipelineConfig
from pipelines import train_deploy, workflow_spec

NAME = "scheduled-retrain"
# The `git-sha` value that asks the build step to resolve the branch head.
RESOLVE_BRANCH_HEAD = ""


def build(cfg: PipelineConfig) -> CronWorkflow:
    """The `scheduled-retrain` CronWorkflow for this configuration (no side effects)."""
    settings = workflow_spec.workflow_settings(cfg)
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
            Parameter(name="git-sha", value=RESOLVE_BRANCH_HEAD),
            Parameter(name="git-branch", value=cfg.cluster.retrain_branch),
            Parameter(name="git-repo", value=cfg.cluster.retrain_repository),
        ],
        **settings,
    )
