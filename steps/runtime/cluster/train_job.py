"""The train step on the cluster: put the run's training job in place, then watch it to its end — as one Argo node
that any number of attempts, `argo retry`s and lost pods can run again without losing or doubling the job.

Placing (`TrainJobs.place`), under the deterministic name the manifest carries (`<workflow>-train[-<task>]`):
- another live training job of the same training run (the `paddle-mlops/train-run` label: the prefix its
  checkpoints are kept under), e.g. one a terminated workflow left running, is adopted — watched instead of
  started beside it, and owned by this workflow too: two trainers of one run would resume from and prune each other's
  checkpoints;
- else, once nothing of an earlier trainer of the run is left (no pod of the run still running or terminating — a
  job deleted in the background leaves its pods their grace period, in which they checkpoint — and no JobSet of this
  name, which a new TrainJob of the same name would take over), create; AlreadyExists means this step made it before
  (an earlier attempt, or one whose create reached the API server but whose answer was lost): reuse it while it is
  queued, running or done; delete it and create it again when it failed (or Kueue deactivated it) in an earlier
  attempt — it resumes from the run's checkpoints. NotFound (an attempt that ended before its create) simply creates.
Watching (`TrainJobs.watch`): poll the job and, for a TrainJob, its Kueue Workload, until it succeeds (return), fails
or is deactivated (StepError: exit 2, not retried; the job is kept for its logs, the next attempt replaces it), or
outlives the step's budget from its creation, or the step's own time (Argo's deadline for the attempt): deleted, it
would hold or claim GPUs nobody waits for.
SIGTERM: when the workflow is being stopped by a person or its deadline (workflow_stop.py), or the step's own time is
up, delete the job; otherwise this pod is being evicted, drained or shut down: leave the job alone, exit 143, and the
next attempt re-attaches.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from paddle_mlops_core.contracts import TRAIN_RUN_LABEL, WORKFLOW_LABEL
from steps.runtime.cluster.job_state import JobState, deactivated, job_state
from steps.runtime.cluster.objects import (
    JOB_UID_LABEL,
    JOBSET,
    JOBSET_NAME_LABEL,
    WORKFLOW,
    WORKLOAD,
    AlreadyExists,
    Kind,
    Objects,
    deleting,
    name_of,
)
from steps.runtime.cluster.workflow_stop import parse_time, stop_reason
from steps.runtime.runner import StepError, StepFailed, StepStopped

log = logging.getLogger("steps.train_job")

TRAINJOB = "TrainJob"
# How long an earlier trainer's remains (its pods in their grace period, its JobSet) may take to go before this attempt
# gives up and the next one looks again: the training pods' grace period and then some.
DELETION_TIMEOUT_SECONDS = 600.0
# How long before the step's own end (Argo's deadline for the attempt) it stops watching and releases the job: the
# job must not outlive the last attempt's kill unwatched.
ATTEMPT_END_MARGIN_SECONDS = 60.0
# A SIGTERM this close to that end is the end: Argo starts no further attempt once the backoff (capped at 2 minutes,
# pipelines/train_step.py) would end past the retries' maxDuration (operator.go processNodeRetries: "Backoff would
# exceed max duration limit"), so nothing would re-attach to the job.
LAST_RETRY_WINDOW_SECONDS = 300.0


class StopSignal:
    """SIGTERM for this process, as an event the watch loop waits on (so it wakes at once)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> None:
        self.event.wait(max(0.0, seconds))

    @contextmanager
    def installed(self) -> Iterator[StopSignal]:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: self.event.set())
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class Placed:
    """The job this attempt watches and how it came to: created, reused, recreated (a failed one replaced) or
    adopted (another live trainer of the same run)."""

    job: dict[str, Any]
    how: Literal["created", "reused", "recreated", "adopted"]

    @property
    def name(self) -> str:
        return name_of(self.job)


class TrainJobs:
    """The run's training job (`manifest`) in `objects`' namespace: place it, judge it, watch it."""

    def __init__(
        self,
        objects: Objects,
        manifest: dict[str, Any],
        budget_seconds: int,
        poll_seconds: float = 10.0,
        now: Callable[[], datetime] | None = None,
        sleep: Callable[[float], None] | None = None,
        ends: datetime | None = None,
    ) -> None:
        """`now`, `sleep`: the clock (default: the system's; tests pass the stand-in's). `ends`: when Argo ends this
        attempt for good (its deadline, the retries' maxDuration, the workflow's deadline); None: never."""
        self.objects, self.manifest = objects, manifest
        self.kind = Kind.of(manifest)
        self.name = str(manifest["metadata"]["name"])
        self.run = (manifest["metadata"].get("labels") or {}).get(TRAIN_RUN_LABEL)
        self.budget = timedelta(seconds=budget_seconds)
        self.poll = poll_seconds
        self.now: Callable[[], datetime] = now or (lambda: datetime.now(UTC))
        self.sleep: Callable[[float], None] = sleep or time.sleep
        self.ends = ends

    # -- placing ---------------------------------------------------------------------------------

    def place(self) -> Placed:
        """Create the job, or reuse what an earlier attempt made (module docstring)."""
        other = self.live_trainer_of_run()
        if other is not None:
            return Placed(self.own(other), "adopted")
        replaced = False
        for _ in range(3):
            self.wait_released()
            try:
                return Placed(self.objects.create(self.kind, self.manifest), "recreated" if replaced else "created")
            except AlreadyExists:
                pass
            found = self.objects.get(self.kind, self.name)
            if found is None:  # deleted between the create and the get: create again
                continue
            theirs = (found["metadata"].get("labels") or {}).get(TRAIN_RUN_LABEL)
            if theirs != self.run:
                raise StepError(
                    f"{self.kind.kind} {self.name} trains another run ({theirs}) than this step ({self.run}): does one "
                    "finetune-batch list the same task twice? Each task may run once per batch"
                )
            state = self.state(found)
            if state.phase != "failed" and not deleting(found):
                return Placed(found, "reused")
            if state.phase == "failed":
                log.warning("%s %s failed in an earlier attempt (%s): deleting it and creating it again; it "
                            "resumes from the run's newest checkpoint", self.kind.kind, self.name,
                            state.describe())  # fmt: skip
                self.objects.delete(self.kind, self.name)
                replaced = True
            self.objects.wait_gone(self.kind, self.name, DELETION_TIMEOUT_SECONDS, sleep=self.sleep)
        raise StepFailed(f"{self.kind.kind} {self.name} kept appearing and disappearing while it was being created")

    def wait_released(self) -> None:
        """Until nothing of an earlier trainer of this run (or of a job of this name) is left: no pod of it still
        running or terminating (after a background deletion they have their grace period, in which they write their
        stop checkpoint) and, for a TrainJob, no JobSet of this name (a new TrainJob of the same name would take it
        over: trainer v2.3.0 plugins/jobset/jobset.go Build applies onto the JobSet of its name)."""
        selector = f"{TRAIN_RUN_LABEL}={self.run}" if self.run else f"{JOBSET_NAME_LABEL}={self.name}"
        waited, said = 0.0, False
        while True:
            pods = self.objects.running_pods(selector)
            jobset = self.objects.get(JOBSET, self.name) if self.kind.kind == TRAINJOB else None
            if not pods and jobset is None:
                return
            if waited >= DELETION_TIMEOUT_SECONDS:
                left = f"pods {', '.join(pods) or '-'}, JobSet {self.name if jobset else '-'}"
                raise StepFailed(f"an earlier trainer of this run is still going after {waited:.0f} s ({left}); "
                                 "retrying")  # fmt: skip
            if not said:
                log.info("waiting for an earlier trainer of this run to be gone before starting one (pods %s%s)",
                         ", ".join(pods) or "-", f", JobSet {self.name}" if jobset else "")  # fmt: skip
                said = True
            self.sleep(5.0)
            waited += 5.0

    def own(self, job: dict[str, Any]) -> dict[str, Any]:
        """`job` owned by this workflow too (beside the one that made it, not as its controller: an object has one),
        so deleting that workflow does not delete the job this one watches."""
        ours = [dict(o, controller=False) for o in self.manifest["metadata"].get("ownerReferences") or []]
        theirs = list(job["metadata"].get("ownerReferences") or [])
        missing = [o for o in ours if o.get("uid") not in {t.get("uid") for t in theirs}]
        if not missing:
            return job
        return self.objects.patch(self.kind, name_of(job), {"metadata": {"ownerReferences": theirs + missing}})

    def live_trainer_of_run(self) -> dict[str, Any] | None:
        """Another job of this training run that is still queued or running (not this workflow's own)."""
        if not self.run:
            return None
        for job in self.objects.select(self.kind, f"{TRAIN_RUN_LABEL}={self.run}"):
            if name_of(job) == self.name or deleting(job) or self.state(job).finished:
                continue
            owner = (job["metadata"].get("labels") or {}).get(WORKFLOW_LABEL, "?")
            log.warning("%s %s of workflow %s is training this run (%s) and no longer waited on: watching it instead "
                        "of starting a second trainer", self.kind.kind, name_of(job), owner, self.run)  # fmt: skip
            return job
        return None

    def state(self, job: dict[str, Any]) -> JobState:
        """The job's state; a TrainJob whose Kueue Workload was deactivated counts as failed."""
        state = job_state(job)
        uid = job.get("metadata", {}).get("uid")
        if state.finished or self.kind.kind != TRAINJOB or not uid:
            return state
        return deactivated(self.objects.select(WORKLOAD, f"{JOB_UID_LABEL}={uid}")) or state

    # -- watching --------------------------------------------------------------------------------

    def watch(self, placed: Placed, stop: StopSignal, workflow: str) -> JobState:
        """Until the job succeeds (its state); StepError when it fails or outlives the budget, StepStopped on
        SIGTERM (module docstring)."""
        name, job = placed.name, placed.job
        budget_end = parse_time(job["metadata"]["creationTimestamp"]) + self.budget
        deadline = min(budget_end, self.last_moment()) if self.ends else budget_end
        last: JobState | None = None
        while True:
            if stop.requested:
                self.stopped(name, workflow)
            state = self.state(job)
            if state != last:
                log.info("%s %s: %s", self.kind.kind, name, state.describe())
                last = state
            if state.phase == "succeeded":
                return state
            if state.phase == "failed":
                raise StepError(
                    f"{self.kind.kind} {name} failed: {state.reason}: {state.message}. It is kept for its logs "
                    f"(kubectl describe {self.kind.plural}.{self.kind.group} {name}); `argo retry` replaces it and "
                    "resumes from the run's newest checkpoint"
                )
            left = (deadline - self.now()).total_seconds()
            if left <= 0:
                self.objects.delete(self.kind, name)
                where = "still queued in Kueue" if state.phase == "queued" else "still running"
                if deadline < budget_end:
                    raise StepError(f"Argo ends the train step at {self.ends:%Y-%m-%dT%H:%M:%SZ} (its deadline) with "
                                    f"{self.kind.kind} {name} {where}: deleted it, so that nothing trains unwatched. "
                                    "Its checkpoints stay; `argo retry` resumes")  # fmt: skip
                raise StepError(
                    f"{self.kind.kind} {name} was {where} {self.budget.total_seconds():.0f} s after it was created, "
                    "past the train step's deadline (training.job.queue_timeout_seconds + active_deadline_seconds): "
                    "deleted it. Raise the deadlines, or see `paddle-mlops queue` for why it waits"
                )
            stop.wait(min(self.poll, left))
            if stop.requested:
                continue
            found = self.objects.get(self.kind, name)
            if found is None:
                raise StepError(
                    f"{self.kind.kind} {name} was deleted while this step watched it (by kubectl delete, or by Kueue's "
                    "objectRetentionPolicies.workloads.afterDeactivatedByKueue): `argo retry` creates it again and it "
                    "resumes from the run's newest checkpoint"
                )
            job = found

    def stopped(self, name: str, workflow: str) -> None:
        """SIGTERM: delete the job when the workflow is ending (a person, its deadline); StepStopped either way."""
        reason = None
        if self.ends and self.now() >= self.ends - timedelta(seconds=LAST_RETRY_WINDOW_SECONDS):
            reason = "the train step's time is up (Argo retries nothing this close to its deadline)"
        try:
            reason = reason or stop_reason(self.objects.get(WORKFLOW, workflow), self.now())
        except (StepError, StepFailed) as exc:  # unknown: never delete a job on a guess
            log.warning("could not read workflow %s to tell a stop from an eviction (%s); leaving %s alone", workflow,
                        exc, name)  # fmt: skip
        if reason:
            self.objects.delete(self.kind, name)
            raise StepStopped(f"{reason}: deleted {self.kind.kind} {name}")
        raise StepStopped(
            f"SIGTERM while workflow {workflow} runs (this pod is being evicted, drained or shut down): "
            f"{self.kind.kind} {name} goes on, and the next attempt of this step re-attaches to it"
        )

    def last_moment(self) -> datetime:
        """When this attempt stops watching for good: a margin before Argo ends it (`ends`)."""
        assert self.ends is not None
        return self.ends - timedelta(seconds=ATTEMPT_END_MARGIN_SECONDS)

    def supersede(self) -> None:
        """The model is already in the step cache: a live job of this workflow's would only train it again."""
        found = self.objects.get(self.kind, self.name)
        if found is not None and not deleting(found) and not self.state(found).finished:
            log.warning("the step cache holds this run's model now: deleting %s %s", self.kind.kind, self.name)
            self.objects.delete(self.kind, self.name)
