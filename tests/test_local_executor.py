"""The local executor on a synthetic workflow: order, parameter passing, `when`, failure, exit handler."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from paddle_mlops.local.dag import DagError, Scope, evaluate_when, job_command, load_workflow
from paddle_mlops.local.executor import LocalExecutor, RunOptions
from paddle_mlops_core.config import load_config

WRITE = (
    "import sys, pathlib; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); "
    "p.write_text(sys.argv[2])"
)


def _container(name: str, args: list[str], inputs: list[str] = (), outputs: dict[str, str] | None = None) -> dict:
    tpl: dict[str, Any] = {
        "name": name,
        "container": {"image": "x:1", "command": ["python", "-c"], "args": args},
        "inputs": {"parameters": [{"name": i} for i in inputs]},
    }
    if outputs:
        tpl["outputs"] = {"parameters": [{"name": k, "valueFrom": {"path": v}} for k, v in outputs.items()]}
    return tpl


def _doc(gate_value: str = "true", fail_second: bool = False) -> dict:
    second = "import sys; print('boom line'); sys.exit(3)" if fail_second else WRITE
    return {
        "metadata": {"name": "demo"},
        "spec": {
            "entrypoint": "main",
            "onExit": "exit-handler",
            "arguments": {"parameters": [{"name": "greeting", "value": "hello"}, {"name": "workspace", "value": "x"}]},
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            # deliberately listed out of order: the executor must sort by dependencies
                            {
                                "name": "publish",
                                "template": "publish",
                                "depends": "check",
                                "when": "{{tasks.check.outputs.parameters.ok}} == true",
                                "arguments": {
                                    "parameters": [{"name": "msg", "value": "{{tasks.first.outputs.parameters.msg}}"}]
                                },
                            },
                            {
                                "name": "first",
                                "template": "first",
                                "arguments": {
                                    "parameters": [{"name": "g", "value": "{{workflow.parameters.greeting}}"}]
                                },
                            },
                            {"name": "check", "template": "check", "depends": "first"},
                        ]
                    },
                },
                _container(
                    "first",
                    [WRITE, "/tmp/outputs/msg", "{{inputs.parameters.g}}-{{workflow.name}}"],
                    ["g"],
                    {"msg": "/tmp/outputs/msg"},
                ),
                _container("check", [second, "/tmp/outputs/ok", gate_value], [], {"ok": "/tmp/outputs/ok"}),
                _container(
                    "publish",
                    [WRITE, "/tmp/outputs/out", "{{inputs.parameters.msg}}"],
                    ["msg"],
                    {"out": "/tmp/outputs/out"},
                ),
                _container(
                    "exit-handler",
                    [WRITE, "/tmp/outputs/status", "{{workflow.status}}"],
                    [],
                    {"status": "/tmp/outputs/status"},
                ),
            ],
        },
    }


def _executor(tmp_path: Path, doc: dict, project_root: Path, **kw: Any) -> LocalExecutor:
    cfg = load_config(project_root / "configs/pipeline.yaml", "local")
    opts = RunOptions(
        config_path=project_root / "configs/pipeline.yaml",
        env="local",
        overrides=[],
        workdir=tmp_path,
        git_sha="abc",
        **kw,
    )
    return LocalExecutor(cfg, doc, opts, Console(file=open(tmp_path / "console.txt", "w"), width=200))


def test_dag_is_ordered_by_dependencies() -> None:
    wf = load_workflow(_doc())
    assert [t.name for t in wf.tasks] == ["first", "check", "publish"]
    assert wf.exit_task is not None and wf.exit_task.name == "exit-handler"


def test_cycle_and_unknown_dependency_are_errors() -> None:
    doc = _doc()
    doc["spec"]["templates"][0]["dag"]["tasks"][1]["depends"] = "publish"
    with pytest.raises(DagError, match="cycle"):
        load_workflow(doc)
    doc["spec"]["templates"][0]["dag"]["tasks"][1]["depends"] = "nope"
    with pytest.raises(DagError, match="unknown task 'nope'"):
        load_workflow(doc)


def test_scope_renders_argo_expressions() -> None:
    scope = Scope("wf-1", {"a": "1"}, {"t": {"o": "v"}})
    assert scope.render("{{workflow.name}}/{{workflow.parameters.a}}/{{tasks.t.outputs.parameters.o}}") == "wf-1/1/v"
    assert scope.render("{{inputs.parameters.x}}", {"x": "y"}) == "y"
    with pytest.raises(DagError, match="not supported"):
        scope.render("{{steps.foo.outputs.result}}")
    assert evaluate_when("true == true") and not evaluate_when("false == true") and evaluate_when("'a' != 'b'")


def test_run_passes_outputs_and_runs_exit_handler(tmp_path: Path, project_root: Path) -> None:
    code, summary = _executor(tmp_path, _doc(), project_root).run()
    assert code == 0 and summary["status"] == "succeeded"
    steps = {s["name"]: s for s in summary["steps"]}
    assert [s["name"] for s in summary["steps"]] == ["first", "check", "publish"]
    run = summary["run_name"]
    assert steps["first"]["outputs"]["msg"] == f"hello-{run}"
    assert steps["publish"]["outputs"]["out"] == f"hello-{run}"  # a task output became the next task's input
    assert summary["exit_handler"]["status"] == "Succeeded"
    status_file = tmp_path / "runs" / run / "exit-handler" / "outputs" / "status"
    assert status_file.read_text() == "Succeeded"
    saved = json.loads((tmp_path / "last-run.json").read_text())
    assert saved["status"] == "succeeded" and all({"name", "status", "seconds"} <= s.keys() for s in saved["steps"])


def test_when_false_skips(tmp_path: Path, project_root: Path) -> None:
    code, summary = _executor(tmp_path, _doc(gate_value="false"), project_root).run()
    assert code == 0
    assert summary["steps"][-1] == summary["steps"][-1] | {"name": "publish", "status": "Skipped"}


def test_failure_stops_with_log_tail_and_failed_exit_status(tmp_path: Path, project_root: Path) -> None:
    code, summary = _executor(tmp_path, _doc(fail_second=True), project_root).run()
    assert code == 1 and summary["status"] == "failed"
    assert [s["name"] for s in summary["steps"]] == ["first", "check"]  # publish never started
    assert summary["failed_step"]["name"] == "check" and summary["failed_step"]["exit_code"] == 3
    assert "boom line" in summary["failed_step"]["log_tail"]
    status_file = tmp_path / "runs" / summary["run_name"] / "exit-handler" / "outputs" / "status"
    assert status_file.read_text() == "Failed"
    console = (tmp_path / "console.txt").read_text()
    assert "[check] boom line" in console and "exit code 3" in console


def test_only_reuses_previous_outputs(tmp_path: Path, project_root: Path) -> None:
    _executor(tmp_path, _doc(), project_root).run()
    code, summary = _executor(tmp_path, _doc(), project_root, only="publish").run()
    assert code == 0
    assert [s["status"] for s in summary["steps"]] == ["Reused", "Reused", "Succeeded"]
    with pytest.raises(DagError, match="no step named"):
        _executor(tmp_path, _doc(), project_root, only="nope")


@pytest.mark.parametrize(
    "sets,expected",
    [
        ([], ["--nproc_per_node", "2"]),
        (["training.nproc=3"], ["--nproc_per_node", "3"]),
        (["training.topology=ps"], ["--run_mode", "ps", "--server_num", "1", "--trainer_num", "2"]),
    ],
)
def test_training_job_becomes_a_local_launch(
    tmp_path: Path, project_root: Path, sets: list[str], expected: list[str]
) -> None:
    from pipelines import train_deploy

    cfg = load_config(project_root / "configs/pipeline.yaml", "local", sets)
    opts = RunOptions(
        config_path=project_root / "configs/pipeline.yaml", env="local", overrides=sets, workdir=tmp_path, git_sha="abc"
    )
    executor = LocalExecutor(cfg, train_deploy.build(cfg).to_dict(), opts, Console(file=open(tmp_path / "c.txt", "w")))
    train = next(t for t in executor.workflow.tasks if t.name == "train")
    assert job_command(train) is not None  # locally the job it would place runs, not the step placing it
    executor.scope.task_outputs["build-image"] = {"image-digest": "local", "git-sha": "abc123"}
    executor.scope.task_outputs["train-cache"] = {"reused": "false", "key": "k" * 64, "run": "run-k"}
    cmd = executor.handler.command_for(train, executor.scope)
    # The TrainJob's node command on one node: no rendezvous master or rank, one node.
    assert cmd[1:3] == ["-m", "steps.runtime.training.launch"]
    assert "--master" not in cmd and "--rank" not in cmd and cmd[cmd.index("--nnodes") + 1] == "1"
    assert cmd[5 : 5 + len(expected)] == expected
    script = next(part for part in cmd if part.endswith("train.py"))
    assert Path(script).is_file()  # the worker's relative script path now points into this checkout
    assert cmd[cmd.index("--workspace") + 1] == f"{tmp_path}/runs/{executor.scope.workflow_name}"
    assert json.loads(cmd[cmd.index("--overrides") + 1]) == sets
    # the model is recorded in the workdir's step cache under the key train-cache computed
    assert cmd[cmd.index("--step-cache") + 1] == str(tmp_path / "step-cache")
    assert cmd[cmd.index("--train-key") + 1] == "k" * 64


def test_parameter_server_jobs_use_the_ps_interpreter(
    tmp_path: Path, project_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The project's paddlepaddle has no parameter server; PS jobs launch under PADDLE_MLOPS_PS_PYTHON
    # (or the checkout's .venv-ps), collective jobs under this interpreter.
    import sys

    from pipelines import train_deploy

    monkeypatch.setenv("PADDLE_MLOPS_PS_PYTHON", "/opt/ps/bin/python")
    first = {}
    for sets in ([], ["training.topology=ps"]):
        cfg = load_config(project_root / "configs/pipeline.yaml", "local", sets)
        opts = RunOptions(
            config_path=project_root / "configs/pipeline.yaml",
            env="local",
            overrides=sets,
            workdir=tmp_path,
            git_sha="abc",
        )
        executor = LocalExecutor(
            cfg, train_deploy.build(cfg).to_dict(), opts, Console(file=open(tmp_path / "c.txt", "w"))
        )
        executor.scope.task_outputs["build-image"] = {"image-digest": "local", "git-sha": "abc123"}
        executor.scope.task_outputs["train-cache"] = {"reused": "false", "key": "k" * 64, "run": "run-k"}
        train = next(t for t in executor.workflow.tasks if t.name == "train")
        first[bool(sets)] = executor.handler.command_for(train, executor.scope)[0]
    assert first == {False: sys.executable, True: "/opt/ps/bin/python"}


@pytest.mark.parametrize(
    ("expression", "statuses", "met"),
    [
        (None, {"a": "Succeeded", "b": "Skipped"}, True),
        (None, {"a": "Failed"}, False),
        ("a", {"a": "Succeeded"}, True),
        ("a", {"a": "Skipped"}, True),  # a bare name: Succeeded, Skipped or Daemoned (Argo's dag.go)
        ("a", {"a": "Failed"}, False),
        ("a.Failed || a.Errored", {"a": "Failed"}, True),
        ("a.Succeeded && (b.Failed || c)", {"a": "Succeeded", "b": "Failed"}, True),
        ("a.Succeeded && (b.Failed || c)", {"a": "Succeeded", "b": "Succeeded"}, False),
        ("a.Omitted", {}, True),  # never ran: omitted
    ],
)
def test_depends_is_evaluated_as_argo_does_for_the_states_it_names(expression, statuses, met) -> None:
    from paddle_mlops.local.dag import depends_met

    assert depends_met(expression, statuses, ("a", "b")[: len(statuses)]) is met


def test_depends_outside_the_mirrored_forms_is_refused() -> None:
    from paddle_mlops.local.dag import DagError, depends_met

    with pytest.raises(DagError):
        depends_met("a.Succeeded and __import__('os')", {"a": "Succeeded"}, ())
    with pytest.raises(DagError):
        depends_met("a.AnySucceeded", {"a": "Succeeded"}, ())


def _fan_out_doc() -> dict:
    """A fan-out (`withParam`) over two items whose second branch fails, and a task after it that runs when the
    fan-out ended either way (finetune-batch's summary)."""
    fail_b = "import sys; print('branch ' + sys.argv[1]); sys.exit(sys.argv[1] == 'b')"
    return {
        "metadata": {"name": "fan"},
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "items", "value": '[{"task": "a"}, {"task": "b"}]'}]},
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {
                                "name": "each",
                                "template": "branch",
                                "withParam": "{{workflow.parameters.items}}",
                                "arguments": {"parameters": [{"name": "t", "value": "{{item.task}}"}]},
                            },
                            {"name": "after", "template": "after", "depends": "each.Succeeded || each.Failed"},
                        ]
                    },
                },
                {
                    "name": "branch",
                    "inputs": {"parameters": [{"name": "t"}]},
                    "dag": {
                        "tasks": [
                            {
                                "name": "work",
                                "template": "work",
                                "arguments": {"parameters": [{"name": "t", "value": "{{inputs.parameters.t}}"}]},
                            },
                            {
                                "name": "record",
                                "template": "record",
                                "depends": "work",
                                "arguments": {"parameters": [{"name": "t", "value": "{{inputs.parameters.t}}"}]},
                            },
                        ]
                    },
                },
                _container("work", [fail_b, "{{inputs.parameters.t}}"], ["t"]),
                _container(
                    "record", [WRITE, "/tmp/outputs/t", "{{inputs.parameters.t}}"], ["t"], {"t": "/tmp/outputs/t"}
                ),
                _container("after", [WRITE, "/tmp/outputs/done", "yes"], [], {"done": "/tmp/outputs/done"}),
            ],
        },
    }


def test_a_fan_out_runs_every_branch_in_its_own_scope_and_a_failed_one_stops_no_other(
    tmp_path: Path, project_root: Path
) -> None:
    # Argo's workflow/controller/dag.go (expandTask): one branch per withParam item; a failed branch fails the
    # fan-out task, the other branches still run, and a task whose `depends` names the failure still runs.
    code, summary = _executor(tmp_path, _fan_out_doc(), project_root).run()
    assert code == 1 and summary["status"] == "failed"
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses == {
        "each(0:a)/work": "Succeeded",
        "each(0:a)/record": "Succeeded",
        "each(1:b)/work": "Failed",
        "each": "Failed",
        "after": "Succeeded",
    }
    steps = {s["name"]: s for s in summary["steps"]}
    assert steps["each(0:a)/record"]["outputs"] == {"t": "a"}  # the item reached the branch's tasks
    assert summary["failed_step"] == summary["failed_step"] | {
        "name": "each",
        "log_tail": "branches failed: each(1:b) (the others ran to the end)",
    }
    # each branch's tasks in the branch's folder; the summary has one row per branch
    assert (tmp_path / "runs" / summary["run_name"] / "each(0:a)" / "record" / "outputs" / "t").read_text() == "a"
    rows = {row["branch"]: row for row in summary["tasks"]}
    assert rows["each(0:a)"]["status"] == "succeeded" and rows["each(0:a)"]["task"] == "a"
    assert rows["each(1:b)"] == rows["each(1:b)"] | {"status": "failed", "failed_step": "each(1:b)/work"}
