"""The TrainJob backend behaves on a cluster as Kubeflow Trainer v2.3.0 and JobSet v0.12.0 make it.

Upstream behaviour encoded here:
- trainer pkg/apis/trainer/v1alpha1/trainjob_types.go: condition types Suspended, Complete, Failed
  (one per type, `meta.SetStatusCondition` appends a new type last); pkg/runtime/framework/plugins/
  jobset/jobset.go Status(): Complete/Failed copied from the JobSet's conditions in the same update
  that fills `status.jobsStatus` from its replicated jobs;
- trainer plugins/jobset/builder.go Trainer(): image/command/args of the container `node` of the
  replicated job labelled `trainer.kubeflow.org/trainjob-ancestor-step: trainer` are the TrainJob's;
  env may only come from trainer.env (plugins/jobset/jobset.go Validate refuses env patches on `node`);
  runtimePatches need a domain-prefixed manager, and `kueue.x-k8s.io/manager` is Kueue's own;
- jobset jobset_controller.go: pods `<jobset>-<rjob>-<job>-<pod>` in subdomain `<jobset>`, label
  jobset.sigs.k8s.io/jobset-name; the JobSet has the TrainJob's name (trainer jobset.go Build);
  the Job controller sets JOB_COMPLETION_INDEX in every container of an Indexed Job's pod;
- paddle/distributed/launch/controllers/master.py HTTPMaster: the rendezvous store starts only
  when `--master`'s host is 127.0.0.1 or the node's IP (so a DNS name must be resolved first).
The train step's judgement of those conditions: steps/runtime/cluster/job_state.py.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from paddle_mlops.compile import default_compile_config, dump
from paddle_mlops.lint import lint_documents
from paddle_mlops.lint.trainjob import trainjob_pod_templates
from paddle_mlops_core.config import load_config
from pipelines import train_deploy, train_step, trainjob
from pipelines.platform import argo_controller, rbac
from steps.runtime.cluster.job_state import job_state
from steps.runtime.training import launch
from tests.test_upstream_training_operator import check_cleanup, train_manifest, train_template

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "schemas"


@pytest.fixture(scope="module")
def cfg():
    return default_compile_config()


@pytest.fixture(scope="module")
def manifest(cfg) -> dict[str, Any]:
    return train_manifest(dump([train_deploy.build(cfg).to_dict()]))


REASONS = {
    "Suspended": ("Suspended", "TrainJob is suspended"),
    "Complete": ("AllJobsCompleted", "jobset completed successfully"),
    "Failed": ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts"),
}


def _status(conditions: list[tuple[str, str]], succeeded: int = 0, failed: int = 0) -> dict[str, Any]:
    """A TrainJob as Trainer leaves it: its conditions (reasons and messages as trainer/jobset write them), suspended
    while its last Suspended condition is True, and the node job's entry of status.jobsStatus."""
    jobs = [{"name": "node", "ready": 0, "succeeded": succeeded, "failed": failed, "active": 0, "suspended": 0}]
    written = [{"type": t, "status": s, "reason": REASONS[t][0] if s == "True" else "Resumed",
                "message": REASONS[t][1]} for t, s in conditions]  # fmt: skip
    suspended = any(t == "Suspended" and s == "True" for t, s in conditions)
    return {"apiVersion": trainjob.API, "kind": "TrainJob", "spec": {"suspend": suspended},
            "status": {"conditions": written, "jobsStatus": jobs}}  # fmt: skip


def verdict(job: dict[str, Any]) -> str:
    phase = job_state(job).phase
    return {"queued": "waiting", "running": "waiting"}.get(phase, phase)


def _set(conditions: list[tuple[str, str]], kind: str, status: str) -> list[tuple[str, str]]:
    """meta.SetStatusCondition: an existing type changes in place, a new one is appended."""
    if any(t == kind for t, _ in conditions):
        return [(t, status if t == kind else s) for t, s in conditions]
    return [*conditions, (kind, status)]


@pytest.mark.parametrize("suspended_first", [False, True])
def test_every_status_history_is_judged_right(suspended_first: bool) -> None:
    start = [("Suspended", "True")] if suspended_first else []
    running = [start, _set(start, "Suspended", "False") if start else []]
    for before in running:
        # Running, with pods failing and JobSet restarting the gang: keep waiting.
        for failed in (0, 1, 2):
            assert verdict(_status(before, failed=failed)) == "waiting", (before, failed)
        done = _status(_set(before, "Complete", "True"), succeeded=1)
        assert verdict(done) == "succeeded", before
        broken = _status(_set(before, "Failed", "True"), failed=1)
        assert verdict(broken) == "failed", before
        assert "ReachedMaxRestarts" in job_state(broken).describe()  # the reason reaches the step's message
    assert verdict({"apiVersion": trainjob.API, "kind": "TrainJob", "status": {}}) == "waiting"  # just created


def test_the_generated_train_step_places_the_trainjob_it_judges(cfg, manifest) -> None:
    train = train_template(dump([train_deploy.build(cfg).to_dict()]))
    assert train["container"]["command"] == ["python", "-m", "steps.train_job"]
    assert (manifest["apiVersion"], manifest["kind"]) == (trainjob.API, "TrainJob")


def test_the_trainer_overrides_reach_the_node_container(cfg, manifest) -> None:
    runtime = trainjob.cluster_training_runtime(cfg)
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert job["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    assert [c["name"] for c in job["template"]["spec"]["template"]["spec"]["containers"]] == ["node"]
    ((name, pod),) = trainjob_pod_templates(manifest, runtime)
    (container,) = pod["spec"]["containers"]
    assert name == "node" and container["image"].endswith("@{{inputs.parameters.image-digest}}")
    assert container["command"][:3] == ["python", "-m", "steps.runtime.training.launch"]
    assert container["resources"] == manifest["spec"]["trainer"]["resourcesPerNode"]
    env = {e["name"] for e in container["env"]}
    assert {"TRAINJOB_NAME", "AWS_ACCESS_KEY_ID", "GIT_SHA"} <= env
    assert (
        manifest["spec"]["trainer"]["numNodes"] == cfg.training.job.workers == runtime["spec"]["mlPolicy"]["numNodes"]
    )
    assert manifest["spec"]["suspend"] is True
    assert manifest["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]


def test_patches_stay_within_what_the_trainer_accepts(manifest) -> None:
    for patch in manifest["spec"]["runtimePatches"]:
        prefix, _, path = patch["manager"].partition("/")
        assert "." in prefix and path and patch["manager"] != "kueue.x-k8s.io/manager"
        for job in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            for container in job["template"]["spec"]["template"]["spec"].get("containers", []):
                assert "env" not in container or container["name"] != "node"


def test_rendezvous_names_rank_zero_by_its_jobset_hostname(cfg, manifest) -> None:
    command = manifest["spec"]["trainer"]["command"]
    master = command[command.index("--master") + 1]
    assert master == f"$(TRAINJOB_NAME)-node-0-0.$(TRAINJOB_NAME):{trainjob.MASTER_PORT}"
    assert command[command.index("--rank") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert command[command.index("--nnodes") + 1] == str(cfg.training.job.workers)
    runtime = trainjob.cluster_training_runtime(cfg)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (name_var,) = [e for e in pod["containers"][0]["env"] if e["name"] == "TRAINJOB_NAME"]
    assert name_var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
    network = runtime["spec"]["template"]["spec"]["network"]
    assert network == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    # The kubelet expands $(VAR) from the container's env; JobSet names pod 0 of job 0 like this.
    expanded = master.replace("$(TRAINJOB_NAME)", "wf-train-x7k2p")
    assert expanded == "wf-train-x7k2p-node-0-0.wf-train-x7k2p:37777"


def test_the_launcher_resolves_the_master_and_runs_paddles_launcher() -> None:
    looked_up = []

    def lookup(host: str) -> str:
        looked_up.append(host)
        if len(looked_up) < 2:
            raise OSError("Name or service not known")  # the record is not there yet: retried
        return "10.1.2.3"

    args = ["--master", "job-node-0-0.job:37777", "--nnodes", "2", "--rank", "1", "--nproc_per_node", "4", "t.py"]
    cmd = launch.launcher_argv(args, lookup)
    assert cmd[1:3] == ["-m", "paddle.distributed.launch"]
    assert cmd[3:] == ["--master", "10.1.2.3:37777", "--nnodes", "2", "--rank", "1", "--nproc_per_node", "4", "t.py"]
    assert looked_up == ["job-node-0-0.job", "job-node-0-0.job"]
    # One node: nothing to meet, so no master (as a one-worker PaddleJob).
    assert launch.launcher_argv(["--nnodes", "1", "--nproc_per_node", "2", "t.py"])[3:] == [
        "--nproc_per_node", "2", "t.py",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "args,message",
    [
        (["--nnodes", "2", "--rank", "0"], "needs --master"),
        (["--nnodes", "2", "--master", "h:1", "--rank", "$(JOB_COMPLETION_INDEX)"], "is JOB_COMPLETION_INDEX set"),
        (["--nnodes", "2", "--master", "h:1", "--rank", "2"], "below --nnodes 2"),
        (["--nnodes", "2", "--master", "nohost", "--rank", "0"], "is not HOST:PORT"),
    ],
)
def test_bad_launch_arguments_are_clear_errors(args: list[str], message: str, capsys) -> None:
    assert launch.main([*args, "t.py"]) == 2
    assert message in capsys.readouterr().err


def test_an_unresolvable_master_fails_with_what_to_check() -> None:
    def never(host: str) -> str:
        raise OSError("Name or service not known")

    with pytest.raises(launch.RendezvousError, match="did not resolve within 0s.*jobset-name=<trainjob>"):
        launch.resolve("job-node-0-0.job", 0, never)


def test_the_trainjob_pods_pass_lint(cfg) -> None:
    # With the controller's executor setting, as `paddle-mlops lint argo/` reads it.
    controller = argo_controller.render(cfg)
    docs = [train_deploy.build(cfg).to_dict(), trainjob.cluster_training_runtime(cfg), *controller]
    assert lint_documents(docs, "argo/") == []
    # Without its runtime the TrainJob's pod has no security context: lint says so.
    alone = lint_documents([docs[0], *controller], "argo/train-deploy.yaml")
    assert any("runtime paddle-distributed is not among the linted files" in f.container for f in alone)


def test_nothing_keeps_a_stopped_workflows_trainjob(cfg) -> None:
    text = dump([train_deploy.build(cfg).to_dict()])
    assert check_cleanup(text) == []
    rules = rbac.executor_rules(cfg)
    (rule,) = [r for r in rules if r["apiGroups"] == ["trainer.kubeflow.org"]]
    assert rule["resources"] == ["trainjobs"] and {"create", "get", "list", "delete"} <= set(rule["verbs"])


def test_the_job_deadline_and_restarts_bound_the_run(cfg, manifest) -> None:
    train = train_template(dump([train_deploy.build(cfg).to_dict()]))
    assert manifest["spec"]["activeDeadlineSeconds"] <= train["activeDeadlineSeconds"]
    runtime = trainjob.cluster_training_runtime(cfg)["spec"]["template"]["spec"]
    assert runtime["failurePolicy"]["maxRestarts"] == cfg.training.job.backoff_limit
    # A failed pod fails its Job at once, so JobSet restarts the whole gang (collectives need every rank).
    assert runtime["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] == 0


def test_parameter_servers_on_a_trainjob_are_refused_naming_the_legacy_backend() -> None:
    from paddle_mlops_core.config import ConfigError

    with pytest.raises(ConfigError, match="training.backend: kubeflow-paddlejob"):
        load_config(overrides=["training.job.ps_replicas=2"])
    assert load_config(overrides=["training.backend=kubeflow-paddlejob", "training.job.ps_replicas=2"])


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason="upstream schemas are beside the checkout only (../shared)")
def test_vendored_schemas_are_the_upstream_crds() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "vendor", Path(__file__).parents[1] / "scripts" / "vendor_crd_schemas.py"
    )
    assert spec and spec.loader
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    for crd_file, name in vendor.CRDS.items():
        expected = vendor.vendored((SCHEMAS / crd_file).read_text(encoding="utf-8"))
        have = json.loads((Path(__file__).parent / "schemas" / name).read_text(encoding="utf-8"))
        assert have == json.loads(json.dumps(expected)), name


def test_condition_histories_cover_every_order() -> None:
    """Up to three updates of Suspended before the end, in any order: never a verdict too early."""
    for history in itertools.product([("Suspended", "True"), ("Suspended", "False")], repeat=3):
        conditions: list[tuple[str, str]] = []
        for kind, status in history:
            conditions = _set(conditions, kind, status)
        assert verdict(_status(conditions)) == "waiting"
        assert verdict(_status(_set(conditions, "Complete", "True"), succeeded=1)) == "succeeded"
        assert verdict(_status(_set(conditions, "Failed", "True"))) == "failed"


@pytest.mark.parametrize("backend", ["trainjob", "kubeflow-paddlejob"])
def test_pretrained_weights_on_a_claim_are_mounted_read_only(backend: str) -> None:
    cfg = load_config(
        overrides=[f"training.backend={backend}", "model.pretrained=pvc://ernie-weights/ernie-3.0-medium"]
    )
    manifest = train_manifest(dump([train_deploy.build(cfg).to_dict()]))
    if backend == "trainjob":
        ((_, pod),) = trainjob_pod_templates(manifest, trainjob.cluster_training_runtime(cfg))
    else:
        pod = manifest["spec"]["paddleReplicaSpecs"]["Worker"]["template"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "pretrained"]
    assert volume["persistentVolumeClaim"] == {"claimName": "ernie-weights", "readOnly": True}
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "pretrained"]
    assert mount == {"name": "pretrained", "mountPath": "/mnt/pretrained/ernie-weights", "readOnly": True}
    from tests.validate_manifests import validate_document

    assert validate_document(manifest) == []


def test_a_malformed_claim_location_is_a_config_error() -> None:
    from paddle_mlops_core.config import ConfigError

    with pytest.raises(ConfigError, match="is not pvc://CLAIM/path"):
        load_config(overrides=["model.pretrained=pvc://Bad_Claim/x"])


def _trainer_deadline(created: float, admitted: float | None, active_deadline: int) -> float | None:
    """When Trainer fails a TrainJob for its deadline (trainer v2.3.0 pkg/controller/trainjob_controller.go
    reconcileDeadline: no deadline while suspended; from the Suspended=False transition once Kueue admits it,
    else from creation)."""
    if admitted is None:
        return None
    return max(created, admitted) + active_deadline


@pytest.mark.parametrize("queued_minutes", [0, 31, 45, 120, 239])
def test_a_run_admitted_within_the_queue_budget_gets_its_whole_deadline(queued_minutes: int) -> None:
    """Argo's template deadline runs from the train step's start (the TrainJob's creation), Trainer's from
    admission: the step's deadline must be the queue budget plus the job's, so a run that waited 31 or 45 minutes
    (longer than the old 30-minute schedule_timeout) is never cut before its own deadline ends it."""
    from paddle_mlops_core.config import ConfigError

    cfg = load_config()
    job = cfg.training.job
    train = next(t for t in train_deploy.build(cfg).to_dict()["spec"]["templates"] if t["name"] == "train")
    # The train step's budget runs from the TrainJob's creation (steps/runtime/cluster/train_job.py); Argo gives each
    # attempt, and all of them from the first's start, the budget plus a margin (pipelines/train_step.py).
    step_deadline = job.step_deadline_seconds(cfg.training.backend)
    assert step_deadline == job.queue_timeout_seconds + job.active_deadline_seconds
    assert train["activeDeadlineSeconds"] == step_deadline + train_step.DEADLINE_MARGIN_SECONDS
    assert train["retryStrategy"]["backoff"]["maxDuration"] == f"{train['activeDeadlineSeconds']}s"
    queued = queued_minutes * 60
    assert queued <= job.queue_timeout_seconds
    ends = _trainer_deadline(0, queued, job.active_deadline_seconds)
    assert ends is not None and ends <= step_deadline  # Trainer's deadline comes first: the step reads Failed
    # The sizing before issue 31 (schedule_timeout 30 min + the job's deadline) cut these runs short.
    assert (queued > job.schedule_timeout_seconds) == (
        ends > job.schedule_timeout_seconds + job.active_deadline_seconds
    )
    # And the workflow's own deadline outlives the step (checked at configuration load).
    assert cfg.cluster.workflow_deadline_seconds >= step_deadline + cfg.cluster.step_deadline_seconds
    with pytest.raises(ConfigError, match=r"queue_timeout_seconds \+ active_deadline_seconds = 36000"):
        load_config(overrides=["cluster.workflow_deadline_seconds=36000"])
