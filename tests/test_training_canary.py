"""A new training image trains in one region first (#39 item 6; pipelines/training_canary.py), in train-deploy and
before finetune-batch's fan-out; the legacy PaddleJob backends have none.

The DAG is walked as Argo walks it: `depends` over the task results of argo-workflows v4.1.2 workflow/common/
ancestry.go (a bare name is Succeeded || Skipped || Daemoned), `when` after substitution as govaluate compares two
words (operator.go; tests/test_upstream_argo_when.py), a task whose `depends` is not met Omitted (dag.go) — through
the local executor's `depends_met` and `evaluate_when`, which mirror exactly those forms. The record steps are the
real `steps.training_image`; the canary's TrainJob result is what the test says it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures_ernie import common, prepared_workspace

from paddle_mlops.lint import resource_manifest
from paddle_mlops.local.dag import depends_met, evaluate_when, load_workflow
from paddle_mlops_core.config import ConfigError, load_config, load_regions
from paddle_mlops_core.config.loader import known_tasks
from pipelines import finetune_batch, train_deploy, training_canary
from pipelines.labels import TRAIN_RUN_LABEL, WORKFLOW_LABEL
from steps import train, training_image
from steps.runtime.release import training_images

OLD, NEW = "sha256:" + "0a" * 32, "sha256:" + "1b" * 32


@pytest.fixture
def cfg(tmp_path: Path) -> Any:
    return load_config(overrides=[f"storage.uri={tmp_path / 'store'}", "storage.endpoint_url=null"])


def check(cfg: Any, digest: str, tmp_path: Path) -> str:
    out = tmp_path / f"check-{digest[-4:]}"
    args = ["--env", "local", "--overrides", json.dumps([f"storage.uri={cfg.storage.uri}"]), "--outputs-dir", str(out)]
    assert training_image.main([*args, "--image-digest", digest, "--canary-region", "cn-north", "--check"]) == 0
    return (out / "allowed").read_text()


def allow(cfg: Any, digest: str) -> None:
    args = ["--env", "local", "--overrides", json.dumps([f"storage.uri={cfg.storage.uri}"])]
    assert training_image.main([*args, "--image-digest", digest, "--canary-region", "cn-north", "--allow"]) == 0


def walk(doc: dict[str, Any], results: dict[str, str], allowed: str) -> dict[str, str]:
    """Each task's status as Argo's DAG gives it: `results` for the tasks that run (default Succeeded), with the step
    cache missing the training (a new image is a new training key)."""
    statuses: dict[str, str] = {}
    for task in load_workflow(doc).tasks:
        if not depends_met(task.depends_expr, statuses, task.depends):
            statuses[task.name] = "Omitted"
        elif task.when and not evaluate_when(task.when.replace(_ALLOWED, allowed).replace(_REUSED, "false")):
            statuses[task.name] = "Skipped"
        else:
            statuses[task.name] = results.get(task.name, "Succeeded")
    return statuses


def _exit_tasks(doc: dict[str, Any]) -> set[str]:
    (handler,) = [t for t in doc["spec"]["templates"] if t["name"] == doc["spec"]["onExit"]]
    return {t["name"] for t in handler["dag"]["tasks"]}


_ALLOWED = "{{tasks.training-image.outputs.parameters.allowed}}"
# The step cache held no model for this run (a new image is a new training key: docs/caching.md).
_REUSED = "{{tasks.train-cache.outputs.parameters.reused}}"


def test_an_image_allowed_before_skips_the_canary_and_trains_everywhere(cfg: Any, tmp_path: Path) -> None:
    allow(cfg, OLD)
    assert check(cfg, OLD, tmp_path) == "true"
    statuses = walk(train_deploy.build(cfg).to_dict(), {}, "true")
    assert {n: statuses[n] for n in ("prepull-canary", "train-canary", "allow-training-image")} == dict.fromkeys(
        ("prepull-canary", "train-canary", "allow-training-image"), "Skipped"
    )
    assert statuses["train"] == statuses["prepull-image"] == "Succeeded"


def test_a_failing_canary_keeps_the_old_training_image(cfg: Any, tmp_path: Path) -> None:
    """The new image trains in the first region only; its canary fails: nothing is recorded, no other region pulls
    it, the run does not train on it, and the image allowed before is still the one allowed."""
    allow(cfg, OLD)
    assert check(cfg, NEW, tmp_path) == "false"
    statuses = walk(train_deploy.build(cfg).to_dict(), {"train-canary": "Failed"}, "false")
    assert statuses["prepull-canary"] == "Succeeded" and statuses["train-canary"] == "Failed"
    assert statuses["allow-training-image"] == statuses["train"] == statuses["prepull-image"] == "Omitted"
    # nothing below the failed canary succeeds (`argo retry` runs it again); its pre-pull goes in the exit handler
    before = {"build-image", "training-image", "prepare-data", "train-cache", "prepull-canary"}
    assert {n for n, status in statuses.items() if status == "Succeeded"} <= before
    assert _exit_tasks(train_deploy.build(cfg).to_dict()) >= {"release-prepull"}
    assert check(cfg, NEW, tmp_path) == "false" and check(cfg, OLD, tmp_path) == "true"
    assert [d["image_digest"] for d in training_images.allowed_images(cfg)] == [OLD]


def test_a_passing_canary_allows_the_image_everywhere_then_the_run_trains(cfg: Any, tmp_path: Path) -> None:
    statuses = walk(train_deploy.build(cfg).to_dict(), {}, "false")
    assert statuses["train-canary"] == statuses["allow-training-image"] == "Succeeded"
    allow(cfg, NEW)  # what allow-training-image runs
    assert statuses["train"] == statuses["prepull-image"] == "Succeeded"
    (doc,) = training_images.allowed_images(cfg)
    assert doc["image_digest"] == NEW and doc["canary"]["region"] == "cn-north"
    allow(cfg, NEW)  # a retried step changes nothing
    assert training_images.allowed_images(cfg) == [doc]
    # A failed pre-pull in the first region only costs the cold pull: the canary still runs.
    assert walk(train_deploy.build(cfg).to_dict(), {"prepull-canary": "Failed"}, "false")["train-canary"] == "Succeeded"


def _resource(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """What template `name` creates: a resource template's manifest, or the job a train step places."""
    (template,) = [t for t in doc["spec"]["templates"] if t["name"] == name]
    found = resource_manifest(template)
    assert found is not None, name
    return found


def test_the_canary_is_the_runs_trainjob_pinned_to_the_first_region(cfg: Any) -> None:
    doc = train_deploy.build(cfg).to_dict()
    canary, real = _resource(doc, "train-canary"), _resource(doc, "train")
    first = training_canary.canary_region(cfg).name
    assert first == "cn-north"  # team nlp's first region

    def regions(job: dict[str, Any]) -> list[str]:
        pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        affinity = pod["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        return term["matchExpressions"][0]["values"]

    assert regions(canary) == [first] and regions(real) == ["cn-north", "cn-east"]
    for key in ("image", "numNodes", "resourcesPerNode"):
        assert canary["spec"]["trainer"][key] == real["spec"]["trainer"][key], key
    command = canary["spec"]["trainer"]["command"]
    ws = "{{workflow.parameters.workspace}}/{{workflow.name}}"
    assert command[command.index("--workspace") + 1] == f"{ws}/training-canary"
    assert command[command.index("--data") + 1] == f"{ws}/data"
    assert command[command.index("--canary-steps") + 1] == str(cfg.training.canary_steps)
    # the run's training records its model in the step cache; a canary's few steps never do
    real_command = real["spec"]["trainer"]["command"]
    assert "--step-cache" in real_command and "--train-key" in real_command
    assert "--step-cache" not in command and "--train-key" not in command
    env = {e["name"]: e.get("value") for e in canary["spec"]["trainer"]["env"]}
    assert env["MLFLOW_TRACKING_URI"] == training_canary.CANARY_TRACKING_URI  # no run in the real experiment
    pull = _resource(doc, "prepull-canary")
    terms = pull["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    selectors = [{e["key"]: e["values"][0] for e in t["matchExpressions"]} for t in terms["nodeSelectorTerms"]]
    assert selectors == [load_regions()[first].node_selector()]


@pytest.mark.slow
def test_the_canary_run_trains_a_few_steps_and_keeps_nothing_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """steps/train.py --canary-steps: that many optimizer steps on the run's prepared data (--data), in a scratch
    area; the run's own workspace gets no model."""
    ws = prepared_workspace(tmp_path / "run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'canary.db'}")
    area = ws / "training-canary"
    assert train.main([*common(), "--workspace", str(area), "--data", str(ws / "data"), "--canary-steps", "3"]) == 0
    report = json.loads((area / "model" / "training.json").read_text())
    assert report["global_steps"] == 3
    assert not (ws / "model").exists()
    # Nor the runs' checkpoints: a canary neither reads nor writes them (not even with the run's own run id).
    assert not (ws / "train").exists() and not (area / "train").exists()


# -- finetune-batch: the same canary before its fan-out ---------------------------------------------------------------

CANARY_TASKS = (training_canary.DATA, "prepull-canary", "train-canary", "allow-training-image")


def _main_tasks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (main,) = [t for t in doc["spec"]["templates"] if t["name"] == "main"]
    return {t["name"]: t for t in main["dag"]["tasks"]}


def dag_phase(doc: dict[str, Any], statuses: dict[str, str]) -> str:
    """The main DAG's phase as argo-workflows workflow/controller/dag.go assessDAGPhase judges it (read at commit
    32cbee0): by its leaf tasks, an Omitted task taking its parents' phase with Failed preferred; Failed when a leaf's
    is (none here has continueOn)."""
    tasks = load_workflow(doc).tasks
    phase: dict[str, str] = {}
    for task in tasks:  # in dependency order
        status = statuses[task.name]
        inherited = [phase[d] for d in task.depends]
        phase[task.name] = ("Failed" if "Failed" in inherited else "Succeeded") if status == "Omitted" else status
    leaves = [t.name for t in tasks if not any(t.name in other.depends for other in tasks)]
    return "Failed" if any(phase[leaf] in ("Failed", "Errored") for leaf in leaves) else "Succeeded"


def test_finetune_batch_trains_no_branch_before_the_canary_allowed_the_image(cfg: Any, tmp_path: Path) -> None:
    """The fan-out (every branch's training) and the other regions' pre-pull wait for allow-training-image: skipped
    for an image allowed before, run after the canary passed in the first region for a new one."""
    doc = finetune_batch.build(cfg).to_dict()
    tasks = _main_tasks(doc)
    # batch-run (the batch's parent MLflow run, after build-image) runs beside the canary, adding no wait
    assert tasks[finetune_batch.FAN_OUT]["depends"] == f"{finetune_batch.PARENT_RUN} && allow-training-image"
    assert tasks[finetune_batch.PARENT_RUN]["depends"] == "build-image"
    assert tasks["prepull-image"]["depends"] == "allow-training-image"
    allow(cfg, OLD)
    assert check(cfg, OLD, tmp_path) == "true"
    statuses = walk(doc, {}, "true")
    assert {n: statuses[n] for n in CANARY_TASKS} == dict.fromkeys(CANARY_TASKS, "Skipped")
    assert statuses[finetune_batch.FAN_OUT] == statuses["prepull-image"] == statuses["summary"] == "Succeeded"
    assert check(cfg, NEW, tmp_path) == "false"
    statuses = walk(doc, {}, "false")
    assert {n: statuses[n] for n in CANARY_TASKS} == dict.fromkeys(CANARY_TASKS, "Succeeded")
    assert statuses[finetune_batch.FAN_OUT] == statuses["prepull-image"] == "Succeeded"


def test_a_failing_canary_keeps_the_old_training_image_for_the_batch(cfg: Any, tmp_path: Path) -> None:
    """A new image's canary fails in the first region: no branch trains on it, no other region pulls it, nothing is
    recorded; the batch stops there (as train-deploy does) and the image allowed before is still the one allowed."""
    allow(cfg, OLD)
    assert check(cfg, NEW, tmp_path) == "false"
    doc = finetune_batch.build(cfg).to_dict()
    for failed in ("train-canary", training_canary.DATA):  # the canary, or the data it trains on
        statuses = walk(doc, {failed: "Failed"}, "false")
        assert statuses["prepull-canary"] == "Succeeded" and statuses[failed] == "Failed"
        omitted = ("allow-training-image", finetune_batch.FAN_OUT, "prepull-image", "summary")
        assert {n: statuses[n] for n in omitted} == dict.fromkeys(omitted, "Omitted"), failed
        assert "release-prepull" not in statuses and _exit_tasks(doc) >= {"release-prepull"}  # the exit handler's
        # the batch's parent MLflow run was opened: the exit handler's close-runs ends it FAILED by its workflow tag
        # (tests/test_batch_run.py::test_the_exit_handler_closes_a_parent_the_workflow_left_running)
        assert statuses[finetune_batch.PARENT_RUN] == "Succeeded" and _exit_tasks(doc) >= {"close-runs"}
        assert dag_phase(doc, statuses) == "Failed"  # the batch stops: the omitted summary takes the canary's phase
    assert check(cfg, NEW, tmp_path) == "false" and check(cfg, OLD, tmp_path) == "true"
    assert [d["image_digest"] for d in training_images.allowed_images(cfg)] == [OLD]
    # A failed pre-pull in the first region only costs the cold pull: the canary and then the batch still run.
    statuses = walk(doc, {"prepull-canary": "Failed"}, "false")
    assert statuses["train-canary"] == statuses[finetune_batch.FAN_OUT] == "Succeeded"
    assert dag_phase(doc, walk(doc, {}, "false")) == "Succeeded"


def test_the_batch_canary_trains_the_workflow_task_on_data_it_prepared(cfg: Any) -> None:
    """The branches prepare their data after the fan-out, so the batch's canary prepares the workflow task's data
    itself, where the canary TrainJob (the same one train-deploy runs) reads it; its exit hook deletes it by the
    workflow label it carries, through the exit handler's release-train-jobs."""
    doc = finetune_batch.build(cfg).to_dict()
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    data = templates[training_canary.DATA]["container"]["args"]
    canary = _resource(doc, "train-canary")
    assert canary == _resource(train_deploy.build(cfg).to_dict(), "train-canary")
    command = canary["spec"]["trainer"]["command"]
    ws = "{{workflow.parameters.workspace}}/{{workflow.name}}"
    assert data[data.index("--output") + 1] == command[command.index("--data") + 1] == f"{ws}/data"
    assert data[data.index("--task") + 1] == command[command.index("--task") + 1] == "{{workflow.parameters.task}}"
    overrides = "{{workflow.parameters.overrides}}"
    assert data[data.index("--overrides") + 1] == command[command.index("--overrides") + 1] == overrides
    # not a branch's workspace: batch-summary reads <run>/<task> only, and no task is called `data`
    assert "data" not in known_tasks()
    # No hook: the exit handler releases the workflow's jobs after a person's stop, the canary's among them
    # (pipelines/train_step.py); the canary is no training run (no mutex, no run label).
    assert "hooks" not in _main_tasks(doc)["train-canary"]
    labels = canary["metadata"]["labels"]
    assert labels[WORKFLOW_LABEL] == "{{workflow.name}}" and TRAIN_RUN_LABEL not in labels
    assert "synchronization" not in templates["train-canary"]


def test_train_deploy_and_finetune_batch_wire_the_canary_alike(cfg: Any) -> None:
    """One canary, two workflows: the same tasks, templates, arguments, `when` and `depends`, except that the batch's
    canary trains after its own prepare-canary-data."""
    single, batch = _main_tasks(train_deploy.build(cfg).to_dict()), _main_tasks(finetune_batch.build(cfg).to_dict())
    for name in ("training-image", "prepull-canary", "train-canary", "allow-training-image"):
        ours, theirs = dict(single[name]), dict(batch[name])
        if name == "train-canary":
            assert ours.pop("depends").replace("prepare-data", training_canary.DATA) == theirs.pop("depends")
        assert ours == theirs, name


def test_legacy_paddlejob_backends_have_no_canary(tmp_path: Path) -> None:
    """kubeflow-paddlejob / paddle-operator place every run in cluster.region alone (its GPU node selector): there is
    no other region to hold a new image back from, so neither workflow has a canary, and asking for one says why."""
    cfg = load_config(overrides=[f"storage.uri={tmp_path / 'store'}", "training.backend=kubeflow-paddlejob"])
    assert not training_canary.applies(cfg)
    for build in (train_deploy.build, finetune_batch.build):
        names = {t["name"] for t in build(cfg).to_dict()["spec"]["templates"]}
        assert not names & {"training-image", *CANARY_TASKS, "prepull-image"}, build
    job = _resource(train_deploy.build(cfg).to_dict(), "train")
    (worker,) = job["spec"]["paddleReplicaSpecs"].values()
    region = load_regions()[cfg.cluster.region]
    assert worker["template"]["spec"]["nodeSelector"] == region.node_selector()  # one region, always
    with pytest.raises(ConfigError, match=r"no training image canary.*cluster\.region"):
        training_canary.canary_trainjob(cfg)
    with pytest.raises(ConfigError, match="no training image canary"):
        training_canary.tasks(cfg)
