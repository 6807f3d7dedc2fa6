"""finetune-batch's summary step: each task's outcome from what its branch left in the workspace, and a failed
workflow when a task failed (#17 item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import BATCH_PARENT_PARAMETER
from steps import batch_run, batch_summary
from steps.runtime.release import registry
from tests.fixtures_ernie import CONFIG


@pytest.fixture(autouse=True)
def own_mlflow(isolated_home: Path) -> Path:
    """Each test its own MLflow store (the steps set MLFLOW_TRACKING_URI for the process: monkeypatch restores it)."""
    return isolated_home


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")


def _branch(root: Path, task: str, last: str, gate: bool = True) -> None:
    """A branch's workspace as its steps leave it, up to and including `last`."""
    ws = root / task
    steps = ["prepare-data", "train", "evaluate", "upload"]
    for step in steps[: steps.index(last) + 1]:
        if step == "prepare-data":
            _write(ws / "data" / "stats.json", {"examples": 10})
        elif step == "train":
            _write(ws / "model" / "training.json", {"best_epoch": 1})
        elif step == "evaluate":
            reason = "micro_f1 0.7000 ≥ threshold 0.6000" if gate else "accuracy 0.5000 < threshold 0.8000"
            metrics = {"task_type": "text-classification", "accuracy": 0.5, "macro_f1": 0.25,
                       "gate": {"passed": gate, "reason": reason}}  # fmt: skip
            _write(ws / "eval" / "metrics.json", metrics)
        else:
            _write(ws / "upload" / "published.json", {"model_uri": f"s3://m/ernie-{task}/v1", "manifest_digest": "d"})


def _run(tmp_path: Path, tasks: list[str], capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, list[dict], str]:
    out = tmp_path / "out"
    argv = ["--config", CONFIG, "--env", "local", "--tasks", json.dumps([{"task": t, "overrides": []} for t in tasks])]
    code = batch_summary.main([*argv, "--workspace", str(tmp_path / "ws"), "--outputs-dir", str(out), *extra])
    summary = json.loads((out / "summary").read_text()) if (out / "summary").is_file() else []
    captured = capsys.readouterr()
    return code, summary, captured.out + captured.err


def test_every_task_s_outcome_and_a_failure_fails_the_step(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "ws"
    _branch(root, "sentiment", "upload")
    _branch(root, "ner", "evaluate", gate=False)
    _branch(root, "text-matching", "prepare-data")
    code, summary, output = _run(tmp_path, ["sentiment", "ner", "text-matching"], capsys)
    assert code == 1
    by_task = {row["task"]: row for row in summary}
    assert by_task["sentiment"]["outcome"] == "published" and by_task["sentiment"]["model_uri"].endswith("/v1")
    assert by_task["ner"]["outcome"] == "gate-failed" and "< threshold" in by_task["ner"]["gate"]
    assert by_task["text-matching"] == {
        "task": "text-matching",
        "outcome": "failed",
        "step": "train",
        "workspace": str(root / "text-matching"),
    }
    assert "1 of 3 tasks failed: text-matching" in output


def test_published_and_gate_failed_tasks_are_a_success(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _branch(tmp_path / "ws", "sentiment", "upload")
    _branch(tmp_path / "ws", "ner", "evaluate", gate=False)
    code, summary, _ = _run(tmp_path, ["sentiment", "ner"], capsys)
    assert code == 0 and [r["outcome"] for r in summary] == ["published", "gate-failed"]


def test_a_malformed_task_list_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--config", CONFIG, "--tasks", "[{'task': 1}]", "--workspace", str(tmp_path)]
    assert batch_summary.main(argv) == 2
    assert "--tasks is not JSON" in capsys.readouterr().err


def _parent(tmp_path: Path, tasks: list[str]) -> str:
    """The batch's parent MLflow run, as batch-run opens it."""
    out = tmp_path / "parent"
    items = json.dumps([{"task": t, "overrides": []} for t in tasks])
    argv = ["--config", CONFIG, "--env", "local", "--tasks", items, "--workflow-name", "batch-1"]
    assert batch_run.main([*argv, "--outputs-dir", str(out)]) == 0
    return (out / BATCH_PARENT_PARAMETER).read_text()


def test_the_summary_ends_the_parent_run_finished_with_each_task_s_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """(#62 item 4) Every task published or refused by its gate: the batch's parent run ends FINISHED, with a tag per
    task's outcome, a metric per task's test metric and the summary as an artifact."""
    parent = _parent(tmp_path, ["sentiment", "ner"])
    _branch(tmp_path / "ws", "sentiment", "upload")
    _branch(tmp_path / "ws", "ner", "evaluate", gate=False)
    code, summary, output = _run(tmp_path, ["sentiment", "ner"], capsys, "--parent-run-id", parent)
    assert code == 0 and f"parent MLflow run {parent} ended FINISHED" in output
    run = MlflowClient(registry.tracking_uri(load_config(CONFIG, "local"))).get_run(parent)
    assert run.info.status == "FINISHED"
    assert run.data.tags["outcome.sentiment"] == "published" and run.data.tags["outcome.ner"] == "gate-failed"
    assert run.data.metrics == {"sentiment.accuracy": 0.5, "sentiment.macro_f1": 0.25, "ner.accuracy": 0.5,
                                "ner.macro_f1": 0.25}  # fmt: skip
    logged = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/batch/summary.json")
    assert logged == summary


def test_a_failed_task_ends_the_parent_run_failed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    parent = _parent(tmp_path, ["sentiment", "text-matching"])
    _branch(tmp_path / "ws", "sentiment", "upload")
    _branch(tmp_path / "ws", "text-matching", "prepare-data")
    code, _, _ = _run(tmp_path, ["sentiment", "text-matching"], capsys, "--parent-run-id", parent)
    assert code == 1
    run = MlflowClient(registry.tracking_uri(load_config(CONFIG, "local"))).get_run(parent)
    assert run.info.status == "FAILED" and run.data.tags["outcome.text-matching"] == "failed"
    assert "text-matching.accuracy" not in run.data.metrics
