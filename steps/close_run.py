"""Workflow exit handler: close the MLflow runs a workflow left RUNNING with its true status.

A step killed mid-run (OOM, preemption, SIGKILL) never ends its MLflow run; this runs whatever the
outcome, so the tracking server never shows a dead workflow as still running.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from steps.runtime import registry, stepargs


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m steps.close_run", description=__doc__.splitlines()[0])
    stepargs.add_common_args(parser)
    parser.add_argument("--workflow-name", required=True, help="runs tagged workflow=<this> are closed")
    parser.add_argument("--workflow-status", required=True, help="Argo {{workflow.status}}: Succeeded, Failed or Error")
    parser.add_argument("--workspace", default=None, help="per-run workspace (reported only)")
    return stepargs.parse(parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    # An exit handler must finish quickly; MLflow's default retries would wait minutes on a dead server.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")

    def body() -> int:
        cfg = stepargs.config_from_args(args)
        status = "FINISHED" if args.workflow_status == "Succeeded" else "FAILED"
        try:
            client = registry.connect(cfg)
            closed = registry.close_runs(cfg.mlflow.experiment, args.workflow_name, status, client=client)
        except Exception as exc:  # noqa: BLE001 - any failure to reach MLflow is reported the same way
            print(
                f"[close-run] error: MLflow at {registry.tracking_uri(cfg)} is unreachable or failed: {exc}",
                file=sys.stderr,
            )
            return stepargs.EXIT_FAILED
        where = f" (workspace {args.workspace})" if args.workspace else ""
        if closed:
            print(f"workflow {args.workflow_name} {args.workflow_status}{where}: closed {len(closed)} run(s) as {status}: {', '.join(closed)}")
        else:
            print(f"workflow {args.workflow_name} {args.workflow_status}{where}: no MLflow run left RUNNING")
        return stepargs.EXIT_OK

    return stepargs.run_step("close-run", body)


if __name__ == "__main__":
    sys.exit(main())
