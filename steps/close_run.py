"""Workflow exit handler: close the MLflow runs a workflow left RUNNING with its true status.

Every experiment is searched: a workflow's runs may be in several (a `finetune-batch` workflow's parent run and its
tasks' training runs are in `finetune-batch`, its rollouts' in their tasks' own).

A step killed mid-run (OOM, preemption, SIGKILL) never ends its MLflow run; this runs whatever the
outcome, so the tracking server never shows a dead workflow as still running.
"""

from __future__ import annotations

import argparse
import sys

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import runner
from steps.runtime.release import registry
from steps.runtime.runner import StepFailed


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow-name", required=True, help="runs tagged workflow=<this> are closed")
    parser.add_argument("--workflow-status", required=True, help="Argo {{workflow.status}}: Succeeded, Failed or Error")
    parser.add_argument("--workspace", default=None, help="per-run workspace (reported only)")


def run(cfg: PipelineConfig, args: argparse.Namespace) -> None:
    status = "FINISHED" if args.workflow_status == "Succeeded" else "FAILED"
    try:
        client = registry.connect(cfg)
        closed = registry.close_runs(args.workflow_name, status, client=client)
    except Exception as exc:  # noqa: BLE001 - any failure to reach MLflow is reported the same way
        raise StepFailed(f"MLflow at {registry.tracking_uri(cfg)} is unreachable or failed: {exc}") from None
    where = f" (workspace {args.workspace})" if args.workspace else ""
    head = f"workflow {args.workflow_name} {args.workflow_status}{where}"
    if closed:
        print(f"{head}: closed {len(closed)} run(s) as {status}: {', '.join(closed)}")
    else:
        print(f"{head}: no MLflow run left RUNNING")


STEP = runner.Step(
    "close-run",
    __doc__,
    run,
    _arguments,
    # An exit handler must finish quickly; MLflow's default retries would wait minutes on a dead server.
    env_defaults={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"},
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
