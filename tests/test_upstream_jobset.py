"""What the training runtime's restart policy does when pods fail, as the Job controller and JobSet decide it.

Upstream behaviour encoded here:
- kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy: a failed pod is matched against the
  rules in order, onExitCodes on containers that terminated with a non-zero code (In: any value matches), then
  onPodConditions (type and status); FailJob fails the Job with reason `PodFailurePolicy` (k8s.io/api batch/v1
  JobReasonPodFailurePolicy) and the message "Container <c> for pod <ns>/<pod> failed with exit code <n> matching
  FailJob rule at index <i>" or "Pod <ns>/<pod> has condition <type> matching FailJob rule at index <i>"; Ignore does
  not count the pod; no match counts it. pkg/controller/job/job_controller.go: every failed pod is checked for a
  FailJob rule before the backoff limit (getFailJobMessage, then pastBackoffLimit): counted failures beyond
  `backoffLimit` fail the Job with reason `BackoffLimitExceeded`. The rules need restartPolicy Never.
- jobset v0.12.0 pkg/controllers/failure_policy.go executeFailurePolicy: no failurePolicy -> the JobSet fails on the
  first failed Job (FailedJobs); else the first rule whose onJobFailureReasons holds the Job's Failed reason and one
  of whose onJobFailureMessagePatterns (regexp.MatchString: found anywhere) matches its message; no rule -> the
  default RestartJobSet. RestartJobSet fails the JobSet (ReachedMaxRestarts) once restartsCountTowardsMax reached
  maxRestarts, else restarts and counts; RestartJobSetAndIgnoreMaxRestarts restarts without counting; FailJobSet
  fails it. api/jobset/v1alpha2/jobset_types.go: restartStrategy BlockingRecreate, rule names.
- trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go: a TrainJob's runtimePatches reach the JobSet spec's
  replicatedJobs only, and a Job only through its pod template: the failure policies are the runtime's alone
  (pkg/runtime/framework/plugins/jobset/jobset.go Build starts from the runtime's template spec).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops.compile import default_compile_config
from paddle_mlops_core.contracts import EXIT_FATAL, EXIT_TERMINATED
from pipelines import restart_policy, trainjob

SCHEMAS = Path(__file__).parent / "schemas"


@dataclass
class Pod:
    """A failed pod: its container's exit code (None: never ran), and its conditions."""

    exit_code: int | None
    conditions: tuple[str, ...] = ()
    name: str = "wf-train-node-0-0-x"
    container: str = "node"


def _match(policy: dict[str, Any] | None, pod: Pod) -> tuple[str, str] | None:
    """(action, FailJob message) of the first rule the pod matches (pod_failure_policy.go), None: no rule."""
    for index, rule in enumerate((policy or {}).get("rules", [])):
        codes, patterns = rule.get("onExitCodes"), rule.get("onPodConditions")
        if codes:
            named = codes.get("containerName", pod.container) == pod.container
            hit = bool(pod.exit_code) and named and (pod.exit_code in codes["values"]) == (codes["operator"] == "In")
            message = f"Container {pod.container} for pod ns/{pod.name} failed with exit code {pod.exit_code}"
        else:
            kinds = [c["type"] for c in patterns or [] if c["status"] == "True" and c["type"] in pod.conditions]
            hit, message = bool(kinds), f"Pod ns/{pod.name} has condition {kinds[0] if kinds else ''}"
        if hit:
            return rule["action"], f"{message} matching {rule['action']} rule at index {index}"
    return None


def job_failure(policy: dict[str, Any] | None, backoff_limit: int, pods: list[Pod]) -> tuple[str, str] | None:
    """(reason, message) of the Job's Failed condition after these pods failed, None while it lives on: a FailJob
    rule of any failed pod first (getFailJobMessage), then the count against backoffLimit (job_controller.go)."""
    matches = [_match(policy, pod) for pod in pods]
    for match in matches:
        if match and match[0] == "FailJob":
            return "PodFailurePolicy", match[1]
    counted = sum(1 for match in matches if not match or match[0] == "Count")
    if counted > backoff_limit:
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    return None


@dataclass
class JobSet:
    failure_policy: dict[str, Any] | None
    restarts: int = 0
    restarts_counted: int = 0
    failed: str | None = None  # the Failed condition's reason
    history: list[str] = field(default_factory=list)

    def job_failed(self, reason: str, message: str) -> None:
        """failure_policy.go executeFailurePolicy for one failed child Job."""
        policy = self.failure_policy
        if policy is None:
            self.failed = "FailedJobs"
            return
        rule = next((r for r in policy.get("rules", []) if _applies(r, reason, message)), None)
        action = rule["action"] if rule else "RestartJobSet"
        self.history.append(rule["name"] if rule else "default")
        if action == "FailJobSet":
            self.failed = "FailJobSetAction"
        elif action == "RestartJobSet" and self.restarts_counted >= policy.get("maxRestarts", 0):
            self.failed = "ReachedMaxRestarts"
        else:
            self.restarts += 1
            self.restarts_counted += action == "RestartJobSet"


def _applies(rule: dict[str, Any], reason: str, message: str) -> bool:
    reasons, patterns = rule.get("onJobFailureReasons") or [], rule.get("onJobFailureMessagePatterns") or []
    return (not reasons or reason in reasons) and (not patterns or any(re.search(p, message) for p in patterns))


@pytest.fixture(scope="module")
def runtime() -> dict[str, Any]:
    return trainjob.cluster_training_runtime(default_compile_config())


def _policies(runtime: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], int]:
    spec = runtime["spec"]["template"]["spec"]
    (node,) = spec["replicatedJobs"]
    job = node["template"]["spec"]
    return spec["failurePolicy"], job.get("podFailurePolicy"), job["backoffLimit"]


def attempt(jobset: JobSet, pod_policy: dict[str, Any] | None, backoff: int, pods: list[Pod]) -> None:
    """One attempt of the gang that ends with these pods failed; the JobSet reacts if the Job failed."""
    failure = job_failure(pod_policy, backoff, pods)
    if failure and not jobset.failed:
        jobset.job_failed(*failure)


EVICTED = [Pod(EXIT_TERMINATED, ("DisruptionTarget",)), Pod(EXIT_TERMINATED, name="wf-train-node-0-1-y")]
CRASHED = [Pod(1)]
OOM_KILLED = [Pod(137)]
BAD_CONFIG = [Pod(EXIT_FATAL), Pod(241, name="wf-train-node-0-1-y")]


def test_disruptions_restart_the_gang_without_using_up_max_restarts(runtime: dict[str, Any]) -> None:
    jobset_policy, pod_policy, backoff = _policies(runtime)
    jobset = JobSet(jobset_policy)
    for _ in range(10):  # ten node drains, evictions or preemptions: never the end of the run
        attempt(jobset, pod_policy, backoff, EVICTED)
    assert (jobset.failed, jobset.restarts, jobset.restarts_counted) == (None, 10, 0)
    assert set(jobset.history) == {"Disruption"}


def test_the_peers_of_an_evicted_pod_stopping_cleanly_are_not_counted_first(runtime: dict[str, Any]) -> None:
    """The gang stops together on SIGTERM (exit 143). When the Job controller sees a peer's pod fail before the
    evicted one has terminated, that pod is ignored (without the Ignore rule it would exceed backoffLimit 0 and
    count a restart); once the evicted pod fails, its DisruptionTarget decides."""
    _, pod_policy, backoff = _policies(runtime)
    peer = Pod(EXIT_TERMINATED, name="wf-train-node-0-1-y")
    assert job_failure(pod_policy, backoff, [peer]) is None
    reason, message = job_failure(pod_policy, backoff, [peer, Pod(EXIT_TERMINATED, ("DisruptionTarget",))])
    assert reason == "PodFailurePolicy" and "has condition DisruptionTarget" in message
    without_ignore = {"rules": pod_policy["rules"][:2]}
    assert job_failure(without_ignore, backoff, [peer])[0] == "BackoffLimitExceeded"


def test_a_crash_or_an_oom_kill_is_restarted_up_to_max_restarts(runtime: dict[str, Any]) -> None:
    jobset_policy, pod_policy, backoff = _policies(runtime)
    jobset = JobSet(jobset_policy)
    for pods in (CRASHED, OOM_KILLED, EVICTED, CRASHED):
        attempt(jobset, pod_policy, backoff, pods)
    assert (jobset.failed, jobset.restarts, jobset.restarts_counted) == (None, 4, 3)
    attempt(jobset, pod_policy, backoff, CRASHED)
    assert jobset.failed == "ReachedMaxRestarts" and jobset_policy["maxRestarts"] == 3
    assert jobset.history == ["Crash", "Crash", "Disruption", "Crash", "Crash"]


def test_the_fatal_exit_code_fails_the_run_without_a_restart(runtime: dict[str, Any]) -> None:
    """A worker that failed on bad configuration or data exits EXIT_FATAL through steps.runtime.training.launch, even
    when
    Paddle's launcher terminated its peers (241): no restart loop."""
    jobset_policy, pod_policy, backoff = _policies(runtime)
    jobset = JobSet(jobset_policy)
    attempt(jobset, pod_policy, backoff, BAD_CONFIG)
    assert (jobset.failed, jobset.restarts, jobset.history) == ("FailJobSetAction", 0, ["FatalExitCode"])


def test_without_our_rules_a_drain_ends_the_run(runtime: dict[str, Any]) -> None:
    """What the policy replaced: Trainer's shipped runtimes (none: the first failed Job fails the JobSet), and
    maxRestarts alone (every disruption counted: four drains and the run is over)."""
    _, pod_policy, backoff = _policies(runtime)
    shipped = JobSet(None)
    attempt(shipped, None, 0, EVICTED)
    assert shipped.failed == "FailedJobs"
    counted = JobSet({"maxRestarts": 3})
    for _ in range(4):
        attempt(counted, None, 0, EVICTED)
    assert counted.failed == "ReachedMaxRestarts"


def test_the_runtime_carries_the_policy_the_way_the_apis_require(runtime: dict[str, Any]) -> None:
    jobset_policy, pod_policy, _ = _policies(runtime)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it (the API server refuses the Job otherwise)
    assert pod["terminationGracePeriodSeconds"] == default_compile_config().training.checkpoint.grace_seconds
    assert jobset_policy["restartStrategy"] == "BlockingRecreate"  # no two gangs at once
    assert all(re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", r["name"]) for r in jobset_policy["rules"])
    assert pod_policy == restart_policy.pod_failure_policy("node")
    assert [c["name"] for c in pod["containers"]] == ["node"]  # the container the exit-code rules name


def _properties(schema: dict[str, Any], *path: str) -> set[str]:
    node = schema
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    return set(node.get("properties", {}))


def test_a_trainjob_cannot_override_the_failure_policy() -> None:
    schema = json.loads((SCHEMAS / "trainjob-trainer.kubeflow.org-v1alpha1.json").read_text())["schema"]
    patch = ("spec", "runtimePatches", "[]", "trainingRuntimeSpec", "template", "spec")
    assert _properties(schema, *patch) == {"replicatedJobs"}  # no failurePolicy
    assert _properties(schema, *patch, "replicatedJobs", "[]", "template", "spec") == {"template"}  # no Job fields
