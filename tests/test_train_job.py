"""The train step (steps/train_job.py) through every interleaving of its pod's fate and the job's, as Argo runs it.

The step's real code runs against a stand-in API server (tests/trainjob_standin.py: what kube-apiserver answers, what
Kueue and Trainer write) with the compiled `train` template of argo/train-deploy.yaml: its manifest and its
retryStrategy, whose decisions tests/argo_model.py makes as argo-workflows v4.1.2 processNodeRetries does. A pod
killed mid-call (OOM, node lost) is a `PodKilled` raised out of an API call; an eviction or drain is the step's
SIGTERM while the workflow runs; a person's stop is SIGTERM with `spec.shutdown` set on the Workflow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from paddle_mlops_core.contracts import EXIT_FATAL, EXIT_TERMINATED, TRAIN_KEY_FILE, TRAINING_JOB_ENV
from pipelines.train_step import placed_manifest
from steps import release_train_jobs, train_job
from steps.runtime.caching.keys import Key
from steps.runtime.caching.reuse import TRAIN_STEP
from steps.runtime.caching.store import StepCache
from steps.runtime.cluster.train_job import StopSignal
from tests import argo_model
from tests.trainjob_standin import ApiServer, Fault, PodKilled

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = "train-deploy-a1b2c"
JOB = f"{WORKFLOW}-train"
RUN = "run-0123456789abcdef0123456789abcdef"


def compiled(name: str = "train", path: str = "argo/train-deploy.yaml") -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((ROOT / path).read_text(encoding="utf-8")) if d]
    return next(t for d in docs for t in d["spec"]["templates"] if t["name"] == name)


def rendered(template: dict[str, Any], workflow: str = WORKFLOW, run: str = RUN) -> dict[str, Any]:
    """The template's training job as Argo renders it for `workflow`: names and the run filled in, the rest `x`."""
    manifest = placed_manifest(template)
    assert manifest is not None
    text = yaml.safe_dump(manifest).replace("{{workflow.name}}", workflow)
    text = text.replace("{{inputs.parameters.train-run}}", run)
    return yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", text))


class Script:
    """Controllers acting on the k-th read of the watched TrainJob (1-based): `{k: action(server, name)}`."""

    def __init__(self, actions: dict[int, Callable[[ApiServer, str], None]]) -> None:
        self.actions, self.reads = actions, 0

    def __call__(self, server: ApiServer, name: str) -> None:
        self.reads += 1
        action = self.actions.get(self.reads)
        if action is not None:
            action(server, name)


def sigterm(stop: StopSignal) -> Callable[[ApiServer, str], None]:
    return lambda server, name: stop.event.set()


def hours(n: float) -> Callable[[ApiServer, str], None]:
    return lambda server, name: server.advance(n * 3600)


def both(*actions: Callable[[ApiServer, str], None]) -> Callable[[ApiServer, str], None]:
    def act(server: ApiServer, name: str) -> None:
        for action in actions:
            action(server, name)

    return act


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ApiServer:
    api = ApiServer()
    api.workflow(WORKFLOW)
    monkeypatch.setenv(TRAINING_JOB_ENV, yaml.safe_dump(rendered(compiled())))
    return api


def step(server: ApiServer, tmp_path: Path, stop: StopSignal | None = None, *extra: str) -> int:
    """One attempt of the train step, as its pod runs it; PodKilled escapes, as a killed pod does."""
    argv = ["--workspace", str(tmp_path / "ws"), "--namespace", "ml", "--workflow-name", WORKFLOW,
            "--poll-seconds", "0", *extra]  # fmt: skip
    return train_job.main(argv, api=server, stop=stop or StopSignal(), now=lambda: server.now, sleep=lambda s: None)


def as_attempt(outcome: int | str, started: float, finished: float) -> argo_model.Attempt:
    if isinstance(outcome, str):  # the pod's fate
        return argo_model.attempt(outcome, started, finished)
    if outcome == 0:
        return argo_model.Attempt("Succeeded", started, finished, "0")
    return argo_model.Attempt("Failed", started, finished, str(outcome), f"main: Error (exit code {outcome})")


def argo_node(server: ApiServer, attempts: list[Callable[[], int]], strategy: dict[str, Any] | None = None) -> str:
    """The train node as Argo runs it: attempt after attempt (each a callable returning the step's exit code, or
    raising PodKilled with the pod's fate) while its retryStrategy retries; the node's end."""
    strategy = strategy or compiled()["retryStrategy"]
    done: list[argo_model.Attempt] = []
    t0 = server.now
    for run in attempts:
        started = (server.now - t0).total_seconds()
        try:
            outcome: int | str = run()
        except PodKilled as exc:
            outcome = str(exc)
        done.append(as_attempt(outcome, started, (server.now - t0).total_seconds()))
        if done[-1].phase == "Succeeded":
            return "Succeeded"
        decision = argo_model.next_attempt(strategy, done, (server.now - t0).total_seconds())
        if isinstance(decision, str):
            return f"Failed: {decision}"
        server.advance(decision - (server.now - t0).total_seconds())
    raise AssertionError(f"more attempts than scripted ({len(attempts)})")


def created(server: ApiServer) -> int:
    return sum(1 for verb, plural, _ in server.calls if (verb, plural) == ("create", "trainjobs"))


def deletes(server: ApiServer) -> int:
    return sum(1 for verb, plural, _ in server.calls if (verb, plural) == ("delete", "trainjobs"))


# --- the wait survives its pod (defect 1) ---------------------------------------------------------


def test_the_waiter_evicted_at_minute_5_and_at_hour_5_reattaches_and_the_job_trains_on(
    server: ApiServer, tmp_path: Path
) -> None:
    stops = [StopSignal() for _ in range(3)]
    server.on_get = Script({
        1: lambda s, n: s.admit(n),
        2: both(lambda s, n: s.advance(300), sigterm(stops[0])),  # minute 5: evicted
        4: both(hours(5), sigterm(stops[1])),  # hour 5: drained
        6: lambda s, n: s.complete(n),
    })  # fmt: skip
    outcome = argo_node(server, [lambda i=i: step(server, tmp_path, stops[i]) for i in range(3)])
    assert outcome == "Succeeded"
    assert server.trainjobs() == [JOB] and deletes(server) == 0
    job = server.trainjob(JOB)
    assert job is not None and job["metadata"]["uid"] == "uid-1"  # the one job, created once, never replaced


@pytest.mark.parametrize("fate", ["oom-killed", "deleted", "node-lost"])
def test_a_waiter_oom_killed_or_lost_is_retried_and_reattaches(server: ApiServer, tmp_path: Path, fate: str) -> None:
    """An OOM kill is node phase Failed (exit 137), a vanished pod Error: `Always` retries both (OnError retried
    only the second)."""
    server.on_get = Script({1: lambda s, n: s.admit(n), 3: lambda s, n: s.complete(n)})
    server.faults.append(Fault("get", "trainjobs", PodKilled(fate), nth=2))
    assert argo_node(server, [lambda: step(server, tmp_path)] * 2) == "Succeeded"
    assert server.trainjobs() == [JOB] and deletes(server) == 0 and created(server) == 2  # the second: AlreadyExists


def test_a_workflow_controller_restart_leaves_the_step_running(server: ApiServer, tmp_path: Path) -> None:
    """The controller's restart does not touch running pods: the same attempt watches to the end. Had the pod gone
    while the controller was away, it is the `deleted` fate above: retried."""
    server.on_get = Script({1: lambda s, n: s.admit(n), 30: lambda s, n: s.complete(n)})
    assert argo_node(server, [lambda: step(server, tmp_path)]) == "Succeeded"


# --- idempotent create-or-reuse (defect 2) --------------------------------------------------------


def test_an_attempt_that_ended_before_its_create_is_followed_by_one_that_creates(
    server: ApiServer, tmp_path: Path
) -> None:
    server.faults.append(Fault("create", "trainjobs", PodKilled("oom-killed")))
    server.on_get = Script({1: lambda s, n: s.complete(n)})
    assert argo_node(server, [lambda: step(server, tmp_path)] * 2) == "Succeeded"
    assert server.trainjobs() == [JOB]


@pytest.mark.parametrize(
    "lost", [ApiException(status=500, reason="Internal Server Error"), ConnectionResetError("connection reset by peer")]
)
def test_a_create_whose_answer_was_lost_is_reused_not_doubled(
    server: ApiServer, tmp_path: Path, lost: Exception
) -> None:
    """The create reached the API server but its answer did not reach the step: exit 1 (retried), and the next attempt
    finds the job (AlreadyExists) and waits on it."""
    server.faults.append(Fault("create", "trainjobs", lost, after=True))
    server.on_get = Script({2: lambda s, n: s.complete(n)})
    codes: list[int] = []

    def attempt() -> int:
        codes.append(step(server, tmp_path))
        return codes[-1]

    assert argo_node(server, [attempt] * 2) == "Succeeded"
    assert codes == [1, 0] and server.trainjobs() == [JOB] and deletes(server) == 0


def test_a_failed_job_fails_the_step_for_good_and_is_kept_for_its_logs(server: ApiServer, tmp_path: Path) -> None:
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: lambda s, n: s.fail(n)})
    assert argo_node(server, [lambda: step(server, tmp_path)]) == "Failed: retryStrategy.expression evaluated to false"
    assert server.trainjobs() == [JOB] and deletes(server) == 0


def test_argo_retry_twice_replaces_the_failed_job_each_time_under_its_name(server: ApiServer, tmp_path: Path) -> None:
    """`argo retry` starts the node again at attempt 0 (tests/argo_model.py reset_by_argo_retry): the step finds its
    job failed, deletes it (foreground: its pods first), creates it again under the same name; twice in a row."""
    server.on_get = Script({1: lambda s, n: s.fail(n)})
    assert argo_node(server, [lambda: step(server, tmp_path)]).startswith("Failed")
    for retry in (1, 2):
        ends = ApiServer.fail if retry == 1 else ApiServer.complete
        server.on_get = Script({4: lambda s, n, ends=ends: ends(s, n)})
        outcome = argo_node(server, [lambda: step(server, tmp_path)])
        assert outcome == ("Failed: retryStrategy.expression evaluated to false" if retry == 1 else "Succeeded")
        job = server.trainjob(JOB)
        assert job is not None and job["metadata"]["uid"] == f"uid-{retry + 1}"  # a new job, the same name
    assert server.trainjobs() == [JOB] and deletes(server) == 2


# --- a person's stop, the deadline, Kueue (defects 1 and 4) ------------------------------------------


@pytest.mark.parametrize("shutdown", ["Stop", "Terminate"])
def test_a_persons_stop_deletes_the_job(server: ApiServer, tmp_path: Path, shutdown: str) -> None:
    stop = StopSignal()

    def stopped(s: ApiServer, name: str) -> None:
        s.workflow(WORKFLOW, shutdown=shutdown)
        stop.event.set()

    server.on_get = Script({1: lambda s, n: s.admit(n), 2: stopped})
    assert step(server, tmp_path, stop) == EXIT_TERMINATED
    assert server.trainjobs() == []


def test_the_workflows_deadline_deletes_the_job(server: ApiServer, tmp_path: Path) -> None:
    stop = StopSignal()
    server.workflow(WORKFLOW, activeDeadlineSeconds=3600)
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: both(hours(1.01), sigterm(stop))})
    assert step(server, tmp_path, stop) == EXIT_TERMINATED
    assert server.trainjobs() == []


def test_kueue_deactivation_fails_the_step_at_once_saying_why(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: lambda s, n: s.evict(n), 3: lambda s, n: s.deactivate(n)})
    started = server.now
    assert step(server, tmp_path) == EXIT_FATAL
    assert server.now == started  # at once, not at the deadline 10 h later
    err = capsys.readouterr().err
    assert "DeactivatedDueToRequeuingLimitExceeded" in err and "exceeding the maximum number of re-queuing" in err
    assert server.trainjobs() == [JOB]  # suspended, holding nothing; `argo retry` replaces it
    # the retry's reads: the failed job, twice more while its foreground deletion ends, then the new one
    server.on_get = Script({4: lambda s, n: s.complete(n)})
    assert step(server, tmp_path) == 0
    job = server.trainjob(JOB)
    assert job is not None and job["metadata"]["uid"] == "uid-2"


def test_a_job_queued_past_the_deadline_is_deleted(server: ApiServer, tmp_path: Path) -> None:
    server.on_get = Script({2: hours(11)})
    assert step(server, tmp_path) == EXIT_FATAL
    assert server.trainjobs() == []


def test_a_job_deleted_under_the_step_fails_it_saying_how_to_go_on(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on_get = Script({2: lambda s, n: s.objects.clear()})
    assert step(server, tmp_path) == EXIT_FATAL
    assert "was deleted while this step watched it" in capsys.readouterr().err


# --- one trainer per run (defect 5) -----------------------------------------------------------------


def _model_in_cache(cache_root: Path, ws: Path, workflow: str) -> None:
    """The trainer's end: the model recorded in the step cache under the key train-cache left in `ws`."""
    key = Key(TRAIN_STEP, {"code": "sha256:abc", "data": "d1"})
    (ws / Path(TRAIN_KEY_FILE).parent).mkdir(parents=True, exist_ok=True)
    (ws / TRAIN_KEY_FILE).write_text(json.dumps({"digest": key.digest, "parts": dict(key.parts)}))
    model = cache_root.parent / f"model-of-{workflow}"
    model.mkdir(parents=True, exist_ok=True)
    (model / "training.json").write_text(json.dumps({"workflow": workflow}))
    StepCache(str(cache_root)).record(key, {"model": model}, {}, workflow)


def test_a_live_trainer_of_the_run_is_adopted_and_its_model_reused(server: ApiServer, tmp_path: Path) -> None:
    """A terminated workflow's job still trains the run: the second workflow watches it instead of starting a
    second trainer on the same checkpoints, then takes the model from the step cache."""
    other = rendered(compiled(), workflow="train-deploy-old")
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", other)
    server.admit("train-deploy-old-train")
    ws, cache = tmp_path / "ws", tmp_path / "step-cache"
    _model_in_cache(cache, tmp_path / "other-ws", "train-deploy-old")
    (ws / "cache").mkdir(parents=True)
    (ws / TRAIN_KEY_FILE).write_text((tmp_path / "other-ws" / TRAIN_KEY_FILE).read_text())
    (cache / "train").rename(tmp_path / "held")  # recorded only once the other job completes

    def completes(s: ApiServer, name: str) -> None:
        s.complete(name)
        (tmp_path / "held").rename(cache / "train")

    server.on_get = Script({2: completes})
    assert step(server, tmp_path, None, "--step-cache", str(cache)) == 0
    assert server.trainjobs() == ["train-deploy-old-train"]  # no second trainer was created
    assert json.loads((ws / "model" / "training.json").read_text()) == {"workflow": "train-deploy-old"}


def test_the_second_run_of_one_commit_finds_the_model_and_trains_nothing(server: ApiServer, tmp_path: Path) -> None:
    """Under the run's mutex the second workflow's step starts once the first's ended: its model is in the cache."""
    ws, cache = tmp_path / "ws", tmp_path / "step-cache"
    _model_in_cache(cache, ws, "train-deploy-first")
    assert step(server, tmp_path, None, "--step-cache", str(cache)) == 0
    assert created(server) == 0 and (ws / "model" / "training.json").is_file()


def test_a_cache_hit_supersedes_a_live_job_of_this_workflow(server: ApiServer, tmp_path: Path) -> None:
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", rendered(compiled()))
    _model_in_cache(tmp_path / "step-cache", tmp_path / "ws", "train-deploy-first")
    assert step(server, tmp_path, None, "--step-cache", str(tmp_path / "step-cache")) == 0
    assert server.trainjobs() == []


def test_the_canary_has_no_run_and_adopts_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    server = ApiServer()
    canary = placed_manifest(compiled("train-canary"))
    assert canary is not None and "paddle-mlops/train-run" not in canary["metadata"]["labels"]
    text = re.sub(r"\{\{[^}]*\}\}", "x", yaml.safe_dump(canary).replace("{{workflow.name}}", WORKFLOW))
    monkeypatch.setenv(TRAINING_JOB_ENV, text)
    server.on_get = Script({1: lambda s, n: s.complete(n)})
    assert step(server, tmp_path) == 0
    assert server.trainjobs() == [f"{WORKFLOW}-train-canary"]
    assert not [c for c in server.calls if c[0] == "list" and "train-run" in c[2]]


# --- an earlier trainer's remains, the step's own end, adoption's owner, a run that is not this one ---------------


def _pod(server: ApiServer, name: str, phase: str = "Running", run: str = RUN) -> None:
    server.pods[name] = ({"paddle-mlops/train-run": run, "jobset.sigs.k8s.io/jobset-name": "old"}, phase)


def test_a_stopped_trainers_pods_are_waited_for_before_another_starts(server: ApiServer, tmp_path: Path) -> None:
    """`argo stop` of one workflow deletes its TrainJob (background: its pods keep their grace period to write their
    stop checkpoint) and Argo releases the run's mutex at once (exec_control.go marks the node Failed while the pods are
    still stopping): the next workflow's step must not start a second gang before those pods are gone."""
    _pod(server, "old-node-0-0")
    _pod(server, "old-node-0-1")
    _pod(server, "finished-node-0-0", phase="Succeeded")  # a finished job's pods write nothing: not waited for
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:  # their grace period ends
            server.pods = {k: v for k, v in server.pods.items() if not k.startswith("old-")}

    server.on_get = Script({1: lambda s, n: s.complete(n)})
    argv = ["--workspace", str(tmp_path / "ws"), "--namespace", "ml", "--workflow-name", WORKFLOW,
            "--poll-seconds", "0"]  # fmt: skip
    assert train_job.main(argv, api=server, stop=StopSignal(), now=lambda: server.now, sleep=sleep) == 0
    assert len(sleeps) == 3 and created(server) == 1
    first_create = next(i for i, c in enumerate(server.calls) if c[:2] == ("create", "trainjobs"))
    assert [c for c in server.calls[:first_create] if c[1] == "pods"], "created before looking at the run's pods"


def test_a_jobset_of_the_same_name_is_waited_for_before_the_job_is_created_again(
    server: ApiServer, tmp_path: Path
) -> None:
    """A TrainJob created again under its name must not find the old one's JobSet (trainer v2.3.0
    plugins/jobset/jobset.go Build applies onto the JobSet of its name)."""
    key = ("jobset.x-k8s.io", "jobsets", "ml", JOB)
    server.objects[key] = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": JOB}}
    gone: list[float] = []

    def sleep(seconds: float) -> None:
        gone.append(seconds)
        server.objects.pop(key, None)

    server.on_get = Script({1: lambda s, n: s.complete(n)})
    argv = ["--workspace", str(tmp_path / "ws"), "--namespace", "ml", "--workflow-name", WORKFLOW,
            "--poll-seconds", "0"]  # fmt: skip
    assert train_job.main(argv, api=server, stop=StopSignal(), now=lambda: server.now, sleep=sleep) == 0
    assert gone == [5.0]


def test_an_adopted_job_is_owned_by_the_adopting_workflow_too(server: ApiServer, tmp_path: Path) -> None:
    other = rendered(compiled(), workflow="train-deploy-old")
    other["metadata"]["ownerReferences"][0]["uid"] = "uid-old-workflow"
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", other)
    server.on_get = Script({1: lambda s, n: s.fail(n)})  # ends at once: the ownership is what this test is about
    assert step(server, tmp_path) == EXIT_FATAL
    job = server.trainjob("train-deploy-old-train")
    assert job is not None
    owners = job["metadata"]["ownerReferences"]
    assert [(o["uid"], o["controller"]) for o in owners] == [("uid-old-workflow", True), ("x", False)]


def test_a_job_of_this_name_training_another_run_is_refused(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """finetune-batch names a branch's job after its task: the same task listed twice would share it."""
    other = rendered(compiled(), run="run-ffffffffffffffffffffffffffffffff")
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", other)
    assert step(server, tmp_path) == EXIT_FATAL
    assert "trains another run" in capsys.readouterr().err
    assert deletes(server) == 0


def test_the_step_releases_the_job_before_argo_ends_it_for_good(
    server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A later attempt's pod is killed at the retries' maxDuration ($ARGO_DEADLINE, workflowpod.go getDeadline), and
    then Argo retries nothing: the step deletes the job a minute before, rather than leave it training unwatched."""
    monkeypatch.setenv("ARGO_DEADLINE", (server.now + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: hours(3)})
    assert step(server, tmp_path) == EXIT_FATAL
    assert "Argo ends the train step" in capsys.readouterr().err
    assert server.trainjobs() == []


def test_sigterm_at_the_steps_own_end_deletes_the_job(server: ApiServer, tmp_path: Path) -> None:
    stop = StopSignal()
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: both(hours(1), sigterm(stop))})
    assert step(server, tmp_path, stop, "--attempt-deadline-seconds", "3600") == EXIT_TERMINATED
    assert server.trainjobs() == []


def test_a_deadline_only_in_the_workflow_template_is_read_too(server: ApiServer, tmp_path: Path) -> None:
    """The Sensor submits `workflowTemplateRef: train-deploy`: the deadline is the template's, which the controller
    keeps in status.storedWorkflowTemplateSpec (operator.go getWorkflowDeadline reads the merged spec)."""
    stop = StopSignal()
    wf = server.workflow(WORKFLOW)
    wf["status"]["storedWorkflowTemplateSpec"] = {"activeDeadlineSeconds": 3600}
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: both(hours(1.01), sigterm(stop))})
    assert step(server, tmp_path, stop) == EXIT_TERMINATED
    assert server.trainjobs() == []


def test_a_defect_of_the_step_is_not_retried(
    server: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception the step did not expect would fail every attempt alike, holding the run's mutex: exit 2."""
    from steps.runtime.cluster import train_job as placing

    def broken(job: dict[str, Any]) -> Any:
        raise TypeError("a bug")

    monkeypatch.setattr(placing, "job_state", broken)
    assert step(server, tmp_path) == EXIT_FATAL
    assert "unexpected TypeError: a bug" in capsys.readouterr().err
    assert argo_model.next_attempt(compiled()["retryStrategy"], [argo_model.attempt("job-failed", 0, 1)], 1) == (
        "retryStrategy.expression evaluated to false"
    )


# --- the exit handler ---------------------------------------------------------------------------------


def _release(server: ApiServer) -> int:
    argv = ["--workflow-name", WORKFLOW, "--namespace", "ml", "--job-api", "trainer.kubeflow.org/v1alpha1",
            "--job-kind", "TrainJob"]  # fmt: skip
    return release_train_jobs.main(argv, api=server, sleep=lambda seconds: None)


def test_the_exit_handler_releases_live_jobs_only_after_a_persons_stop(server: ApiServer) -> None:
    body = rendered(compiled())
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body)
    assert _release(server) == 0 and server.trainjobs() == [JOB]  # the workflow failed otherwise: left to go on
    server.fail(JOB)
    server.workflow(WORKFLOW, shutdown="Stop")
    assert _release(server) == 0 and server.trainjobs() == [JOB]  # failed: kept for its logs
    server.objects.clear()
    server.workflow(WORKFLOW, shutdown="Stop")
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body)
    assert _release(server) == 0 and server.trainjobs() == []


def test_the_exit_handler_retries_the_apis_transient_errors_itself(server: ApiServer) -> None:
    """Argo retries no exit handler after a stop (processNodeRetries fails retry nodes under a shutdown)."""
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", rendered(compiled()))
    server.workflow(WORKFLOW, shutdown="Stop")
    server.faults += [Fault("list", "trainjobs", ApiException(status=503, reason="Service Unavailable")),
                      Fault("delete", "trainjobs", ConnectionResetError("connection reset by peer"))]  # fmt: skip
    assert _release(server) == 0 and server.trainjobs() == []


def test_the_exit_handler_leaves_a_job_another_workflow_adopted(server: ApiServer) -> None:
    """Argo releases the run's mutex when it stops this workflow, before its exit handler runs: a waiting workflow of
    the run may have adopted the job (and owns it too) by then. Deleting it would fail that one."""
    body = rendered(compiled())
    body["metadata"]["ownerReferences"].append(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "name": "train-deploy-next",
            "uid": "u2",
            "controller": False,
        }  # fmt: skip
    )
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body)
    server.workflow(WORKFLOW, shutdown="Stop")
    assert _release(server) == 0 and server.trainjobs() == [JOB]


@pytest.mark.parametrize(("before_end", "deleted"), [(240, True), (600, False)])
def test_an_eviction_too_late_for_a_retry_deletes_the_job(
    server: ApiServer, tmp_path: Path, before_end: int, deleted: bool
) -> None:
    """Argo starts no further attempt once the backoff would end past maxDuration (processNodeRetries): a SIGTERM in
    the last minutes is the end, and the job must not train on unwatched; earlier, it is an eviction."""
    stop = StopSignal()
    late = both(lambda s, n: s.advance(3600 - before_end), sigterm(stop))
    server.on_get = Script({1: lambda s, n: s.admit(n), 2: late})
    assert step(server, tmp_path, stop, "--attempt-deadline-seconds", "3600") == EXIT_TERMINATED
    assert (server.trainjobs() == []) is deleted


def test_a_forbidden_call_is_a_clear_error_naming_the_rbac(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.faults.append(Fault("create", "trainjobs", ApiException(status=403, reason="Forbidden")))
    assert step(server, tmp_path) == EXIT_FATAL
    assert "may not create trainjobs.trainer.kubeflow.org" in capsys.readouterr().err


def exercised_calls() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every API call the train step and the exit handler make, recorded while they run
    through each of their paths: another workflow's trainer of the run adopted, a create that finds the job, a failed
    job replaced (the run's pods and the JobSet of its name waited for), Kueue's Workload read, a person's stop, the
    exit handler after it
    (tests/test_upstream_rbac.py checks the Role against them)."""
    import os

    server = ApiServer()
    server.workflow(WORKFLOW)
    body = rendered(compiled())
    # A terminated workflow's live trainer of the run: adopted (patch: owned by this workflow too), then it fails.
    other = rendered(compiled(), workflow="train-deploy-old")
    other["metadata"]["ownerReferences"][0]["uid"] = "uid-old-workflow"
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", other)
    server.on_get = Script({1: lambda s, n: s.fail(n)})
    os.environ[TRAINING_JOB_ENV] = yaml.safe_dump(body)
    try:
        assert step(server, Path(os.environ.get("TMPDIR", "/tmp")) / "exercised-train-step") == EXIT_FATAL
    finally:
        os.environ.pop(TRAINING_JOB_ENV)
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body)
    server.fail(JOB)
    stop = StopSignal()

    def stopped(s: ApiServer, name: str) -> None:
        s.workflow(WORKFLOW, shutdown="Stop")
        stop.event.set()

    server.on_get = Script({5: stopped})
    saved = os.environ.get(TRAINING_JOB_ENV)
    os.environ[TRAINING_JOB_ENV] = yaml.safe_dump(body)
    try:
        with_tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "exercised-train-step"
        assert step(server, with_tmp, stop) == EXIT_TERMINATED
    finally:
        if saved is None:
            os.environ.pop(TRAINING_JOB_ENV)
        else:
            os.environ[TRAINING_JOB_ENV] = saved
    server.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", body)
    assert _release(server) == 0 and JOB not in server.trainjobs()
    return server.grants_used


def test_the_recorded_calls_cover_every_path_of_the_step() -> None:
    calls = exercised_calls()
    trainjobs = {verb for group, plural, verb in calls if plural == "trainjobs"}
    assert trainjobs == {"create", "get", "list", "patch", "delete"}
    assert ("kueue.x-k8s.io", "workloads", "list") in calls and ("argoproj.io", "workflows", "get") in calls
    assert ("", "pods", "list") in calls and ("jobset.x-k8s.io", "jobsets", "get") in calls
