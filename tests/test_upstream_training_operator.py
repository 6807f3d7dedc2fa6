"""The train step reads a Kubeflow PaddleJob's outcome the way training-operator v1.9.0 reports it,
and nothing leaves a job behind that a person stopped.

Upstream behaviour encoded here (kubeflow/training-operator v1.9.0):
- pkg/util/status.go setCondition/filterOutCondition: one condition per JobConditionType, a changed
  one is appended last, nothing changes once Failed is set, Running turns False on Succeeded/Failed.
- pkg/controller.v1/common/job.go ReconcileJobs: backoffLimit / activeDeadlineSeconds set
  completionTime and the Failed condition in one status write, without recounting replicaStatuses,
  and delete the pods (cleanPodPolicy).
- pkg/controller.v1/common/pod.go ReconcilePods: a Failed pod under restartPolicy OnFailure is
  deleted and recreated (Restarting), yet counted in replicaStatuses.<type>.failed.
- pkg/controller.v1/paddlepaddle/paddlepaddle_controller.go UpdateJobStatus: Succeeded (and
  completionTime) when every Worker, or the Master in PS mode, has succeeded.
The step's judgement: steps/runtime/cluster/job_state.py. Its clean-up (no lifecycle hook; the exit handler's
release-train-jobs; the ownerReference to the Workflow): pipelines/train_step.py, tests/test_upstream_argo_train.py.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.compile import dump
from paddle_mlops_core.config import load_config
from pipelines import paddlejob, train_deploy
from pipelines.job_spec import WORKFLOW_OWNER
from pipelines.platform import rbac
from pipelines.train_step import placed_manifest
from steps.runtime.cluster.job_state import job_state

ARGO = Path(__file__).resolve().parents[1] / "argo"
NOW = "2025-06-01T10:00:00Z"


def _templates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def train_template(text: str) -> dict[str, Any]:
    """The `train` template of a generated train-deploy.yaml."""
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "WorkflowTemplate")
    return _templates(doc)["train"]


def train_manifest(text: str) -> dict[str, Any]:
    """The training job the `train` step of a generated train-deploy.yaml places."""
    manifest = placed_manifest(train_template(text))
    assert manifest is not None, "the train template places no training job"
    return manifest


def verdict(manifest: dict[str, Any], job: dict[str, Any]) -> str:
    """What the train step makes of `job` (a status the operator wrote) for a job of `manifest`'s kind."""
    phase = job_state({**job, "apiVersion": manifest["apiVersion"], "kind": manifest["kind"]}).phase
    return {"queued": "waiting", "running": "waiting"}.get(phase, phase)


# The legacy backend these tests are about (the TrainJob default: tests/test_upstream_trainer.py).
LEGACY = ["training.backend=kubeflow-paddlejob"]


@pytest.fixture(scope="module")
def generated() -> str:
    return dump([train_deploy.build(load_config(overrides=LEGACY)).to_dict()])


def _condition(kind: str, status: str = "True", reason: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason or f"PaddleJob{kind}",
        "message": f"PaddleJob wf-train-x is {kind.lower()}.",
        "lastUpdateTime": NOW,
        "lastTransitionTime": NOW,
    }


def _job(conditions: list[dict[str, Any]], replicas: dict[str, Any], completed: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions, "replicaStatuses": replicas, "startTime": NOW}
    if completed:
        status["completionTime"] = NOW
    return {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {"name": "wf-train-x"}, "status": status}


RUNNING = _condition("Running")
CREATED = _condition("Created")
STOPPED = _condition("Running", "False")

# (name, PaddleJob as the operator leaves it, what the step must do)
SCENARIOS = [
    ("just created, gang-scheduling wait", _job([CREATED], {}), "waiting"),
    ("running", _job([CREATED, RUNNING], {"Worker": {"active": 2}}), "waiting"),
    (
        "worker evicted, operator recreating it (OnFailure)",
        _job([CREATED, _condition("Restarting")], {"Worker": {"active": 1, "failed": 1}}),
        "waiting",
    ),
    (
        "succeeded",
        _job([CREATED, STOPPED, _condition("Succeeded")], {"Worker": {"succeeded": 2}}, completed=True),
        "succeeded",
    ),
    (
        "PS mode: master succeeded, workers still active",
        _job(
            [CREATED, STOPPED, _condition("Succeeded")],
            {"Master": {"succeeded": 1}, "Worker": {"active": 2}},
            completed=True,
        ),
        "succeeded",
    ),
    (
        # Containers crash-looped in place: the pods never reached phase Failed, so failed stays 0.
        "failed: backoffLimit exceeded by in-place restarts",
        _job([CREATED, STOPPED, _condition("Failed")], {"Worker": {"active": 2}}, completed=True),
        "failed",
    ),
    (
        # Status written before the pods were deleted, and never recounted after (job.go).
        "failed: activeDeadlineSeconds, pods deleted",
        _job([CREATED, STOPPED, _condition("Failed")], {"Worker": {}}, completed=True),
        "failed",
    ),
    (
        "failed: deadline passed while still Pending",
        _job([CREATED, _condition("Failed")], {"Worker": {}}, completed=True),
        "failed",
    ),
    (
        "failed: after a restart",
        _job([CREATED, _condition("Restarting", "False"), _condition("Failed")], {"Worker": {"failed": 1}}, True),
        "failed",
    ),
    (
        "failed after Kueue suspended and resumed it",
        _job(
            [CREATED, _condition("Suspended", "False", "PaddleJobResumed"), STOPPED, _condition("Failed")],
            {"Worker": {"active": 2}},
            completed=True,
        ),
        "failed",
    ),
]


def check_train_conditions(manifest: dict[str, Any]) -> list[str]:
    """Scenarios the train step misjudges for a job of `manifest`'s kind (empty when all are right)."""
    wrong = []
    for name, job, expected in SCENARIOS:
        got = verdict(manifest, job)
        if got != expected:
            wrong.append(f"{name}: {got}, expected {expected}")
    return wrong


def test_generated_train_step_judges_the_job_by_its_conditions(generated: str) -> None:
    assert check_train_conditions(train_manifest(generated)) == []


@pytest.mark.parametrize("ps_replicas", [0, 2])
def test_conditions_hold_for_both_topologies(ps_replicas: int) -> None:
    job = paddlejob.build_paddlejob(load_config(overrides=[*LEGACY, f"training.job.ps_replicas={ps_replicas}"]))
    assert check_train_conditions(job.manifest) == []


def _set_condition(conditions: list[dict[str, Any]], kind: str, status: str) -> list[dict[str, Any]]:
    """pkg/util/status.go setCondition + filterOutCondition."""
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions):
        return conditions
    current = next((c for c in conditions if c["type"] == kind), None)
    if current is not None and current["status"] == status:
        return conditions
    kept = []
    for c in conditions:
        if c["type"] == kind or {kind, c["type"]} == {"Running", "Restarting"}:
            continue
        if kind in ("Failed", "Succeeded") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    return [*kept, _condition(kind, status)]


# What the controllers call UpdateJobConditions with before the job ends.
_UPDATES = [
    ("Running", "True"),
    ("Restarting", "True"),
    ("Suspended", "True"),
    ("Suspended", "False"),
    ("Running", "False"),
]


@pytest.mark.parametrize("final", ["Succeeded", "Failed"])
def test_any_condition_history_is_judged_right(final: str) -> None:
    """Every order of condition updates the operator can make (up to four before the end)."""
    job = paddlejob.build_paddlejob(load_config(overrides=LEGACY)).manifest
    for length in range(5):
        for history in itertools.product(_UPDATES, repeat=length):
            conditions = [_condition("Created")]
            for kind, status in history:
                conditions = _set_condition(conditions, kind, status)
            before = {"status": {"conditions": conditions}}
            assert verdict(job, before) == "waiting", history
            ended = {"status": {"conditions": _set_condition(conditions, final, "True"), "completionTime": NOW}}
            expected = "succeeded" if final == "Succeeded" else "failed"
            assert verdict(job, ended) == expected, history


# --- nothing leaves a job behind that a person stopped -------------------------------------------


def check_cleanup(text: str) -> list[str]:
    """What would keep a stopped workflow's training job alive, or delete a healthy one because its waiting pod
    died (empty when nothing does): the train step's job is owned by the Workflow and labelled with it; no task
    running a train step has a lifecycle hook (a succeeded hook keeps `argo retry` from resetting it, argo-workflows
    v4.1.2 workflow/util/util.go FormulateRetryWorkflow, #13184); the exit handler releases the workflow's jobs of
    that kind (steps/release_train_jobs.py)."""
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "WorkflowTemplate")
    templates = _templates(doc)
    problems = []
    manifest = placed_manifest(templates["train"])
    if manifest is None:
        return ["the train template places no training job"]
    meta = manifest["metadata"]
    if meta.get("ownerReferences") != [WORKFLOW_OWNER]:
        problems.append(f"the job is not owned by its Workflow: {meta.get('ownerReferences')}")
    if meta["labels"].get("paddle-mlops/workflow") != "{{workflow.name}}":
        problems.append("the job does not carry its workflow's label")
    trains = {name for name, t in templates.items() if placed_manifest(t) is not None}
    for tmpl in templates.values():
        for task in (tmpl.get("dag") or {}).get("tasks", []):
            if task["template"] in trains and task.get("hooks"):
                problems.append(f"task {task['name']} has lifecycle hooks {sorted(task['hooks'])}")
    handler = templates.get(doc["spec"].get("onExit", ""), {})
    release = ["python", "-m", "steps.release_train_jobs"]
    exit_templates = [templates[t["template"]] for t in (handler.get("dag") or {}).get("tasks", [])]
    releases = [t["container"]["args"] for t in exit_templates if t.get("container", {}).get("command") == release]
    if not releases:
        problems.append("the exit handler does not release the workflow's training jobs")
    for args in releases:
        named = (args[args.index("--job-api") + 1], args[args.index("--job-kind") + 1])
        if named != (manifest["apiVersion"], manifest["kind"]):
            problems.append(f"the exit handler releases {named}, the step creates {manifest['kind']}")
    return problems


def test_nothing_keeps_a_stopped_workflows_job_or_deletes_a_healthy_one(generated: str) -> None:
    assert check_cleanup(generated) == []


def test_the_job_ends_within_the_step_deadline(generated: str) -> None:
    """Even with no exit handler (`argo terminate` runs none), the job's own deadline ends it."""
    train = train_template(generated)
    policy = train_manifest(generated)["spec"]["runPolicy"]
    assert policy["activeDeadlineSeconds"] <= train["activeDeadlineSeconds"]
    # Running/All: when the job fails the operator deletes the pods still running (job.go).
    assert policy["cleanPodPolicy"] in ("Running", "All")


def test_the_workflow_account_may_delete_by_label() -> None:
    """kubectl delete --selector lists, then deletes each job: both verbs on the job's group."""
    cfg = load_config(overrides=LEGACY)
    group = paddlejob.build_paddlejob(cfg).manifest["apiVersion"].split("/")[0]
    verbs = {
        verb
        for rule in rbac.executor_rules(cfg)
        if group in rule["apiGroups"] and "paddlejobs" in rule["resources"]
        for verb in rule["verbs"]
    }
    assert {"list", "delete"} <= verbs, verbs
