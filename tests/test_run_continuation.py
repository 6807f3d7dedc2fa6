"""`--only`/`--from` continue the last run only with its task and settings (run_identity.py): another task, another
`--set` or edited configuration files are refused with what differs and the command for a new run, and the last
run's workspace is left byte for byte as it was."""

from __future__ import annotations

import hashlib
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from paddle_mlops import cli
from paddle_mlops.local import executor as executor_module
from paddle_mlops.local.dag import DagError
from paddle_mlops.local.executor import LocalExecutor, RunOptions
from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import EXIT_USAGE

WRITE = (
    "import sys, pathlib; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); "
    "p.write_text(sys.argv[2])"
)


def _doc() -> dict[str, Any]:
    """Two tasks: `first` writes its output, `second` writes the first's; quick, and a real workspace."""

    def container(name: str, args: list[str], inputs: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "container": {"image": "x:1", "command": ["python", "-c"], "args": args},
            "inputs": {"parameters": [{"name": i} for i in inputs]},
            "outputs": {"parameters": [{"name": "out", "valueFrom": {"path": "/tmp/outputs/out"}}]},
        }

    first_out = {"name": "v", "value": "{{tasks.first.outputs.parameters.out}}"}
    return {
        "metadata": {"name": "demo"},
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "workspace", "value": "x"}]},
            "templates": [
                {
                    "name": "main",
                    "dag": {
                        "tasks": [
                            {"name": "first", "template": "first"},
                            {
                                "name": "second",
                                "template": "second",
                                "depends": "first",
                                "arguments": {"parameters": [first_out]},
                            },
                        ]
                    },
                },
                container("first", [WRITE, "/tmp/outputs/out", "{{workflow.parameters.task}}"], []),
                container("second", [WRITE, "/tmp/outputs/out", "{{inputs.parameters.v}}"], ["v"]),
            ],
        },
    }


def _run(workdir: Path, config: Path, task: str, sets: list[str], **kw: Any) -> tuple[int, dict[str, Any]]:
    cfg = load_config(config, "local", sets, task=task)
    opts = RunOptions(config, "local", sets, workdir, git_sha="abc", task=task, **kw)
    console = Console(file=open(workdir / "console.txt", "a"), width=200)
    return LocalExecutor(cfg, _doc(), opts, console).run()


def _tree_digest(root: Path) -> str:
    """Every file under `root`, path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _refused(capsys: pytest.CaptureFixture[str], workdir: Path, *argv: str) -> str:
    """Run `paddle-mlops run … --workdir WORKDIR`; it must exit 2 with a message; the message."""
    assert cli.main(["run", *argv, "--workdir", str(workdir)]) == EXIT_USAGE
    return " ".join(capsys.readouterr().err.split())


def test_another_task_with_only_is_refused_and_leaves_the_run_alone(
    tmp_path: Path, project_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, first = _run(tmp_path, project_root / "configs/pipeline.yaml", "sentiment", [])
    assert code == 0
    workspace = Path(first["workspace"])
    before = _tree_digest(tmp_path)

    message = _refused(capsys, tmp_path, "--task", "ner", "--only", "prepare-data")

    assert f"--only prepare-data continues the last run, {first['run_name']}" in message
    assert "task sentiment vs ner" in message
    assert f"paddle-mlops run --task ner --workdir {tmp_path}" in message  # the new run to start instead
    assert _tree_digest(tmp_path) == before  # nothing of the sentiment run (or its summary) was rewritten
    assert not (workspace / "prepare-data").exists()


def test_another_setting_with_from_is_refused_naming_the_setting(
    tmp_path: Path, project_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, project_root / "configs/pipeline.yaml", "sentiment", ["training.epochs=1"])[0] == 0
    before = _tree_digest(tmp_path)

    message = _refused(capsys, tmp_path, "--set", "training.epochs=3", "--from", "train")

    assert "setting training.epochs=1 vs training.epochs=3" in message
    assert f"paddle-mlops run --set training.epochs=3 --workdir {tmp_path}" in message
    assert _tree_digest(tmp_path) == before
    # A setting dropped counts too: the run had it, this command has not.
    message = _refused(capsys, tmp_path, "--from", "train")
    assert "setting training.epochs=1 vs training.epochs=(not set)" in message


def test_same_task_and_settings_continue_the_run(tmp_path: Path, project_root: Path) -> None:
    config = project_root / "configs/pipeline.yaml"
    _, first = _run(tmp_path, config, "ner", ["training.epochs=1"])
    code, again = _run(tmp_path, config, "ner", ["training.epochs=1"], only="second")
    assert code == 0 and again["run_name"] == first["run_name"] and again["workspace"] == first["workspace"]
    assert [s["status"] for s in again["steps"]] == ["Reused", "Succeeded"]
    assert again["configuration"] == first["configuration"]
    # A --set that restates what the configuration resolves to anyway is the same configuration.
    dropout = load_config(config, "local", task="ner").model.dropout
    restated = ["training.epochs=1", f"model.dropout={dropout}"]
    code, again = _run(tmp_path, config, "ner", restated, start_from="second")
    assert code == 0 and again["run_name"] == first["run_name"]


def test_edited_configuration_files_are_named(tmp_path: Path, project_root: Path) -> None:
    """Same task and --set, but the configuration file changed: the resolved keys that differ are named (against the
    run's own record of its resolved configuration, run-config.json)."""
    configs = tmp_path / "configs"
    shutil.copytree(project_root / "configs", configs)
    workdir = tmp_path / "work"
    workdir.mkdir()
    _, first = _run(workdir, configs / "pipeline.yaml", "sentiment", [])
    assert (Path(first["workspace"]) / "run-config.json").is_file()
    base = configs / "pipeline.yaml"
    base.write_text(base.read_text().replace("training:\n", "training:\n  epochs: 5\n", 1))
    with pytest.raises(DagError, match=r"training\.epochs 2 vs 5 \(configuration files\)"):
        _run(workdir, base, "sentiment", [], only="second")


def test_runs_started_in_the_same_second_get_their_own_workspaces(
    tmp_path: Path, project_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class FrozenClock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> FrozenClock:
            return cls(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    monkeypatch.setattr(executor_module, "datetime", FrozenClock)
    config = project_root / "configs/pipeline.yaml"
    _, first = _run(tmp_path, config, "sentiment", [])
    before = _tree_digest(Path(first["workspace"]))
    _, second = _run(tmp_path, config, "ner", [])
    assert first["run_name"] == "demo-20260102-030405" and second["run_name"] == "demo-20260102-030405-2"
    assert _tree_digest(Path(first["workspace"])) == before
