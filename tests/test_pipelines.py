"""The pipeline definitions state their intent: DAG order, the gate, GPU training, both operators."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
import yaml

from paddle_mlops.local.dag import DagError, load_workflow
from paddle_mlops_core.config import ConfigError, PipelineConfig, load_config
from paddle_mlops_core.contracts import CLUSTER_ONLY_ANNOTATION, OUTPUTS_DIR, OUTPUTS_FLAG
from pipelines import paddlejob, retrain_cron, rollout_template, train_deploy
from pipelines.job_spec import WORKFLOW_OWNER
from pipelines.train_step import placed_manifest
from steps.runtime.cluster.job_state import job_state
from tests.conftest import PROJECT_ROOT

DAG_ORDER = ["build-image", "prepare-data", "train-cache", "train", "evaluate", "upload"]
# What the published model's notification starts (pipelines/rollout_template.py).
RELEASE_ORDER = ["validate", "register", "rollout"]
ALLOWED_EXPRESSION = re.compile(
    r"\{\{(workflow\.parameters\.[a-z-]+|workflow\.name|workflow\.status|inputs\.parameters\.[a-z-]+"
    r"|tasks\.[a-z-]+\.outputs\.parameters\.[a-z-]+)\}\}"
)


def _cfg(*overrides: str) -> PipelineConfig:
    return load_config(overrides=list(overrides))


@pytest.fixture
def doc() -> dict:
    return train_deploy.build(_cfg()).to_dict()


@pytest.fixture
def legacy_doc() -> dict:
    """train-deploy on the legacy Kubeflow PaddleJob backend (the TrainJob default: tests/test_trainjob.py)."""
    return train_deploy.build(_cfg("training.backend=kubeflow-paddlejob")).to_dict()


def _placed(doc: dict) -> dict:
    """The training job the document's train step places."""
    manifest = placed_manifest(_templates(doc)["train"])
    assert manifest is not None
    return manifest


def _templates(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def _tasks(doc: dict) -> dict[str, dict]:
    dag = _templates(doc)[doc["spec"]["entrypoint"]]["dag"]
    return {t["name"]: t for t in dag["tasks"]}


def dag_order(doc: dict) -> list[str]:
    """The order the local executor derives from the compiled DAG (the list is never written twice)."""
    return [task.name for task in load_workflow(doc).tasks]


# The training image's canary (pipelines/training_canary.py), between build-image and train.
CANARY = ("training-image", "train-canary", "allow-training-image")


def test_dag_runs_the_steps_in_order(doc: dict) -> None:
    assert [name for name in dag_order(doc) if "prepull" not in name and name not in CANARY] == DAG_ORDER
    tasks = _tasks(doc)
    # train also waits for the training image to be allowed (its canary passed, or none was needed).
    expected = {name: before for before, name in pairwise(DAG_ORDER)} | {"train": "train-cache && allow-training-image"}
    assert all(tasks[name].get("depends") == expected[name] for name in DAG_ORDER[1:])


# argo-workflows workflow/common/ancestry.go TaskResult: the results a `depends` expression may name.
ARGO_TASK_RESULTS = ("Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned", "AnySucceeded", "AllFailed")


def test_the_image_is_prepulled_beside_prepare_data_and_released_however_training_ends(doc: dict) -> None:
    """The pre-pull DaemonSets go in the exit handler, which runs however the workflow ends (and again on `argo
    retry`): a main-DAG task after a failed train would be a child of its last attempt (dag.go
    connectDependencies, operator.go getOutboundNodes) and, succeeding, keep `argo retry` from resetting it
    (util.go FormulateRetryWorkflow isDescendantNodeSucceeded; tests/test_upstream_argo_train.py)."""
    tasks = _tasks(doc)
    assert "release-prepull" not in tasks
    exit_tasks = {t["name"]: t for t in _templates(doc)["exit-handler"]["dag"]["tasks"]}
    assert exit_tasks["release-prepull"]["template"] == "release-prepull"
    # Every region pulls once the image is allowed (right away when it was before; after its canary otherwise).
    assert tasks["prepull-image"]["depends"] == "allow-training-image" and tasks["prepull-image"]["continueOn"] == {
        "failed": True
    }  # a failed pre-pull only costs the cold pull it was to save
    legacy = train_deploy.build(_cfg("training.backend=kubeflow-paddlejob")).to_dict()
    assert "prepull-image" not in _tasks(legacy)
    assert "release-prepull" not in {t["name"] for t in _templates(legacy)["exit-handler"]["dag"]["tasks"]}


def test_dag_order_reads_depends_expressions_and_rejects_cycles(doc: dict) -> None:
    tasks = _tasks(doc)
    tasks["upload"]["depends"] = "evaluate.Succeeded || train.Skipped"
    assert dag_order(doc)[-1] == "upload"
    tasks["build-image"]["depends"] = "upload"
    with pytest.raises(DagError, match="cycle"):
        dag_order(doc)


def test_build_has_no_side_effects_and_is_deterministic() -> None:
    assert train_deploy.build(_cfg()).to_dict() == train_deploy.build(_cfg()).to_dict()


def test_workflow_parameters_and_defaults(doc: dict) -> None:
    params = {p["name"]: p.get("value") for p in doc["spec"]["arguments"]["parameters"]}
    assert params == {
        "git-sha": None,
        "git-repo": None,
        "git-branch": "main",
        "pusher": "",
        "config": "configs/pipeline.yaml",
        "env": "prod",
        "task": "sentiment",
        "overrides": "[]",
        "workspace": "s3://paddle-mlops/runs",
        "step-cache": "s3://paddle-mlops/step-cache",
        "rerun": "",
        "region": "cn-north",
        "priority": "normal",
        "run-id": "",
    }
    by_name = {p["name"]: p for p in doc["spec"]["arguments"]["parameters"]}
    assert by_name["priority"]["enum"] == ["urgent", "normal", "batch"]
    # Every configured task, and only those: a typo is refused at submission, not inside a step.
    assert by_name["task"]["enum"] == sorted(p.stem for p in (PROJECT_ROOT / "configs" / "tasks").glob("*.yaml"))


def test_publishing_waits_for_the_gate_and_hands_over_to_the_notification(doc: dict) -> None:
    """train-deploy ends with upload: registering and rolling out belong to the rollout its notification starts,
    so a model is registered and rolled out once, by one path, wherever it was published from."""
    assert _tasks(doc)["upload"]["when"] == "{{tasks.evaluate.outputs.parameters.gate-passed}} == true"
    assert not {"register", "rollout"} & set(_tasks(doc))


def test_the_release_runs_validate_register_rollout_on_the_verdict() -> None:
    release = rollout_template.build(_cfg()).to_dict()
    assert dag_order(release) == RELEASE_ORDER
    tasks = _tasks(release)
    assert all(tasks[name].get("depends") == before for before, name in pairwise(RELEASE_ORDER))
    assert tasks["register"]["when"] == "{{tasks.validate.outputs.parameters.verdict}} != duplicate"
    assert tasks["rollout"]["when"] == "{{tasks.validate.outputs.parameters.verdict}} == passed"


def test_exit_handler_closes_the_run_and_releases_the_training_jobs(doc: dict) -> None:
    assert doc["spec"]["onExit"] == "exit-handler"
    templates = _templates(doc)
    tasks = {t["name"]: t["template"] for t in templates["exit-handler"]["dag"]["tasks"]}
    assert tasks == {n: n for n in ("close-runs", "release-train-jobs", "release-prepull")}
    close = templates["close-runs"]["container"]
    assert close["command"] == ["python", "-m", "steps.close_run"]
    assert "{{workflow.status}}" in close["args"]
    release = templates["release-train-jobs"]["container"]
    assert release["command"] == ["python", "-m", "steps.release_train_jobs"]
    assert release["args"][release["args"].index("--job-kind") + 1] == "TrainJob"
    # Other workflows have no training job: their exit handler is the one container.
    release_doc = _templates(rollout_template.build(_cfg()).to_dict())
    assert release_doc["exit-handler"]["container"]["command"] == ["python", "-m", "steps.close_run"]


def test_every_value_is_an_expression_the_local_executor_understands(doc: dict) -> None:
    # Prometheus metric blocks are read by the Argo controller only ({{duration}}, {{status}}); a template only a
    # cluster runs is skipped locally; of a train step, locally only its job's command runs (the step that places and
    # watches the job on a cluster, its ownerReference and its mutex need one).
    def runnable_template(t: dict) -> dict:
        if CLUSTER_ONLY_ANNOTATION in (t.get("metadata") or {}).get("annotations", {}):
            return {}
        placed = placed_manifest(t)
        if placed is not None:
            return {"inputs": t.get("inputs"), "command": placed["spec"]["trainer"]["command"]}
        return {k: v for k, v in t.items() if k != "metrics"}

    runnable = {**doc, "spec": {**doc["spec"], "templates": [runnable_template(t) for t in doc["spec"]["templates"]]}}
    text = yaml.safe_dump(runnable)
    for expression in re.findall(r"\{\{[^}]*\}\}", text):
        assert ALLOWED_EXPRESSION.fullmatch(expression), expression


def test_step_outputs_are_declared_at_the_contract_paths(doc: dict) -> None:
    templates = _templates(doc)
    declared = {
        name: {p["name"]: p["valueFrom"]["path"] for p in t.get("outputs", {}).get("parameters", [])}
        for name, t in templates.items()
    }
    assert declared["build-image"] == {
        "image-digest": "/tmp/outputs/image-digest",
        "serve-image-digest": "/tmp/outputs/serve-image-digest",
        "git-sha": "/tmp/outputs/git-sha",
    }
    assert set(declared["evaluate"]) == {"gate-passed", "mlflow-run-id", "metrics", "cache"}
    assert set(declared["upload"]) == {"model-uri", "manifest-digest", "cache"}
    assert set(declared["train-cache"]) == {"reused", "key", "run", "cache"}
    release = _templates(rollout_template.build(_cfg()).to_dict())
    declared |= {
        name: {p["name"]: p["valueFrom"]["path"] for p in t.get("outputs", {}).get("parameters", [])}
        for name, t in release.items()
    }
    templates = {**templates, **release}
    assert set(declared["validate"]) == {
        "verdict", "reason", "model-uri", "manifest-digest", "metrics", "run-id", "image-digest", "git-sha",
        "registered-version",
    }  # fmt: skip
    assert set(declared["register"]) == {"model-version"}
    assert set(declared["rollout"]) == {"serving-url", "outcome"}
    for name, outputs in declared.items():
        args = templates[name].get("container", {}).get("args", [])
        # Each output is read from <dir>/<name>, the directory the step is told with --outputs-dir.
        assert all(path == f"{OUTPUTS_DIR}/{output}" for output, path in outputs.items()), name
        assert (args[args.index(OUTPUTS_FLAG) + 1] == OUTPUTS_DIR) if outputs else OUTPUTS_FLAG not in args, name


def test_inputs_used_in_args_are_declared_and_passed(doc: dict) -> None:
    templates, tasks = _templates(doc), _tasks(doc)
    for name, task in tasks.items():
        template = templates[task["template"]]
        declared = {p["name"] for p in template.get("inputs", {}).get("parameters", [])}
        passed = {p["name"] for p in task.get("arguments", {}).get("parameters", [])}
        used = set(re.findall(r"\{\{inputs\.parameters\.([a-z-]+)\}\}", yaml.safe_dump(template)))
        assert used == declared == passed, name


def test_train_requests_gpus_and_is_placed_by_region(legacy_doc: dict) -> None:
    manifest = _placed(legacy_doc)
    pod = manifest["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"region": "cn-north", "gpu-type": "a100", "cost-tier": "standard"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["priorityClassName"] == "team-nlp-training"
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_train_image_is_pinned_by_the_build_digest(legacy_doc: dict) -> None:
    manifest = _placed(legacy_doc)
    image = manifest["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/paddle-mlops/train@{{inputs.parameters.image-digest}}"


def test_worker_command_follows_the_training_launch_contract(legacy_doc: dict) -> None:
    manifest = _placed(legacy_doc)
    command = manifest["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[:8] == [
        "python", "-m", "paddle.distributed.launch", "--nproc_per_node", "1", "--log_dir", "/tmp/paddle-log",
        "steps/train.py",
    ]  # fmt: skip
    assert command[command.index("--workspace") + 1] == "{{workflow.parameters.workspace}}/{{workflow.name}}"


@pytest.mark.parametrize("operator", ["kubeflow", "paddle"])
@pytest.mark.parametrize("ps_replicas", [0, 2])
def test_both_operators_and_topologies(operator: str, ps_replicas: int) -> None:
    cfg = _cfg(
        f"training.backend={'kubeflow-paddlejob' if operator == 'kubeflow' else 'paddle-operator'}",
        # The Paddle operator must run without its init container (tests/test_upstream_paddle_operator.py).
        f"training.job.paddle_operator_init_container={operator == 'kubeflow'}",
        f"training.job.ps_replicas={ps_replicas}",
        "training.job.workers=3",
        "training.job.gpus_per_worker=4",
    )
    job = paddlejob.build_paddlejob(cfg)
    # The train step judges each kind by what its operator reports as final (tests/test_upstream_*_operator.py).
    assert job_state({**job.manifest, "status": {}}).phase == "queued"
    spec = job.manifest["spec"]
    if operator == "kubeflow":
        assert job.manifest["apiVersion"] == "kubeflow.org/v1"
        assert spec["paddleReplicaSpecs"]["Worker"]["replicas"] == 3
        assert ("Master" in spec["paddleReplicaSpecs"]) == (ps_replicas > 0)
        policy = spec["runPolicy"]
        assert policy["schedulingPolicy"]["scheduleTimeoutSeconds"] == 1800
        assert policy["schedulingPolicy"]["minAvailable"] == 3 + ps_replicas
        assert policy["backoffLimit"] == 3 and policy["activeDeadlineSeconds"] == 21600
        worker = spec["paddleReplicaSpecs"]["Worker"]["template"]["spec"]
    else:
        assert job.manifest["apiVersion"] == "batch.paddlepaddle.org/v1"
        assert ("ps" in spec) == (ps_replicas > 0)
        assert spec["worker"]["replicas"] == 3
        worker = spec["worker"]["template"]["spec"]
    command = worker["containers"][0]["command"]
    assert command[command.index("--nproc_per_node") + 1] == "4"
    assert ("--run_mode" in command) == (ps_replicas > 0)
    assert worker["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == 4


def test_cpu_training_requests_no_gpu_and_no_gpu_nodes() -> None:
    job = paddlejob.build_paddlejob(_cfg("training.backend=kubeflow-paddlejob", "training.job.gpus_per_worker=0"))
    pod = job.manifest["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_train_template_places_the_job_owned_by_the_workflow_under_the_runs_mutex(doc: dict) -> None:
    train = _templates(doc)["train"]
    # One container places the job and watches it (pipelines/train_step.py; tests/test_upstream_argo_train.py).
    assert train["container"]["command"] == ["python", "-m", "steps.train_job"]
    assert "resource" not in train and "hooks" not in _tasks(doc)["train"]
    manifest = placed_manifest(train)
    assert manifest is not None
    assert manifest["metadata"]["ownerReferences"] == [dict(WORKFLOW_OWNER)]
    assert manifest["metadata"]["labels"]["paddle-mlops/train-run"] == "{{inputs.parameters.train-run}}"
    assert train["synchronization"] == {"mutexes": [{"name": "{{inputs.parameters.train-run}}"}]}
    # Kueue queue budget (4 h) + the job's own deadline (6 h), which starts at admission, enforced by the step from
    # the job's creation; Argo gives the step 10 more minutes per attempt and across its retries.
    assert train["activeDeadlineSeconds"] == 36600 and "timeout" not in train
    assert train["retryStrategy"]["backoff"]["maxDuration"] == "36600s"
    assert _tasks(doc)["train"]["arguments"]["parameters"][-1] == {
        "name": "train-run", "value": "{{tasks.train-cache.outputs.parameters.run}}"
    }  # fmt: skip


def test_unknown_region_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="configs/regions/mars.yaml"):
        train_deploy.build(_cfg("training.backend=kubeflow-paddlejob", "cluster.region=mars"))


def test_rollout_template_takes_an_event_or_a_model_uri_and_holds_the_rollout_lock() -> None:
    doc = rollout_template.build(_cfg()).to_dict()
    assert doc["metadata"]["name"] == "rollout"
    params = {p["name"]: p.get("value") for p in doc["spec"]["arguments"]["parameters"]}
    assert {"event-bucket", "event-key", "event-etag", "model-uri", "region", "image-digest", "redeploy"} <= set(params)
    assert params["redeploy"] == "false" and params["model-uri"] == "" and params["image-digest"] == ""
    assert doc["spec"]["onExit"] == "exit-handler"
    # One release at a time changes the InferenceServices: image-rollout holds the same mutex.
    from pipelines import image_rollout

    lock = doc["spec"]["synchronization"]
    assert lock == {"mutexes": [{"name": "rollout-{{workflow.parameters.task}}"}]}  # one lock per task
    assert image_rollout.build(_cfg()).to_dict()["spec"]["synchronization"] == lock


def test_cron_references_the_template_and_never_overlaps() -> None:
    doc = retrain_cron.build(_cfg()).to_dict()
    spec = doc["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["schedules"] == ["0 3 * * 1"]
    assert spec["startingDeadlineSeconds"] > 0
    assert spec["workflowSpec"]["workflowTemplateRef"] == {"name": train_deploy.NAME}
    assert "templates" not in spec["workflowSpec"]  # one definition of the DAG
