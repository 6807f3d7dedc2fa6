"""The `finetune-batch` WorkflowTemplate (#17 item 7): one train-deploy branch per task, in parallel, each with
its own task, overrides, workspace and training job; a failing branch cancels nothing; a summary at the end.

Upstream behaviour encoded here (argo-workflows v4.1.2):
- workflow/controller/dag.go expandTask + common.go: a `withParam` task runs its template once per item of the
  JSON list, `{{item.key}}` rendered into its arguments (a non-string item value as its JSON text);
- dag.go assessDAGPhase: a DAG's phase is its leaf tasks' (`summary`), and failFast stops only new tasks, so the
  branches already started run on; failFast is off here anyway;
- dag.go buildLocalScopeFromTask -> scope.go createScope: a task's exit hook arguments resolve in the scope of
  the DAG template it runs in, so `{{inputs.parameters.task}}` there is the branch's task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from paddle_mlops.batch import batch_items, task_overrides
from paddle_mlops.local import fanout
from paddle_mlops.local.dag import Scope, container_command, dag_tasks, depends_met, load_workflow, task_inputs
from paddle_mlops_core.config import ConfigError, load_config
from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER, TRAIN_RUN_LABEL, train_run_name
from pipelines import finetune_batch
from pipelines.labels import TASK_LABEL
from pipelines.train_step import placed_manifest
from tests.fixtures_ernie import CONFIG
from tests.validate_manifests import validate_document

ARGO = Path(__file__).resolve().parents[1] / "argo"
THREE = [
    {"task": "sentiment", "overrides": []},
    {"task": "ner", "overrides": ["training.epochs=3"]},
    {"task": "text-matching", "overrides": ["data.source=s3://data/pairs.tsv"]},
]


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    (found,) = yaml.safe_load_all((ARGO / "finetune-batch.yaml").read_text(encoding="utf-8"))
    return found


def test_the_generated_template_validates_strictly(doc: dict[str, Any]) -> None:
    assert validate_document(doc, "WorkflowTemplate") == []
    typo = json.loads(json.dumps(doc))
    typo["spec"]["templates"][0]["withParams"] = "x"
    assert validate_document(typo, "WorkflowTemplate") != []


def _branches(doc: dict[str, Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Argo makes of the fan-out: each item's branch inputs, and the commands its tasks run."""
    workflow = load_workflow(doc)
    fan = next(t for t in workflow.tasks if t.name == finetune_batch.FAN_OUT)
    outer = Scope("finetune-batch-x", {**workflow.parameters, "tasks": json.dumps(items)})
    outer.task_outputs["build-image"] = {"git-sha": "abc", "image-digest": "sha256:1", "serve-image-digest": "sha256:2"}
    outer.task_outputs[finetune_batch.PARENT_RUN] = {"parent-run-id": "parent-1"}
    out = []
    for item in fanout.items(fan, outer):
        inputs = task_inputs(fan, Scope(outer.workflow_name, outer.parameters, outer.task_outputs, item=item))
        branch = Scope(outer.workflow_name, outer.parameters, inputs=inputs)
        branch.task_outputs["evaluate"] = {"mlflow-run-id": "run1", "gate-passed": "true", "metrics": "{}"}
        commands = {}
        for task in dag_tasks(fan.template, workflow.templates):
            placed = placed_manifest(task.template)
            if placed is None:
                own = task_inputs(task, branch)
                commands[task.name] = [branch.render(part, own) for part in container_command(task)]
            else:  # the job the branch's train step places
                run = train_run_name(inputs["task"], f"key-of-{inputs['task']}")
                own = {**inputs, "train-key": f"key-of-{inputs['task']}", "train-run": run}
                rendered = branch.render(yaml.safe_dump(placed).replace("{{workflow.uid}}", "uid-1"), own)
                commands[task.name] = yaml.safe_load(rendered)
        out.append({"inputs": inputs, "commands": commands})
    return out


def _arg(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_three_tasks_fan_out_into_three_branches_each_with_its_task(doc: dict[str, Any]) -> None:
    branches = _branches(doc, THREE)
    assert [b["inputs"]["task"] for b in branches] == ["sentiment", "ner", "text-matching"]
    for item, branch in zip(THREE, branches, strict=True):
        task = item["task"]
        # Argo renders a list item value as its JSON text: what --overrides parses.
        assert json.loads(branch["inputs"]["overrides"]) == item["overrides"]
        for step in ("prepare-data", "evaluate", "upload"):
            command = branch["commands"][step]
            assert _arg(command, "--task") == task and json.loads(_arg(command, "--overrides")) == item["overrides"]
        assert _arg(branch["commands"]["prepare-data"], "--output").endswith(f"/finetune-batch-x/{task}/data")
        job = branch["commands"]["train"]
        node = job["spec"]["trainer"]["command"]
        assert _arg(node, "--task") == task and _arg(node, "--workspace").endswith(f"/finetune-batch-x/{task}")
        assert job["metadata"]["labels"][TASK_LABEL] == task  # its own worker group
        assert job["spec"]["trainer"]["image"].endswith("@sha256:1")
    # Three branches, three workspaces, three training jobs: nothing shared.
    assert len({_arg(b["commands"]["evaluate"], "--workspace") for b in branches}) == 3


def test_a_failing_branch_cancels_nothing_and_the_summary_runs_after_all(doc: dict[str, Any]) -> None:
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    main = templates["main"]["dag"]
    assert main["failFast"] is False
    tasks = {t["name"]: t for t in main["tasks"]}
    assert tasks["finetune"]["withParam"] == "{{workflow.parameters.tasks}}"
    summary_depends = tasks["summary"]["depends"]
    for status in ("Succeeded", "Failed", "Errored"):
        assert depends_met(summary_depends, {"finetune": status}, ())
    # Each branch's chain is the train-deploy chain, publishing only past its own gate.
    branch = {t["name"]: t for t in templates[finetune_batch.BRANCH_TEMPLATE]["dag"]["tasks"]}
    assert [branch[n].get("depends") for n in ("train-cache", "train", "evaluate", "upload")] == [
        "prepare-data",
        "train-cache",
        "train",
        "evaluate",
    ]
    assert branch["upload"]["when"] == "{{tasks.evaluate.outputs.parameters.gate-passed}} == true"


def test_each_branch_trains_under_its_own_runs_mutex_with_no_hook(doc: dict[str, Any]) -> None:
    """A branch's training run is its task's (contracts.train_run_name hashes the task in): branches never wait on
    each other's mutex, and each job carries its own run; nothing deletes a branch's job from a hook
    (pipelines/train_step.py; the exit handler releases the workflow's jobs after a person's stop)."""
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    train = next(t for t in templates[finetune_batch.BRANCH_TEMPLATE]["dag"]["tasks"] if t["name"] == "train")
    assert "hooks" not in train
    run = next(p["value"] for p in train["arguments"]["parameters"] if p["name"] == "train-run")
    assert run == "{{tasks.train-cache.outputs.parameters.run}}"
    assert templates[train["template"]]["synchronization"]["mutexes"] == [{"name": "{{inputs.parameters.train-run}}"}]
    runs = {b["commands"]["train"]["metadata"]["labels"][TRAIN_RUN_LABEL] for b in _branches(doc, THREE)}
    assert len(runs) == 3
    assert train_run_name("ner", "same-run-id") != train_run_name("sentiment", "same-run-id")


def test_the_summary_and_exit_handler_read_the_whole_run(doc: dict[str, Any]) -> None:
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    args = templates["summary"]["container"]["args"]
    assert _arg(args, "--tasks") == "{{workflow.parameters.tasks}}"
    assert _arg(args, "--workspace") == "{{workflow.parameters.workspace}}/{{workflow.name}}"
    default = json.loads(next(p for p in doc["spec"]["arguments"]["parameters"] if p["name"] == "tasks")["value"])
    assert default == [{"task": "sentiment", "overrides": []}]


def test_batch_items_from_the_command_line() -> None:
    items = batch_items(["sentiment", "ner"], ["training.epochs=1", "ner:training.epochs=3"], CONFIG, "local")
    assert items == [
        {"task": "sentiment", "overrides": ["training.epochs=1"]},
        {"task": "ner", "overrides": ["training.epochs=1", "training.epochs=3"]},
    ]
    assert load_config(CONFIG, "local", items[1]["overrides"], task="ner").training.epochs == 3
    with pytest.raises(ConfigError, match="not in this run"):
        task_overrides(["sentiment"], ["ner:training.epochs=3"])
    with pytest.raises(ConfigError, match="twice"):
        batch_items(["ner", "ner"], [], CONFIG, "local")
    with pytest.raises(ConfigError, match="data.source is required for task 'text-matching'"):
        batch_items(["sentiment", "text-matching"], [], CONFIG, "local")
    with pytest.raises(ConfigError, match="Known tasks"):
        batch_items(["sentiment", "nerr"], [], CONFIG, "local")


def test_the_per_task_set_form_is_offered_only_where_a_run_has_several_tasks() -> None:
    import argparse

    from paddle_mlops.command_line import add_config_args

    def set_help(several_tasks: bool) -> str:
        parser = argparse.ArgumentParser()
        add_config_args(parser, several_tasks=several_tasks)
        return next(a.help for a in parser._actions if "--set" in a.option_strings) or ""

    assert "NAME:a.b=c" in set_help(True)
    assert "NAME:" not in set_help(False)  # config, compile, preflight, publish: one configuration


def test_every_branch_s_training_run_is_a_child_of_the_batch_s_parent_run(doc: dict[str, Any]) -> None:
    """`batch-run` opens the parent MLflow run after build-image, beside the canary, and before the fan-out; its
    `parent-run-id` reaches every branch's training node as `--parent-run-id` (steps/train.py starts the task's run
    as its child) and the summary, which ends it. train-deploy's training run has no parent."""
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    tasks = {t["name"]: t for t in templates["main"]["dag"]["tasks"]}
    parent = tasks[finetune_batch.PARENT_RUN]
    assert templates[parent["template"]]["container"]["command"] == ["python", "-m", "steps.batch_run"]
    assert _arg(templates[parent["template"]]["container"]["args"], "--workflow-name") == "{{workflow.name}}"
    assert depends_met(parent["depends"], {"build-image": "Succeeded"}, ())
    assert not depends_met(tasks["finetune"]["depends"], {"build-image": "Succeeded"}, ())
    assert finetune_batch.PARENT_RUN in tasks["finetune"]["depends"]
    output = f"{{{{tasks.{finetune_batch.PARENT_RUN}.outputs.parameters.{BATCH_PARENT_PARAMETER}}}}}"
    for name in ("finetune", "summary"):
        given = {p["name"]: p["value"] for p in tasks[name]["arguments"]["parameters"]}
        assert given[BATCH_PARENT_PARAMETER] == output
    summary_args = templates["summary"]["container"]["args"]
    assert _arg(summary_args, "--parent-run-id") == f"{{{{inputs.parameters.{BATCH_PARENT_PARAMETER}}}}}"
    branches = _branches(doc, THREE)
    for branch in branches:
        assert _arg(branch["commands"]["train"]["spec"]["trainer"]["command"], "--parent-run-id") == "parent-1"
    (single,) = yaml.safe_load_all((ARGO / "train-deploy.yaml").read_text(encoding="utf-8"))
    assert "--parent-run-id" not in json.dumps(single)
