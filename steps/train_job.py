"""train-job: put the run's training job (TrainJob, or a legacy PaddleJob) on the cluster and watch it to its end.

The Argo `train` step (and `train-canary`) runs this, retried for as long as the step may wait: every attempt, an
`argo retry` included, creates the job or re-attaches to the one there, so losing this pod never loses or doubles
the training (steps/runtime/cluster/train_job.py; docs/training.md "Interruptions"). The job's manifest comes in
`$PADDLE_MLOPS_TRAINING_JOB`, rendered by Argo (pipelines/train_step.py). Before placing it, a run with a step cache
looks its key up again: under the run's Argo mutex, the run before it may have recorded the model meanwhile (a push
and a cron run of one commit). Exit codes: 0 trained (or reused); 2 the job failed, was deactivated by Kueue or
outlived the deadline (not retried); 1 an API error, 143 SIGTERM (retried).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

if not __package__:  # run as a script path: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import TRAINING_JOB_ENV
from steps.runtime import runner
from steps.runtime.caching import reuse
from steps.runtime.cluster.objects import Objects, core_api, in_cluster_api
from steps.runtime.cluster.train_job import StopSignal, TrainJobs
from steps.runtime.cluster.workflow_stop import parse_time
from steps.runtime.runner import StepError, StepFailed, StepStopped
from steps.runtime.storage import workspace

log = logging.getLogger("steps.train_job")
# argo-workflows v4.1.2 workflow/common/common.go EnvVarDeadline: set in every container of a workflow pod.
ARGO_DEADLINE_ENV = "ARGO_DEADLINE"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (the model lands in <workspace>/model)")
    parser.add_argument("--namespace", required=True, help="the workflow's namespace, where the job is created")
    parser.add_argument("--workflow-name", required=True, help="the workflow: a stop of it deletes the job")
    parser.add_argument("--poll-seconds", type=float, default=10.0, help="how often the job's status is read")
    parser.add_argument(
        "--attempt-deadline-seconds", type=float, default=0,
        help="the template's activeDeadlineSeconds: the step releases the job before Argo ends it (0: no limit)",
    )  # fmt: skip
    runner.add_cache_args(parser)


def manifest_from_env() -> dict[str, Any]:
    text = os.environ.get(TRAINING_JOB_ENV, "")
    try:
        manifest = yaml.safe_load(text) if text else None
    except yaml.YAMLError as exc:
        raise StepError(f"${TRAINING_JOB_ENV} is not YAML: {exc}") from None
    if not isinstance(manifest, dict) or not (manifest.get("metadata") or {}).get("name"):
        raise StepError(f"${TRAINING_JOB_ENV} must hold a training job's manifest with metadata.name (the train "
                        "template sets it: pipelines/train_step.py)")  # fmt: skip
    return manifest


def _reused(cfg: PipelineConfig, args: argparse.Namespace) -> bool:
    """The model of this run's key is in the step cache (recorded by another run): restored into the workspace."""
    from botocore.exceptions import BotoCoreError, ClientError

    target = {"model": workspace.join(args.workspace, "model")}
    try:
        restored = reuse.restore_key_file(args.step_cache, args.rerun, args.workspace, target, cfg.storage.endpoint_url)
    except (BotoCoreError, ClientError, OSError) as exc:  # the store, not this step: retried
        raise StepFailed(f"the step cache or workspace at {args.workspace} could not be read: {exc}") from None
    return restored is not None


def attempt_end(args: argparse.Namespace, now: datetime) -> datetime | None:
    """When Argo ends this attempt for good: the template's activeDeadlineSeconds from now, or `$ARGO_DEADLINE` (the
    retries' maxDuration or the workflow's deadline, argo-workflows v4.1.2 workflow/controller/workflowpod.go
    getDeadline; the zero time when there is none), whichever comes first; None when neither is set."""
    ends = [now + timedelta(seconds=args.attempt_deadline_seconds)] if args.attempt_deadline_seconds else []
    given = os.environ.get(ARGO_DEADLINE_ENV, "")
    if given and not given.startswith("0001-"):
        try:
            ends.append(parse_time(given))
        except ValueError:
            log.warning("$%s %r is not a time; ignored", ARGO_DEADLINE_ENV, given)
    return min(ends) if ends else None


def run(
    cfg: PipelineConfig,
    args: argparse.Namespace,
    api: Any = None,
    stop: StopSignal | None = None,
    now: Callable[[], datetime] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """`api`, `stop`, `now`, `sleep`: the API client (custom objects and pods), SIGTERM and the clock (tests pass
    stand-ins)."""
    manifest = manifest_from_env()
    custom = api if api is not None else in_cluster_api()
    objects = Objects(custom, args.namespace, api if api is not None else core_api())
    budget = cfg.training.job.step_deadline_seconds(cfg.training.backend)
    clock = now or (lambda: datetime.now(UTC))
    jobs = TrainJobs(objects, manifest, budget, args.poll_seconds, now=clock, sleep=sleep,
                     ends=attempt_end(args, clock()))  # fmt: skip
    stop = stop or StopSignal()
    with stop.installed():
        try:
            _place_and_watch(cfg, args, jobs, stop)
        except (StepError, StepFailed, StepStopped):
            raise
        except Exception as exc:  # a defect of this step, not the environment: a retry would fail the same way
            log.exception("the train step failed unexpectedly")
            raise StepError(f"unexpected {type(exc).__name__}: {exc} (not retried; the job, if any, is left as it "
                            "is: `argo retry` re-attaches)") from exc  # fmt: skip


def _place_and_watch(cfg: PipelineConfig, args: argparse.Namespace, jobs: TrainJobs, stop: StopSignal) -> None:
    if _reused(cfg, args):
        jobs.supersede()
        log.info("the model of this training run is in the step cache: restored, nothing trained")
        return
    placed = jobs.place()
    log.info("%s %s: %s", jobs.kind.kind, placed.name, placed.how)
    jobs.watch(placed, stop, args.workflow_name)
    if placed.how == "adopted" and not _reused(cfg, args):
        raise StepError(
            f"{jobs.kind.kind} {placed.name}, another workflow's trainer of this run, ended without a model under "
            "this run's key in the step cache (another configuration with the same run-id?): `argo retry` trains "
            "this one"
        )


STEP = runner.Step("train-job", __doc__, run, _arguments)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
