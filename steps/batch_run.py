"""batch-run: open finetune-batch's parent MLflow run, before the fan-out; its id is the `parent-run-id` output.

Every branch's train step takes that id and starts its task's training run as the parent's child, in the parent's
experiment (`finetune-batch`; steps/runtime/training/tracking.py start_run). Idempotent by workflow: a retry of this
step finds the run an earlier attempt created (steps/runtime/training/batch_parent.py). `summary` ends the parent
with the batch's outcome; the exit handler closes it FAILED when the workflow fails before that (by its `workflow`
tag, steps/close_run.py).
"""

from __future__ import annotations

import argparse
import sys

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER, workflow_run_name
from steps import batch_summary
from steps.runtime import runner
from steps.runtime.release import registry
from steps.runtime.runner import StepError, StepFailed
from steps.runtime.training import batch_parent


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", required=True, help='the batch: JSON list of {"task": NAME, "overrides": [...]}')
    parser.add_argument(
        "--workflow-name", default=None,
        help="the run's workflow (default: $PADDLE_MLOPS_RUN, else $ARGO_WORKFLOW_NAME)",
    )  # fmt: skip


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    tasks = [item["task"] for item in batch_summary.parse_tasks(args.tasks)]
    workflow = args.workflow_name or workflow_run_name()
    try:
        run_id = batch_parent.open_parent(cfg, workflow, tasks, args.git_sha)
    except StepError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to reach MLflow is reported the same way (and retried)
        raise StepFailed(f"MLflow at {registry.tracking_uri(cfg)} is unreachable or failed: {exc}") from None
    print(f"finetune-batch {workflow}: parent MLflow run {run_id} for {', '.join(tasks)}")
    return {BATCH_PARENT_PARAMETER: run_id}


STEP = runner.Step(
    "batch-run",
    __doc__,
    run,
    _arguments,
    outputs=(runner.Output(BATCH_PARENT_PARAMETER, "the batch's parent MLflow run id"),),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
