"""`paddle-mlops run` end to end on a tiny configuration: the same DAG, steps and stores as `make run`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from paddle_mlops.local.library_lines import library_of
from paddle_mlops_core.contracts import (
    CHAMPION,
    SERVING_REQUEST_LATENCY_SECONDS,
    SERVING_REQUESTS_TOTAL,
    TRAIN_EPOCH,
    TRAIN_LOSS,
    TRAIN_SAMPLES_PER_SECOND,
    TRAIN_STEP,
)
from tests.browser import chromium, keep_screenshot, mlflow_ui, require_browser
from tests.fixtures_ernie import TINY_MODEL
from tests.mlflow_checks import champion_answers_like_the_server
from tests.s3server import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TINY = [
    *TINY_MODEL,
    "data.max_samples=400",
    "data.vocab_min_freq=1",
    "gate.threshold=0.0",  # a tiny model on 400 texts: the test is about the pipeline, not accuracy
    "gate.baseline=warn",  # ... so its comparison with the baseline is reported, not enforced
]


def _run(workdir: Path, *extra: str, metrics_port: int | None = None) -> subprocess.Popen[str]:
    sets = [*TINY, *([f"training.metrics_port={metrics_port}"] if metrics_port else [])]
    args = [sys.executable, "-m", "paddle_mlops.cli", "run", "--workdir", str(workdir)]
    for item in sets:
        args += ["--set", item]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}"}
    env.pop("PADDLE_MLOPS_HOME", None)
    return subprocess.Popen(
        [*args, *extra], cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _scrape(url: str, name: str, deadline: float, proc: subprocess.Popen[str]) -> str | None:
    """Poll a /metrics endpoint until `name` shows a positive value (or the process ends)."""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            text = httpx.get(url, timeout=1).text
            for line in text.splitlines():
                if line.startswith(name + " ") and float(line.split()[-1]) > 0:
                    return text
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return None


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    workdir = tmp_path_factory.mktemp("e2e")
    port = free_port()
    proc = _run(workdir, metrics_port=port)
    # The trainer's /metrics exists only while it trains: scrape it during the run.
    train_metrics = _scrape(f"http://127.0.0.1:{port}/metrics", TRAIN_STEP, time.monotonic() + 600, proc)
    output, _ = proc.communicate(timeout=900)
    summary = json.loads((workdir / "last-run.json").read_text(encoding="utf-8"))
    yield {
        "workdir": workdir,
        "code": proc.returncode,
        "output": output,
        "summary": summary,
        "train_metrics": train_metrics,
        "metrics_port": port,  # a setting of the run: --from continues it only with the same settings
    }
    subprocess.run([sys.executable, "-m", "paddle_mlops.cli", "serve", "stop", "--workdir", str(workdir)], check=False)


def test_run_succeeds_with_a_complete_summary(first_run: dict) -> None:
    assert first_run["code"] == 0, first_run["output"][-3000:]
    summary = first_run["summary"]
    assert summary["status"] == "succeeded"
    # The image pre-pulls are for the cluster's GPU nodes: skipped here, and said so. The image trained here is the
    # installed project (build-image's digest `local`), allowed as it is: no canary (pipelines/training_canary.py).
    skipped = [s for s in summary["steps"] if s["status"] == "Skipped"]
    canary = ["prepull-canary", "train-canary", "allow-training-image"]
    # serve-champion keeps the champion served only when nothing is rolled out: train-deploy's after a failed gate
    # (pipelines/train_deploy.py), the rollout workflow's after a duplicate or a refusal (pipelines/rollout_template.py)
    assert sorted(s["name"] for s in skipped) == sorted([*canary, "prepull-image", "serve-champion", "serve-champion"])
    cluster_only = [s for s in skipped if s["reason"].startswith("cluster only: ")]
    assert [s["name"] for s in cluster_only] == ["prepull-canary", "prepull-image"]
    assert all(s["reason"] == "when: true == false" for s in skipped if s not in cluster_only and s["name"] in canary)
    assert skipped[-1]["reason"] == "when: passed != passed"
    names = [s["name"] for s in summary["steps"] if s not in skipped]
    # train-deploy ends at upload; the published manifest's notification starts the rollout workflow.
    train_deploy = ["build-image", "prepare-data", "training-image", "train-cache", "train", "evaluate", "upload"]
    assert names == [*train_deploy, "validate", "register", "rollout"]
    assert [w.rsplit("-", 2)[0] for w in summary["workflows"]] == ["train-deploy", "rollout"]
    assert summary["rollout_parameters"]["event-key"].endswith("%2Fmanifest.json")
    assert summary["validation"]["verdict"] == "passed"
    assert all(s["status"] == "Succeeded" and s["seconds"] >= 0 for s in summary["steps"] if s not in skipped)
    assert 0.0 <= summary["metrics"]["accuracy"] <= 1.0 and 0.0 <= summary["metrics"]["macro_f1"] <= 1.0
    assert summary["gate"]["passed"] is True
    # The model beside the cheap baseline on the same split, in the summary and the manifest it published.
    base = summary["baseline"]
    assert base["kind"] == "tfidf-logreg" and base["model"] == summary["metrics"]["accuracy"]
    assert base["ci_low"] <= base["difference"] <= base["ci_high"]
    assert f"baseline tfidf-logreg {base['baseline']:.4f}" in first_run["output"]  # the printed `baseline` line
    manifest = json.loads(Path(summary["model_uri"], "manifest.json").read_text(encoding="utf-8"))
    assert manifest["metrics"]["baseline"]["baseline"] == base["baseline"]
    # validate judged it against the same figure: the stored answers of the same splits, not fitted again
    assert summary["validation"]["verdict"] == "passed" and "baseline tfidf-logreg" in summary["validation"]["reason"]
    lines = first_run["output"].splitlines()
    assert any("[validate]" in line and "read from the store" in line for line in lines)
    # The variant the selection ranked first by served texts/s is the one that serves.
    engine = summary["engine"]
    assert engine["ranked_by"].startswith("served texts/s") and engine["served"] == engine["selected"]
    assert Path(summary["model_uri"], "manifest.json").is_file()
    assert summary["mlflow_run_id"] and summary["serving_url"].startswith("http://127.0.0.1:")
    for step in names:  # streamed logs carry the step name
        assert f"[{step}]" in first_run["output"]
    assert "build-image: skipped" in first_run["output"]


def test_the_terminal_shows_our_lines_and_the_step_logs_keep_the_libraries(first_run: dict) -> None:
    """Paddle's launch banner and FLAGS dump, PaddleNLP's INFO lines, Paddle2ONNX's progress, ONNX Runtime's
    quantization advice, httpx's per-request lines and MLflow's INFO lines go to step.log only (library_lines.py)."""
    terminal = [re.sub(r"^\[[\w/-]+\] ", "", line, count=1) for line in first_run["output"].splitlines()]
    assert [line for line in terminal if library_of(line)] == []
    logs = {s["name"]: Path(s["log"]).read_text(encoding="utf-8") for s in first_run["summary"]["steps"] if s["log"]}
    in_logs = {library_of(line) for text in logs.values() for line in text.splitlines()}
    assert {"paddle-launch", "paddle-flags", "paddlenlp", "paddle2onnx", "httpx"} <= in_logs, in_logs
    assert "epoch 2: train_loss" in first_run["output"] and "promoted; serving at" in first_run["output"]


def test_mlflow_has_the_run_and_the_champion(first_run: dict) -> None:
    workdir, summary = first_run["workdir"], first_run["summary"]
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "ernie-sentiment"
    assert run.data.params["model.hidden_size"] == "32"
    history = client.get_metric_history(run.info.run_id, "dev_accuracy")
    assert [m.step for m in history] == [1, 2]  # per-epoch metrics
    assert "test_accuracy" in run.data.metrics and run.data.tags["gate.passed"] == "true"
    assert run.data.metrics["baseline_test_accuracy"] == summary["baseline"]["baseline"]
    assert "baseline_ci_low" in run.data.metrics and run.data.tags["baseline.kind"] == "tfidf-logreg"
    champion = client.get_model_version_by_alias("ernie-sentiment", CHAMPION)
    assert champion.run_id == run.info.run_id and champion.tags["storage_uri"] == summary["model_uri"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert {"plots/curves.png", "plots/confusion_matrix.png", "plots/per_class.png"} <= artifacts


def test_the_champion_is_an_mlflow_model_answering_as_the_server_does(first_run: dict) -> None:
    """#62: `models:/ernie-sentiment@champion` loads with mlflow.pyfunc from the published copy and answers what the
    model server answers; the training run's LoggedModel has the test metrics; the version has a signature, a card."""
    workdir, summary = first_run["workdir"], first_run["summary"]
    texts = ["这个手机质量很好，非常满意", "太差了，用了两天就坏了", "物流很快"]
    loaded = champion_answers_like_the_server(
        workdir, "ernie-sentiment", summary["serving_url"], texts, pd.DataFrame({"id": [1, 2, 3], "text": texts})
    )
    assert loaded.metadata.signature is not None and loaded.metadata.signature.inputs.input_names() == ["text"]
    assert loaded.metadata.metadata["engine"] == summary["engine"]["served"]
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    version = client.get_model_version_by_alias("ernie-sentiment", CHAMPION)
    assert version.source == "published-file://" + str(Path(summary["model_uri"]).resolve())
    assert version.description.startswith("### sentiment (text-classification)")
    run = client.get_run(summary["mlflow_run_id"])
    models = client.search_logged_models([run.info.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'")
    assert len(models) == 1
    model = models[0]
    metrics = {m.key: m for m in model.metrics or []}
    assert metrics["test_accuracy"].value == summary["metrics"]["accuracy"]
    assert metrics["test_accuracy"].dataset_name and metrics["test_accuracy"].dataset_digest
    assert {"name": "ernie-sentiment", "version": int(version.version)} in json.loads(
        model.tags["mlflow.modelVersions"]
    )


@pytest.mark.browser
def test_the_mlflow_ui_shows_the_logged_model_and_the_version_s_card_and_signature(
    first_run: dict, tmp_path: Path
) -> None:
    """The run page lists its logged model; the version page shows the card and the schema (MLflow reads MLmodel
    through the published-file repository). Screenshots: docs/img/mlflow-run.png and mlflow-model-version.png."""
    browser = require_browser()
    workdir, summary = first_run["workdir"], first_run["summary"]
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    version = client.get_model_version_by_alias("ernie-sentiment", CHAMPION).version
    with mlflow_ui(workdir, tmp_path / "ui.out") as base:
        profile = tmp_path / "chromium-profile"
        # the model-training view, as the card's link and `paddle-mlops ui` open it (MLflow 3 opens GenAI's otherwise)
        run_page = f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning"
        dom = chromium(browser, profile, "--dump-dom", run_page)
        assert "Logged models" in dom and "ernie-sentiment" in dom
        version_page = f"{base}/#/models/ernie-sentiment/versions/{version}"
        dom = chromium(browser, profile, "--dump-dom", version_page)
        assert "sentiment (text-classification)" in dom and "pretrained weights" in dom  # the card
        assert "Inputs (1)" in dom and "Outputs (2)" in dom  # the signature: text -> label, probabilities
        for page, name in ((run_page, "mlflow-run.png"), (version_page, "mlflow-model-version.png")):
            shot = tmp_path / name
            chromium(browser, profile, f"--screenshot={shot}", page)
            keep_screenshot(shot, name)


def test_plots_are_real_images(first_run: dict, tmp_path: Path) -> None:
    from PIL import Image

    workdir, summary = first_run["workdir"], first_run["summary"]
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    local = Path(client.download_artifacts(summary["mlflow_run_id"], "plots", str(tmp_path)))
    sizes = {"curves.png": (800, 500), "confusion_matrix.png": (600, 600), "per_class.png": (800, 500)}
    for name, size in sizes.items():
        with Image.open(local / name) as image:
            assert image.format == "PNG" and image.size == size
            extrema = image.convert("L").getextrema()
            assert extrema[0] < extrema[1]  # not a blank canvas


def test_serving_url_answers_v1_predict_and_exposes_metrics(first_run: dict) -> None:
    url = first_run["summary"]["serving_url"]
    texts = ["这个手机质量很好，非常满意", "太差了，用了两天就坏了"]
    response = httpx.post(f"{url}/v1/models/ernie-sentiment:predict", json={"instances": texts}, timeout=30)
    assert response.status_code == 200
    predictions = response.json()["predictions"]
    assert len(predictions) == 2
    for p in predictions:
        assert p["label"] in {"negative", "positive"}
        assert abs(sum(p["probabilities"].values()) - 1.0) < 1e-4
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert f'{SERVING_REQUESTS_TOTAL}{{code="200",protocol="v1"}}' in metrics
    assert f"{SERVING_REQUEST_LATENCY_SECONDS}_bucket" in metrics


def test_training_metrics_were_scraped_during_the_run(first_run: dict) -> None:
    text = first_run["train_metrics"]
    assert text is not None, "the trainer's /metrics never answered during the run"
    values = {
        line.split()[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("paddle_mlops_train_") and " " in line and "{" not in line.split()[0]
    }
    assert values[TRAIN_STEP] >= 1
    assert values[TRAIN_EPOCH] >= 1
    assert values[TRAIN_LOSS] > 0
    assert values[TRAIN_SAMPLES_PER_SECOND] > 0


def test_second_run_gates_against_the_champion(first_run: dict) -> None:
    proc = _run(first_run["workdir"], "--from", "evaluate", metrics_port=first_run["metrics_port"])
    output, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, output[-3000:]
    assert "champion v1" in output  # the gate names the champion it compared against
    summary = json.loads((first_run["workdir"] / "last-run.json").read_text(encoding="utf-8"))
    client = MlflowClient(tracking_uri=f"sqlite:///{first_run['workdir'] / 'mlflow.db'}")
    assert client.get_run(summary["mlflow_run_id"]).data.tags["gate.champion_version"] == "1"


def test_rerunning_from_validate_redeploys_the_published_model(first_run: dict) -> None:
    """`--from validate` reuses train-deploy's outputs and re-delivers the notification as a redeploy: the model
    judged before is judged and rolled out again instead of being dropped as a duplicate."""
    proc = _run(first_run["workdir"], "--from", "validate", metrics_port=first_run["metrics_port"])
    output, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, output[-3000:]
    summary = json.loads((first_run["workdir"] / "last-run.json").read_text(encoding="utf-8"))
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert {statuses[n] for n in ("prepare-data", "train", "evaluate", "upload")} == {"Reused"}
    assert [statuses[n] for n in ("validate", "register", "rollout")] == ["Succeeded"] * 3
    assert summary["rollout_parameters"]["redeploy"] == "true"
    assert summary["validation"]["verdict"] == "passed" and summary["rollout"] == "promoted"


def test_bad_data_fails_the_run_and_registers_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "reviews.csv"
    bad.write_text("text,label\n好,1\n差,0\n", encoding="utf-8")
    bad.write_bytes(bad.read_bytes() + b"\xff\xfe broken,1\n")
    proc = _run(tmp_path / "work", "--set", f"data.source={bad}")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "work" / "last-run.json").read_text(encoding="utf-8"))
    assert summary["status"] == "failed" and summary["failed_step"]["name"] == "prepare-data"
    assert "Step 'prepare-data' failed with exit code 2" in output
    assert str(bad) in summary["failed_step"]["log_tail"] and "line 4" in summary["failed_step"]["log_tail"]
    # Nothing that needs the failed step runs; the DAG is not fail-fast, so the training-image check (it needs only
    # build-image) still does, as on Argo, and the cluster-only pre-pull tasks are listed as skipped, as always here.
    ran = [s["name"] for s in summary["steps"] if s["status"] != "Skipped"]
    assert ran == ["build-image", "prepare-data", "training-image"]
    assert {s["name"] for s in summary["steps"] if s["status"] == "Skipped"} <= {"prepull-canary", "prepull-image"}
    assert summary["model_version"] is None and summary["serving_url"] is None
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'work' / 'mlflow.db'}")
    assert client.search_registered_models() == []
