"""Exit handler: release the workflow's training jobs when the workflow was stopped by a person or its deadline.

A train step deletes its job itself on such a SIGTERM (steps/runtime/cluster/train_job.py); this catches the job
whose train step was between two attempts when `argo stop` or the deadline came (argo-workflows v4.1.2 runs the
workflow's onExit for both; `argo terminate` runs none: there the train step's own SIGTERM is what deletes it).
Everything else is left as it is, each with what to do: a job still queued or running in a workflow that failed for
another reason (`argo retry` re-attaches to it; deleting the workflow deletes it through its ownerReference), a
failed job (kept for its logs; `argo retry` replaces it), a succeeded one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import WORKFLOW_LABEL
from steps.runtime import runner
from steps.runtime.cluster.job_state import job_state
from steps.runtime.cluster.objects import WORKFLOW, Kind, Objects, deleting, in_cluster_api, name_of
from steps.runtime.cluster.workflow_stop import stop_reason


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow-name", required=True, help="jobs labelled paddle-mlops/workflow=<this>")
    parser.add_argument("--namespace", required=True, help="the workflow's namespace")
    parser.add_argument(
        "--job-api", required=True, help="the training jobs' apiVersion, e.g. trainer.kubeflow.org/v1alpha1"
    )
    parser.add_argument("--job-kind", required=True, help="the training jobs' kind, e.g. TrainJob")


def run(cfg: PipelineConfig, args: argparse.Namespace, api: Any = None) -> None:
    del cfg
    objects = Objects(api if api is not None else in_cluster_api(), args.namespace)
    kind = Kind.of({"apiVersion": args.job_api, "kind": args.job_kind})
    reason = stop_reason(objects.get(WORKFLOW, args.workflow_name))
    jobs = objects.select(kind, f"{WORKFLOW_LABEL}={args.workflow_name}")
    if not jobs:
        print(f"workflow {args.workflow_name}: no {kind.kind} left")
    for job in jobs:
        name, state = name_of(job), job_state(job)
        if deleting(job):
            print(f"{kind.kind} {name}: being deleted")
        elif state.finished:
            print(f"{kind.kind} {name}: {state.describe()}; kept (its logs; `argo retry` replaces a failed one)")
        elif reason:
            objects.delete(kind, name)
            print(f"{kind.kind} {name}: {state.phase}; deleted, {reason}")
        else:
            print(f"{kind.kind} {name}: {state.phase}; left to go on: `argo retry {args.workflow_name}` re-attaches "
                  "to it, deleting the workflow deletes it")  # fmt: skip


STEP = runner.Step("release-train-jobs", __doc__, run, _arguments)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
