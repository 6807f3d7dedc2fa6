"""The Paddle-operator flavour of the train step: its outcome, its cleanup and its init container,
as PaddleFlow/paddle-operator v0.3.5 behaves.

Upstream behaviour encoded here (PaddleFlow/paddle-operator v0.3.5):
- controllers/paddlejob_helper.go getPaddleJobPhase: the only phases set are Pending, Starting,
  Running, Completed, Failed (any pod Failed; final) and Terminating (job being deleted);
  constructPod: restartPolicy Never unless the template sets one (intranet PodIP, not elastic).
- controllers/paddlejob_controller.go Reconcile: a Failed job's pods are all deleted only under
  cleanPodPolicy Always/OnFailure, a Completed job's under ""/Always/OnCompletion; createPod adds
  the `coord-paddle` init container whenever the operator's InitImage is non-empty.
- main.go: `--initImage`, default docker.io/library/alpine:3.10; paddlejob_helper.go
  genCoordinateInitContainer sets no securityContext.
The train step's judgement of the phase: steps/runtime/cluster/job_state.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from paddle_mlops_core.config import ConfigError, PipelineConfig, load_config
from pipelines import paddlejob
from tests.test_upstream_training_operator import verdict

PADDLE = ["training.backend=paddle-operator", "training.job.paddle_operator_init_container=false"]
DEFAULT_INIT_IMAGE = "docker.io/library/alpine:3.10"


def _cfg(*overrides: str) -> PipelineConfig:
    return load_config(overrides=[*PADDLE, *overrides])


def phase(pods: dict[str, list[str]], replicas: dict[str, int], previous: str = "", deleting: bool = False) -> str:
    """getPaddleJobPhase from the pods' phases per resource type ("Running" = all containers ready)."""
    if deleting:
        return "Terminating"
    if previous in ("Completed", "Failed"):
        return previous
    for states in pods.values():
        if "Failed" in states:
            return "Failed"
        if "Starting" in states:
            return "Starting"
        if "Pending" in states:
            return "Pending"
    if pods and all(states.count("Running") == replicas[res] for res, states in pods.items()):
        return "Running"
    if pods and all(states.count("Succeeded") == replicas[res] for res, states in pods.items()):
        return "Completed"
    return previous or "Pending"


SCENARIOS = [
    ("no pods yet", {}, "", False, "waiting"),
    ("pods pending", {"worker": ["Pending", "Pending"]}, "", False, "waiting"),
    ("all running", {"worker": ["Running", "Running"]}, "Pending", False, "waiting"),
    ("one worker done, one running", {"worker": ["Succeeded", "Running"]}, "Running", False, "waiting"),
    ("all succeeded", {"worker": ["Succeeded", "Succeeded"]}, "Running", False, "succeeded"),
    ("a worker failed", {"worker": ["Failed", "Running"]}, "Running", False, "failed"),
    ("a pod past activeDeadlineSeconds", {"worker": ["Failed", "Failed"]}, "Running", False, "failed"),
    ("failed job, pods since deleted", {}, "Failed", False, "failed"),
    ("job deleted while running", {"worker": ["Running", "Running"]}, "Running", True, "failed"),
]


@pytest.mark.parametrize(("name", "pods", "previous", "deleting", "expected"), SCENARIOS)
def test_step_follows_the_phase_the_operator_sets(
    name: str, pods: dict[str, list[str]], previous: str, deleting: bool, expected: str
) -> None:
    job = paddlejob.build_paddlejob(_cfg())
    status = {"status": {"phase": phase(pods, {"worker": 2}, previous, deleting)}}
    assert verdict(job.manifest, status) == expected, name


def cleans(job_phase: str, policy: str) -> bool:
    """Reconcile: does the operator delete the job's pods once it reached `job_phase`?"""
    if job_phase == "Failed":
        return policy in ("Always", "OnFailure")
    if job_phase == "Completed":
        return policy in ("", "Always", "OnCompletion")
    return False


def check_clean_policy(manifest: dict[str, Any]) -> list[str]:
    """Ways the job can keep GPUs busy after it ended (empty when none)."""
    policy = manifest["spec"].get("cleanPodPolicy", "")
    # A Completed job has only Succeeded pods; a Failed one may still run the other workers.
    return [] if cleans("Failed", policy) else [f"cleanPodPolicy {policy!r} leaves a failed job's workers running"]


@pytest.mark.parametrize("clean", ["Running", "All"])
def test_a_failed_job_leaves_no_pod_running(clean: str) -> None:
    manifest = paddlejob.build_paddlejob(_cfg(f"training.job.clean_pod_policy={clean}")).manifest
    assert check_clean_policy(manifest) == []


def test_running_policy_keeps_a_completed_jobs_pods_for_their_logs() -> None:
    manifest = paddlejob.build_paddlejob(_cfg()).manifest
    assert not cleans("Completed", manifest["spec"]["cleanPodPolicy"])


@pytest.mark.parametrize("ps_replicas", [0, 1])
def test_pods_end_by_the_jobs_deadline(ps_replicas: int) -> None:
    """No job deadline exists here: the pods' own (restartPolicy Never, so a deadline is final)."""
    cfg = _cfg(f"training.job.ps_replicas={ps_replicas}")
    spec = paddlejob.build_paddlejob(cfg).manifest["spec"]
    step_deadline = cfg.training.job.schedule_timeout_seconds + cfg.training.job.active_deadline_seconds
    for role in ("worker", "ps")[: 1 + (ps_replicas > 0)]:
        pod = spec[role]["template"]["spec"]
        assert "restartPolicy" not in pod
        assert 0 < pod["activeDeadlineSeconds"] <= step_deadline


# --- the coord-paddle init container ------------------------------------------------------------


def operator_pod(template: dict[str, Any], init_image: str) -> dict[str, Any]:
    """The pod createPod makes from a replica template (constructPod, then the init container)."""
    spec = dict(template["spec"])
    spec.setdefault("restartPolicy", "Never")
    if init_image:
        spec["initContainers"] = [
            *spec.get("initContainers", []),
            {
                "name": "coord-paddle",
                "image": init_image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "for h in ...; do nslookup $h; done"],
                "resources": {"requests": {"cpu": "10m", "memory": "10m"}},
            },
        ]
    return {"metadata": template.get("metadata", {}), "spec": spec}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Pod Security 'restricted' (kubernetes pod-security-admission policy/check_*.go), per container."""
    spec = pod["spec"]
    pod_sc = spec.get("securityContext") or {}
    out = []
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation != false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            out.append(f"{c['name']}: capabilities.drop lacks ALL")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot != true")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
    return out


def test_the_operators_default_init_container_is_refused_by_restricted() -> None:
    template = paddlejob.build_paddlejob(_cfg()).manifest["spec"]["worker"]["template"]
    assert any(v.startswith("coord-paddle:") for v in restricted_violations(operator_pod(template, DEFAULT_INIT_IMAGE)))


def test_with_init_image_off_the_operators_pods_are_restricted() -> None:
    spec = paddlejob.build_paddlejob(_cfg("training.job.ps_replicas=1")).manifest["spec"]
    for role in ("worker", "ps"):
        assert restricted_violations(operator_pod(spec[role]["template"], "")) == [], role


def test_paddle_flavour_is_refused_unless_the_operator_runs_without_init_container() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=["training.backend=paddle-operator"])
    message = str(caught.value)
    for needed in ("configs/pipeline.yaml", "training.backend", "coord-paddle", "restricted", "--initImage="):
        assert needed in message, needed
    assert "paddle_operator_init_container: false" in message and "backend: trainjob" in message
