"""Exit handler: release the workflow's training jobs when the workflow was stopped by a person or its deadline.

A train step deletes its job itself on such a SIGTERM (steps/runtime/cluster/train_job.py); this catches the job
whose train step was between two attempts when `argo stop` or the deadline came (argo-workflows v4.1.2 runs the
workflow's onExit for both; `argo terminate` runs none: there the train step's own SIGTERM is what deletes it).
Everything else is left as it is, each with what to do: a job still queued or running in a workflow that failed for
another reason (`argo retry` re-attaches to it; deleting the workflow deletes it through its ownerReference), a job
another workflow of the run adopted (it is owned by that one too, which watches it: Argo releases the run's mutex when
it stops this workflow, before this handler runs), a failed job (kept for its logs; `argo retry` replaces it), a
succeeded one. Argo gives this step no retry after a stop or past the deadline (workflow/controller/operator.go
processNodeRetries fails every retry node under a shutdown), so it retries the API's transient errors itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import WORKFLOW_LABEL
from steps.runtime import runner
from steps.runtime.cluster.job_state import job_state
from steps.runtime.cluster.objects import WORKFLOW, Kind, Objects, deleting, in_cluster_api, name_of
from steps.runtime.cluster.workflow_stop import stop_reason
from steps.runtime.runner import StepFailed

# The API's transient errors are retried here: Argo retries no exit handler after a stop or past the deadline.
ATTEMPTS = 4


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workflow-name", required=True, help="jobs labelled paddle-mlops/workflow=<this>")
    parser.add_argument("--namespace", required=True, help="the workflow's namespace")
    parser.add_argument(
        "--job-api", required=True, help="the training jobs' apiVersion, e.g. trainer.kubeflow.org/v1alpha1"
    )
    parser.add_argument("--job-kind", required=True, help="the training jobs' kind, e.g. TrainJob")


def run(cfg: PipelineConfig, args: argparse.Namespace, api: Any = None, sleep: Any = time.sleep) -> None:
    del cfg
    objects = Objects(api if api is not None else in_cluster_api(), args.namespace)
    kind = Kind.of({"apiVersion": args.job_api, "kind": args.job_kind})
    for attempt in range(ATTEMPTS):
        try:
            return _release(objects, kind, args.workflow_name)
        except StepFailed as exc:
            if attempt == ATTEMPTS - 1:
                raise
            print(f"{exc}; trying again")
            sleep(5.0 * (attempt + 1))


def _release(objects: Objects, kind: Kind, workflow: str) -> None:
    reason = stop_reason(objects.get(WORKFLOW, workflow))
    jobs = objects.select(kind, f"{WORKFLOW_LABEL}={workflow}")
    if not jobs:
        print(f"workflow {workflow}: no {kind.kind} left")
    for job in jobs:
        name, state = name_of(job), job_state(job)
        others = sorted(o.get("name", "?") for o in job["metadata"].get("ownerReferences") or []
                        if o.get("kind") == "Workflow" and o.get("name") != workflow)  # fmt: skip
        if deleting(job):
            print(f"{kind.kind} {name}: being deleted")
        elif state.finished:
            print(f"{kind.kind} {name}: {state.describe()}; kept (its logs; `argo retry` replaces a failed one)")
        elif others:
            print(f"{kind.kind} {name}: {state.phase}; left to workflow {', '.join(others)}, which adopted it")
        elif reason:
            objects.delete(kind, name)
            print(f"{kind.kind} {name}: {state.phase}; deleted, {reason}")
        else:
            print(f"{kind.kind} {name}: {state.phase}; left to go on: `argo retry {workflow}` re-attaches to it, "
                  "deleting the workflow deletes it")  # fmt: skip


STEP = runner.Step("release-train-jobs", __doc__, run, _arguments)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
