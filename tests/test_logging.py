"""Structured logs: with LOG_FORMAT=json every step line is one JSON object a log stack can group."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_mlops_core.contracts import ARGO_WORKFLOW_ENV, LOG_FIELDS, RUN_ENV
from steps.runtime import runner
from steps.runtime.training import tracking as train_tracking

ROOT = Path(__file__).resolve().parents[1]


def test_step_logs_are_json_with_workflow_step_rank_and_sha(tmp_path: Path) -> None:
    data = tmp_path / "reviews.jsonl"
    rows = [{"text": f"好评{i}号很满意", "label": "positive"} for i in range(20)]
    rows += [{"text": f"差评{i}号很失望", "label": "negative"} for i in range(20)]
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    env = {
        **os.environ,
        "LOG_FORMAT": "json",
        "ARGO_WORKFLOW_NAME": "train-deploy-abc12",
        "GIT_SHA": "deadbeef",
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [sys.executable, "-m", "steps.prepare_data", "--config", str(ROOT / "configs/pipeline.yaml"), "--env", "local",
         "--overrides", json.dumps([f"data.source={data}"]), "--output", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert records, result.stderr
    for record in records:
        assert record["workflow"] == "train-deploy-abc12" and record["step"] == "prepare-data"
        assert record["rank"] == "0" and record["git_sha"] == "deadbeef" and record["msg"]
        assert set(LOG_FIELDS) <= record.keys()
    # the task is named from the configuration the step loaded (the default task when --task is not given)
    assert records[-1]["task"] == "sentiment"
    assert any("prepared 40 text-classification examples" in r["msg"] for r in records)


def test_logs_and_mlflow_name_the_same_run_when_both_variables_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """One precedence for the run id (paddle_mlops_core/contracts.py `workflow_run_name`): the local executor's
    PADDLE_MLOPS_RUN before Argo's ARGO_WORKFLOW_NAME, in the JSON logs' `workflow` and the MLflow run name alike."""
    monkeypatch.setenv(RUN_ENV, "local-run-7")
    monkeypatch.setenv(ARGO_WORKFLOW_ENV, "train-deploy-abc12")
    record = logging.LogRecord("steps", logging.INFO, __file__, 1, "hello", None, None)
    logged = json.loads(runner._JsonFormatter("train").format(record))
    assert logged["workflow"] == train_tracking.run_name() == "local-run-7"
    monkeypatch.delenv(RUN_ENV)
    logged = json.loads(runner._JsonFormatter("train").format(record))
    assert logged["workflow"] == train_tracking.run_name() == "train-deploy-abc12"
    monkeypatch.delenv(ARGO_WORKFLOW_ENV)
    assert runner._JsonFormatter("train").fields["workflow"] == "" and train_tracking.run_name() is None


def test_a_step_names_the_training_run_once_it_knows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`set_log_fields` (train-cache's and the trainer's run id) reaches every JSON line after it; a name that is not
    a log field is refused."""
    monkeypatch.setenv("LOG_FORMAT", "json")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "3")
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        runner.setup_logging("train", "ner")
        formatter = root.handlers[0].formatter
        assert isinstance(formatter, runner._JsonFormatter)
        record = logging.LogRecord("steps", logging.INFO, __file__, 1, "step 10", None, None)
        assert json.loads(formatter.format(record))["run_id"] == ""
        runner.set_log_fields(run_id="r-0123456789abcdef0123")
        logged = json.loads(formatter.format(record))
        assert (logged["step"], logged["task"], logged["rank"]) == ("train", "ner", "3")
        assert logged["run_id"] == "r-0123456789abcdef0123"
        with pytest.raises(ValueError, match="not a log field"):
            runner.set_log_fields(pod="x")
    finally:
        root.handlers[:] = saved
