"""What a TrainJob does when a training pod fails: the Job's pod failure policy and the JobSet's failure policy.

Kubeflow Trainer's shipped runtimes set no JobSet failure policy, and without one JobSet fails the whole JobSet on the
first failed child Job (jobset v0.12.0 pkg/controllers/failure_policy.go executeFailurePolicy); a TrainJob cannot set
it (trainer v2.3.0 JobSetSpecPatch exposes `replicatedJobs` only), so it lives in our ClusterTrainingRuntime. Every
restart resumes from the run's checkpoints (steps/runtime/training/checkpoint_policy.py), so a restart costs at most
one checkpoint
interval, not the run.

Two layers, because JobSet only sees Jobs:
1. The Job (backoffLimit 0, restartPolicy Never) classifies a failed pod (kubernetes pkg/controller/job/
   pod_failure_policy.go matchPodFailurePolicy, rules in order, first match wins):
   - a pod with condition DisruptionTarget (evicted, preempted by the scheduler, drained, its node lost: the
     eviction API, the taint manager, the kubelet and PodGC set it) -> FailJob, reason `PodFailurePolicy`, message
     "Pod <ns>/<pod> has condition DisruptionTarget matching FailJob rule at index 0";
   - the container `node` exiting `EXIT_FATAL` (bad configuration or data: the same on every attempt) -> FailJob,
     message "Container node for pod <ns>/<pod> failed with exit code 2 matching FailJob rule at index 1";
   - exiting `EXIT_TERMINATED` (stopped by SIGTERM after its checkpoint, e.g. a peer's pod was evicted and the
     gang agreed to stop) -> Ignore: not counted against backoffLimit; the disrupted peer fails the Job, or, with no
     disruption (a pod deleted by hand), the Job replaces the pod and the run resumes;
   - anything else (a crash, an OOM kill) counts against backoffLimit 0: reason `BackoffLimitExceeded`.
2. The JobSet (rules in order, first match by reason and message pattern; no match -> RestartJobSet):
   - `Disruption` -> RestartJobSetAndIgnoreMaxRestarts: a node drain or preemption does not use up the budget;
   - `FatalExitCode` -> FailJobSet: no restart loop on bad input; the TrainJob fails and the train step with it;
   - `Crash` (BackoffLimitExceeded) -> RestartJobSet, counted against `maxRestarts` (`training.job.backoff_limit`).
   `restartStrategy: BlockingRecreate` recreates the Jobs only once every pod of the previous attempt is gone, so two
   gangs never meet at a rendezvous, hold GPUs at once or write the same run's checkpoints together.
"""

from __future__ import annotations

from typing import Any

from paddle_mlops_core.contracts import EXIT_FATAL, EXIT_TERMINATED

# kubernetes pkg/apis/batch/types.go (k8s.io/api batch/v1): the Job condition reasons JobSet matches on.
REASON_POD_FAILURE_POLICY = "PodFailurePolicy"
REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
DISRUPTION_TARGET = "DisruptionTarget"
# The messages the Job controller writes for a FailJob rule (pkg/controller/job/pod_failure_policy.go); JobSet's
# onJobFailureMessagePatterns are RE2 regular expressions matched anywhere in them (failure_policy.go anyMatchFound).
DISRUPTION_MESSAGE = f"has condition {DISRUPTION_TARGET} matching FailJob rule"
FATAL_MESSAGE = f"failed with exit code {EXIT_FATAL} matching FailJob rule"


def pod_failure_policy(container: str) -> dict[str, Any]:
    """The Job's podFailurePolicy for the training container `container` (module docstring, layer 1)."""

    def exit_code(code: int) -> dict[str, Any]:
        return {"containerName": container, "operator": "In", "values": [code]}

    return {
        "rules": [
            {"action": "FailJob", "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}]},
            {"action": "FailJob", "onExitCodes": exit_code(EXIT_FATAL)},
            {"action": "Ignore", "onExitCodes": exit_code(EXIT_TERMINATED)},
        ]
    }


def jobset_failure_policy(max_restarts: int) -> dict[str, Any]:
    """The JobSet's failurePolicy (module docstring, layer 2). Rule names: letters, digits, `_,:` (jobset's regex)."""
    return {
        "maxRestarts": max_restarts,
        "restartStrategy": "BlockingRecreate",
        "rules": [
            {"name": "Disruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
             "onJobFailureReasons": [REASON_POD_FAILURE_POLICY], "onJobFailureMessagePatterns": [DISRUPTION_MESSAGE]},
            {"name": "FatalExitCode", "action": "FailJobSet",
             "onJobFailureReasons": [REASON_POD_FAILURE_POLICY], "onJobFailureMessagePatterns": [FATAL_MESSAGE]},
            {"name": "Crash", "action": "RestartJobSet", "onJobFailureReasons": [REASON_BACKOFF_LIMIT]},
        ],
    }  # fmt: skip
