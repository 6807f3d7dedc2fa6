"""Where a training job is, read from what its operator reports as final — never from pod counts, which also move
while an operator restarts a pod — and whether Kueue has given up on it.

- TrainJob (trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go): conditions `Suspended`, `Complete`, `Failed`,
  one per type. pkg/runtime/framework/plugins/jobset/jobset.go Status() copies the JobSet's Completed/Failed condition
  (reason and message kept: jobset v0.12.0 `FailedJobs`, `ReachedMaxRestarts`, `FailJobSetFailurePolicyAction`), and
  pkg/controller/trainjob_controller.go reconcileDeadline sets `Failed`/`DeadlineExceeded`. Suspended
  (`spec.suspend`: created so, and again whenever Kueue evicts or preempts it) is queued.
- PaddleJob of the training-operator (kubeflow.org/v1): conditions `Succeeded` and `Failed` (pkg/util/status.go).
- PaddleJob of the Paddle operator (batch.paddlepaddle.org/v1): `status.phase`, of which v0.3.5
  controllers/paddlejob_helper.go getPaddleJobPhase sets Pending, Starting, Running, Completed, Failed and Terminating.
- Kueue v0.19.2 deactivates a TrainJob's Workload after `waitForPodsReady.requeuingStrategy.backoffLimitCount`
  requeues (pkg/controller/core/workload_controller.go triggerDeactivation, then Reconcile sets `spec.active: false`
  and evicts it with reason `DeactivatedDueToRequeuingLimitExceeded`, pkg/workload/evict/evict.go), after
  `maximumExecutionTimeSeconds`, or on a rejected admission check. The TrainJob then stays suspended for good: Kueue
  writes no condition onto it (jobframework/reconciler.go stopJob only suspends) and Trainer skips its deadline while
  suspended, so without this a waiting step would wait out its whole deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Phase = Literal["queued", "running", "succeeded", "failed"]


@dataclass(frozen=True)
class JobState:
    phase: Phase
    reason: str = ""
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.phase in ("succeeded", "failed")

    def describe(self) -> str:
        detail = ": ".join(part for part in (self.reason, self.message) if part)
        return f"{self.phase} ({detail})" if detail else self.phase


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def _from(condition: dict[str, Any], phase: Phase) -> JobState:
    return JobState(phase, str(condition.get("reason") or ""), str(condition.get("message") or ""))


def trainjob_state(job: dict[str, Any]) -> JobState:
    if failed := _condition(job, "Failed"):
        return _from(failed, "failed")
    if complete := _condition(job, "Complete"):
        return _from(complete, "succeeded")
    if (job.get("spec") or {}).get("suspend"):
        suspended = _condition(job, "Suspended")
        return _from(suspended, "queued") if suspended else JobState("queued", "Suspended", "waiting for Kueue")
    return JobState("running")


def kubeflow_paddlejob_state(job: dict[str, Any]) -> JobState:
    if failed := _condition(job, "Failed"):
        return _from(failed, "failed")
    if succeeded := _condition(job, "Succeeded"):
        return _from(succeeded, "succeeded")
    return JobState("running") if _condition(job, "Running") else JobState("queued", "", "not running yet")


_PADDLE_PHASES: dict[str, Phase] = {
    "Completed": "succeeded",
    "Failed": "failed",
    "Terminating": "failed",
    "Running": "running",
    "Starting": "running",
}


def paddle_operator_state(job: dict[str, Any]) -> JobState:
    phase = str((job.get("status") or {}).get("phase") or "Pending")
    return JobState(_PADDLE_PHASES.get(phase, "queued"), phase)


_JUDGES = {
    ("trainer.kubeflow.org", "TrainJob"): trainjob_state,
    ("kubeflow.org", "PaddleJob"): kubeflow_paddlejob_state,
    ("batch.paddlepaddle.org", "PaddleJob"): paddle_operator_state,
}


def job_state(job: dict[str, Any]) -> JobState:
    """The state of a training job of any backend this project creates."""
    group = str(job.get("apiVersion", "")).partition("/")[0]
    judge = _JUDGES.get((group, str(job.get("kind"))))
    if judge is None:
        raise ValueError(f"{job.get('apiVersion')} {job.get('kind')} is not a training job this project creates")
    return judge(job)


def deactivated(workloads: list[dict[str, Any]]) -> JobState | None:
    """`failed` when Kueue (or a person) deactivated the job's Workload (`spec.active: false`), with the reason and
    message of its `Evicted` condition, e.g. `DeactivatedDueToRequeuingLimitExceeded: The workload is deactivated
    due to exceeding the maximum number of re-queuing retries`; None while it is active."""
    for workload in workloads:
        if (workload.get("spec") or {}).get("active", True) is not False:
            continue
        evicted = _condition(workload, "Evicted") or {"reason": "Deactivated", "message": "spec.active is false"}
        name = workload.get("metadata", {}).get("name", "?")
        return JobState(
            "failed",
            str(evicted.get("reason") or "Deactivated"),
            f"Kueue deactivated Workload {name}: {evicted.get('message') or 'spec.active is false'}",
        )
    return None
