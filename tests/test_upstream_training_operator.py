"""The train step reads a Kubeflow PaddleJob's outcome the way training-operator v1.9.0 reports it,
and a job whose step ended unsuccessfully is deleted.

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
Argo's evaluation of the conditions: tests/argo_conditions.py (argo-workflows v4.1.2
workflow/executor/resource.go). The exit hook: argo-workflows v4.1.2 workflow/controller/dag.go and
exit_handler.go (runOnExitNode), workflow/executor/resource.go getKubectlArguments.
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
from pipelines.platform import rbac
from tests.argo_conditions import SelectorError, parse, verdict
from tests.expr_lang import evaluate

ARGO = Path(__file__).resolve().parents[1] / "argo"
NOW = "2025-06-01T10:00:00Z"


def _templates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def train_template(text: str) -> dict[str, Any]:
    """The `train` template of a generated train-deploy.yaml."""
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "WorkflowTemplate")
    return _templates(doc)["train"]


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


def check_train_conditions(train: dict[str, Any]) -> list[str]:
    """Scenarios the train template's conditions misjudge (empty when all are right)."""
    resource = train["resource"]
    wrong = []
    for name, job, expected in SCENARIOS:
        got = verdict(resource.get("successCondition", ""), resource.get("failureCondition", ""), job)
        if got != expected:
            wrong.append(f"{name}: {got}, expected {expected}")
    return wrong


def test_generated_train_step_judges_the_job_by_its_conditions(generated: str) -> None:
    assert check_train_conditions(train_template(generated)) == []


@pytest.mark.parametrize("ps_replicas", [0, 2])
def test_conditions_hold_for_both_topologies(ps_replicas: int) -> None:
    job = paddlejob.build_paddlejob(load_config(overrides=[*LEGACY, f"training.job.ps_replicas={ps_replicas}"]))
    train = {"resource": {"successCondition": job.success_condition, "failureCondition": job.failure_condition}}
    assert check_train_conditions(train) == []


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
    job = paddlejob.build_paddlejob(load_config(overrides=LEGACY))
    for length in range(5):
        for history in itertools.product(_UPDATES, repeat=length):
            conditions = [_condition("Created")]
            for kind, status in history:
                conditions = _set_condition(conditions, kind, status)
            before = {"status": {"conditions": conditions}}
            assert verdict(job.success_condition, job.failure_condition, before) == "waiting", history
            ended = {"status": {"conditions": _set_condition(conditions, final, "True"), "completionTime": NOW}}
            expected = "succeeded" if final == "Succeeded" else "failed"
            assert verdict(job.success_condition, job.failure_condition, ended) == expected, history


def test_argo_cannot_query_the_conditions_array() -> None:
    """Why the conditions list positions: a gjson array query is no label key (labels.Parse fails)."""
    with pytest.raises(SelectorError):
        parse('status.conditions.#(type=="Failed").status == True')
    with pytest.raises(SelectorError):
        parse("status.conditions.#(type==Failed).status")
    assert parse("status.conditions.3.type == Failed")[0].key == "status.conditions.3.type"


# --- a job whose step ended unsuccessfully is deleted ------------------------------------------


def _kubectl_args(resource: dict[str, Any]) -> list[str]:
    """workflow/executor/resource.go getKubectlArguments, for action delete."""
    args = ["kubectl", resource["action"]]
    output = "json"
    if resource["action"] == "delete":
        args.append("--ignore-not-found")
        output = "name"
    manifest = resource.get("manifest") or ""
    if not manifest and not resource.get("flags"):
        raise AssertionError("Argo refuses a resource template with neither flags nor manifest")
    args += resource.get("flags") or []
    if manifest:
        args += ["-f", "manifest.yaml"]
    return [*args, "-o", output]


def _matches(selector: str, labels: dict[str, str]) -> bool:
    return all(r.matches(labels) for r in parse(selector))


def check_cleanup(text: str) -> list[str]:
    """What keeps a train step's PaddleJob alive after the step failed (empty when nothing does)."""
    doc = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "WorkflowTemplate")
    templates = _templates(doc)
    problems = []
    manifest = yaml.safe_load(templates["train"]["resource"]["manifest"])
    resource = f"{manifest['kind'].lower()}s.{manifest['apiVersion'].split('/')[0]}"
    tasks = [
        t for tmpl in templates.values() for t in (tmpl.get("dag") or {}).get("tasks", []) if t["template"] == "train"
    ]
    if not tasks:
        problems.append("no task runs the train template")
    for task in tasks:
        hook = (task.get("hooks") or {}).get("exit")
        if not hook:
            problems.append(f"task {task['name']} has no exit hook")
            continue
        expression = hook.get("expression")
        # It must fire for every phase that can leave a job behind, and for no other: Succeeded, and Skipped (the
        # step cache held the model: no job was created; test_upstream_argo_cache.py).
        fires = {
            phase: expression is None or evaluate(expression, {"tasks": {task["name"]: {"status": phase}}})
            for phase in ("Succeeded", "Skipped", "Failed", "Error", "Omitted")
        }
        if fires != {"Succeeded": False, "Skipped": False, "Failed": True, "Error": True, "Omitted": True}:
            problems.append(f"task {task['name']}: exit hook runs on {expression!r}")
        delete = templates[hook["template"]]["resource"]
        args = _kubectl_args(delete)
        if args[:3] != ["kubectl", "delete", "--ignore-not-found"] or resource not in args:
            problems.append(f"exit hook does not delete {resource}: {args}")
            continue
        selector = args[args.index("--selector") + 1]
        labels = {k: v.replace("{{workflow.name}}", "wf-1") for k, v in manifest["metadata"]["labels"].items()}
        if not _matches(selector.replace("{{workflow.name}}", "wf-1"), labels):
            problems.append(f"selector {selector} misses the job's labels {labels}")
        if _matches(selector.replace("{{workflow.name}}", "wf-1"), {**labels, "paddle-mlops/workflow": "wf-2"}):
            problems.append(f"selector {selector} also deletes other workflows' jobs")
    return problems


def test_a_train_task_deletes_its_jobs_unless_it_succeeded(generated: str) -> None:
    assert check_cleanup(generated) == []


def test_the_job_ends_within_the_step_deadline(generated: str) -> None:
    """Even with no exit hook (`argo terminate` runs none), the job's own deadline ends it."""
    train = train_template(generated)
    policy = yaml.safe_load(train["resource"]["manifest"])["spec"]["runPolicy"]
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
