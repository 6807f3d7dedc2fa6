"""Issue #59's five defects, each checked on the compiled argo/*.yaml as Argo Workflows v4.1.2, Kueue v0.19.2 and
Kubeflow Trainer v2.3.0 would run it: a healthy training job is never lost because the pod that waits on it died.

Every check reads the compiled documents (train-deploy and finetune-batch; scheduled-retrain runs train-deploy by
reference) and judges each template that places a training job (`paddle_mlops.lint.resource_manifest`: a resource
template's manifest before this change, the train step's `$PADDLE_MLOPS_TRAINING_JOB` now) with the upstream models
of tests/argo_model.py (processNodeRetries, FormulateRetryWorkflow) and the API stand-in of tests/trainjob_standin.py.
`PADDLE_MLOPS_TEST_ARGO_DIR=<dir>` points them at another compile (e.g. `git show <commit>:argo/...` into a folder):
on the YAML before issue #59 each of them fails, as docs/training.md "Interruptions" records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.lint import resource_manifest
from paddle_mlops.local.dag import dag_tasks, depends_met
from pipelines.train_step import placed_manifest
from steps import train_job
from steps.runtime.cluster.job_state import job_state
from steps.runtime.cluster.train_job import StopSignal
from tests import argo_model
from tests.trainjob_standin import ApiServer, Fault, PodKilled

ROOT = Path(__file__).resolve().parents[1]
ARGO = Path(os.environ.get("PADDLE_MLOPS_TEST_ARGO_DIR") or ROOT / "argo")
WORKFLOWS = ("train-deploy", "finetune-batch")
HOUR = 3600.0


def _doc(name: str) -> dict[str, Any]:
    (doc,) = [
        d for d in yaml.safe_load_all((ARGO / f"{name}.yaml").read_text()) if d and d["kind"] == "WorkflowTemplate"
    ]
    return doc


def train_templates() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workflow/template, template, the training job it places) for every template placing one."""
    for name in WORKFLOWS:
        for template in _doc(name)["spec"]["templates"]:
            job = resource_manifest(template)
            if job and job.get("kind") in ("TrainJob", "PaddleJob"):
                yield f"{name}/{template['name']}", template, job


def train_tasks() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workflow/task, task, its template) for every DAG task running a template that places a training job."""
    for name in WORKFLOWS:
        templates = {t["name"]: t for t in _doc(name)["spec"]["templates"]}
        placing = {n for n, t in templates.items() if (resource_manifest(t) or {}).get("kind") in ("TrainJob",)}
        for template in templates.values():
            for task in (template.get("dag") or {}).get("tasks", []):
                if task["template"] in placing:
                    yield f"{name}/{task['name']}", task, templates[task["template"]]


def test_every_workflow_has_its_training_steps() -> None:
    names = {where for where, _, _ in train_templates()}
    assert {"train-deploy/train", "train-deploy/train-canary", "finetune-batch/train"} <= names
    retrain = yaml.safe_load((ARGO / "scheduled-retrain.yaml").read_text())
    assert retrain["spec"]["workflowSpec"]["workflowTemplateRef"]["name"] == "train-deploy"  # the same steps


# --- defect 1: the wait survives its pod -----------------------------------------------------------------------


@pytest.mark.parametrize("fate", ["evicted", "drained", "oom-killed", "deleted", "node-lost"])
@pytest.mark.parametrize("at", [5 * 60, 5 * HOUR], ids=["minute-5", "hour-5"])
def test_a_lost_waiting_pod_is_retried_for_as_long_as_the_step_may_wait(fate: str, at: float) -> None:
    for where, template, _ in train_templates():
        strategy = template["retryStrategy"]
        decision = argo_model.next_attempt(strategy, [argo_model.attempt(fate, 0, at)], at)
        assert not isinstance(decision, str), f"{where}: the {fate} pod at {at / 60:.0f} min is not retried: {decision}"
        assert decision - at <= 300, f"{where}: re-attaches only {decision - at:.0f} s later"
        # ... and a pod lost again and again keeps being retried, at the capped backoff, until the step's deadline
        attempts = [argo_model.attempt(fate, 0, at)]
        while not isinstance(decision, str) and decision < 9 * HOUR:
            attempts.append(argo_model.attempt(fate, decision, decision + 60))
            decision = argo_model.next_attempt(strategy, attempts, decision + 60)
        assert not isinstance(decision, str), f"{where}: gave up at {attempts[-1].finished / HOUR:.1f} h: {decision}"


def test_no_task_deletes_a_training_job_because_its_pod_died() -> None:
    """A lifecycle hook runs once its task has ended, its retries exhausted or refused (dag.go executeDAGTask ->
    exit_handler.go runOnExitNode): a hook deleting the job on any outcome but Succeeded deleted a healthy TrainJob
    whenever the waiting pod was lost. Now no train task has a hook; the job is deleted by the step on a person's stop
    and by the exit handler after one (tests/test_train_job.py)."""
    for where, task, _ in train_tasks():
        assert not task.get("hooks"), f"{where} has lifecycle hooks {sorted(task['hooks'])}"


# --- defect 2: create or reuse in every attempt ----------------------------------------------------------------


def _attempts(template: dict[str, Any], server: ApiServer, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> str:
    """Attempts of the template's step on the stand-in until one ends it: `Succeeded`, or what failed it. A train
    step runs the real steps.train_job; a resource template runs the executor's kubectl (create on attempt 0, then
    get; tests/test_upstream_argo_resource.py: AlreadyExists and NotFound fail the attempt)."""
    placed = placed_manifest(template)
    job = resource_manifest(template)
    assert job is not None
    text = re.sub(r"\{\{[^}]*\}\}", "x", yaml.safe_dump(job).replace("{{workflow.name}}", "wf-a"))
    body = yaml.safe_load(text)
    monkeypatch.setenv("PADDLE_MLOPS_TRAINING_JOB", text)
    attempts: list[argo_model.Attempt] = []
    for number in range(5):
        try:
            if placed is not None:
                argv = ["--workspace", str(tmp), "--namespace", "ml", "--workflow-name", "wf-a", "--poll-seconds", "0"]
                code = train_job.main(argv, api=server, stop=StopSignal(), now=lambda: server.now, sleep=lambda s: None)
            else:
                action = "create" if number == 0 else "get"
                if action == "create":
                    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body)
                got = server.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                                          body["metadata"]["name"])  # fmt: skip
                code = 0 if job_state(got).phase == "succeeded" else 1
            outcome = argo_model.Attempt("Succeeded" if code == 0 else "Failed", number, number, str(code))
        except PodKilled as exc:
            outcome = argo_model.attempt(str(exc), number, number)
        except Exception as exc:  # noqa: BLE001 - the executor's kubectl failing: exit 64, Failed
            outcome = argo_model.Attempt("Failed", number, number, "64", f"no more retries {exc}")
        attempts.append(outcome)
        if outcome.phase == "Succeeded":
            return "Succeeded"
        decision = argo_model.next_attempt(template["retryStrategy"], attempts, number)
        if isinstance(decision, str):
            return f"{decision} after {outcome.message or outcome.exit_code}"
    return "still retrying"


def test_an_attempt_that_ended_before_its_create_is_followed_by_one_that_creates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for where, template, _ in train_templates():
        server = ApiServer()
        server.faults.append(Fault("create", "trainjobs", PodKilled("deleted")))
        server.on_get = lambda s, name: s.complete(name)
        assert _attempts(template, server, monkeypatch, tmp_path) == "Succeeded", where
        assert len(server.trainjobs()) == 1, where


def test_a_create_whose_answer_was_lost_is_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kubernetes.client.exceptions import ApiException

    for where, template, _ in train_templates():
        server = ApiServer()
        server.faults.append(
            Fault("create", "trainjobs", ApiException(status=504, reason="Gateway Timeout"), after=True)
        )
        server.on_get = lambda s, name: s.complete(name)
        assert _attempts(template, server, monkeypatch, tmp_path) == "Succeeded", where
        assert len(server.trainjobs()) == 1, where


# --- defect 3: `argo retry` any number of times ---------------------------------------------------------------


def test_argo_retry_runs_a_failed_train_task_again() -> None:
    """FormulateRetryWorkflow keeps a failed task whose exit hook succeeded (argo_model.reset_by_argo_retry); a train
    task without a hook is reset to attempt 0, where the step replaces its failed job (tests/test_train_job.py
    test_argo_retry_twice_replaces_the_failed_job_each_time_under_its_name)."""
    for where, task, _ in train_tasks():
        children = {f"{task['name']}(0)": "Failed"}
        if task.get("hooks"):
            children[f"{task['name']}.onExit"] = "Succeeded"  # the hook deleted the failed job
        for retry in range(3):
            assert argo_model.reset_by_argo_retry("Failed", children), f"{where}: `argo retry` #{retry + 1} skips it"


# A step's outcome the DAG walk cannot guess: finetune-batch's summary fails the workflow when a task failed
# (steps/batch_summary.py).
FAILS_WHEN_A_BRANCH_FAILED = {"summary"}


def succeeded_below(name: str, dag: str, failed: str) -> set[str]:
    """The tasks of DAG template `dag` that run and succeed after task `failed` failed, among those that follow it
    (its dependents, and theirs): each becomes a child of the failed node's last attempt (workflow/controller/dag.go
    connectDependencies: "add all outbound nodes of our dependencies as parents"; operator.go getOutboundNodes: a
    retry node's outbound node is its last child), Omitted ones included (dag.go initializeNode ... NodeOmitted;
    connectDependencies) — and one that succeeded keeps `argo retry` from resetting the failed node
    (util.go FormulateRetryWorkflow: `!isDescendantNodeSucceeded`)."""
    doc = _doc(name)
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    statuses: dict[str, str] = {}
    below = {failed}
    for task in dag_tasks(templates[dag], templates):
        if task.name == failed:
            statuses[task.name] = "Failed"
            continue
        if not depends_met(task.depends_expr, statuses, task.depends):
            statuses[task.name] = "Omitted"
        else:
            statuses[task.name] = "Failed" if task.name in FAILS_WHEN_A_BRANCH_FAILED else "Succeeded"
        if below & set(task.depends):
            below.add(task.name)
    return {n for n in below if statuses[n] == "Succeeded"}


def test_nothing_that_runs_after_a_failed_train_task_succeeds_below_it() -> None:
    """Defect 3's other half: a task run after a failed train (release-prepull's `train.Failed || ...`) hung below
    it and, succeeding, kept `argo retry` from running train again. Such clean-up lives in the exit handler."""
    cases = [("train-deploy", "main", "train"), ("train-deploy", "main", "train-canary"),
             ("finetune-batch", "finetune-task", "train"), ("finetune-batch", "main", "finetune"),
             ("finetune-batch", "main", "train-canary")]  # fmt: skip
    for name, dag, failed in cases:
        assert succeeded_below(name, dag, failed) == set(), f"{name}: below a failed {failed}"


# --- defect 4: Kueue gives up -> the step fails at once ------------------------------------------------------------


def _old_conditions(template: dict[str, Any], job: dict[str, Any]) -> str:
    """A resource template's failureCondition of `status.conditions.N.type == Failed` requirements, on `job`."""
    for requirement in template["resource"].get("failureCondition", "").split(","):
        path, _, wanted = (part.strip() for part in requirement.partition("=="))
        node: Any = job
        for key in path.split("."):
            node = node[int(key)] if isinstance(node, list) and key.isdigit() and int(key) < len(node) else (
                node.get(key) if isinstance(node, dict) else None)  # fmt: skip
        if node == wanted:
            return "failed"
    return "waiting"


def test_a_trainjob_kueue_deactivated_fails_the_step_at_once_saying_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for where, template, job in train_templates():
        if job["kind"] != "TrainJob":
            continue
        server = ApiServer()
        text = re.sub(r"\{\{[^}]*\}\}", "x", yaml.safe_dump(job).replace("{{workflow.name}}", "wf-a"))
        if placed_manifest(template) is None:  # before: a resource template judging the TrainJob alone
            body = yaml.safe_load(text)
            created = server.create_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body
            )
            for event in (server.admit, server.evict, server.deactivate):
                event(created["metadata"]["name"])
            stuck = server.trainjob(created["metadata"]["name"])
            assert _old_conditions(template, stuck or {}) == "failed", f"{where} waits out its whole timeout"
            continue
        events = iter([ApiServer.admit, ApiServer.evict, ApiServer.deactivate])
        server.on_get = lambda s, name, events=events: next(events, lambda *_: None)(s, name)
        monkeypatch.setenv("PADDLE_MLOPS_TRAINING_JOB", text)
        argv = ["--workspace", str(tmp_path), "--namespace", "ml", "--workflow-name", "wf-a", "--poll-seconds", "0"]
        started = server.now
        code = train_job.main(
            argv, api=server, stop=StopSignal(), now=lambda clock=server: clock.now, sleep=lambda s: None
        )
        assert server.now == started, where  # at once, not at the deadline
        assert code == 2, where  # StepError: not retried (the retry expression)
        assert argo_model.next_attempt(template["retryStrategy"], [argo_model.attempt("job-failed", 0, 1)], 1) == (
            "retryStrategy.expression evaluated to false"
        )


# --- defect 5: one trainer per run ---------------------------------------------------------------------------------


def test_two_workflows_of_one_run_never_train_at_once() -> None:
    """A template-level mutex (workflow/sync: lock key `<namespace>/Mutex/<name>`, shared by every workflow of the
    namespace, held across the template's retries, the name substituted from the template's inputs first) named by
    the training run, which train-cache computes from the run's key (or `run-id`): a cron run and a push of one
    commit, or a resubmission, wait for each other. Its name must come from the run, not from the workflow."""
    for where, task, template in train_tasks():
        if template.get("name") == "train-canary":
            continue  # a canary keeps no checkpoints and trains no run
        mutexes = (template.get("synchronization") or {}).get("mutexes") or []
        names = [m["name"] for m in mutexes]
        assert names, f"{where}: nothing keeps two workflows of one run from training at once"
        rendered = {n.replace("{{inputs.parameters.train-run}}", "run-abc") for n in names}
        assert "{{" not in "".join(rendered) and "workflow.name" not in "".join(names), where
        args = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        assert args["train-run"] == "{{tasks.train-cache.outputs.parameters.run}}", where
