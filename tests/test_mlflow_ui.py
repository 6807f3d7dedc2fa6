"""`paddle-mlops ui` serves the local MLflow store; headless Chromium sees the experiment, run and model."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from paddle_mlops_core.contracts import CHAMPION
from tests.browser import chromium, keep_screenshot, mlflow_ui, require_browser

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _seed_store(workdir: Path) -> tuple[str, str]:
    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = mlflow.set_experiment("ernie-sentiment")
    with mlflow.start_run(run_name="train-deploy-ui-test") as run:
        mlflow.log_params({"hidden_size": 32, "epochs": 2})
        for epoch, acc in enumerate([0.71, 0.83]):
            mlflow.log_metric("dev_accuracy", acc, step=epoch)
        mlflow.log_metric("test_macro_f1", 0.82)
    client = MlflowClient()
    client.create_registered_model("ernie-sentiment")
    version = client.create_model_version("ernie-sentiment", source=str(workdir / "store"), run_id=run.info.run_id)
    client.set_registered_model_alias("ernie-sentiment", CHAMPION, version.version)
    mlflow.set_tracking_uri("")
    return experiment.experiment_id, run.info.run_id


def test_mlflow_ui_shows_experiment_run_metrics_and_model(tmp_path: Path) -> None:
    browser = require_browser()
    experiment_id, run_id = _seed_store(tmp_path)
    printed = tmp_path / "ui.out"
    with mlflow_ui(tmp_path, printed) as base:
        profile = tmp_path / "chromium-profile"
        run_page = f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
        dom = chromium(browser, profile, "--dump-dom", run_page)
        assert "train-deploy-ui-test" in dom and "ernie-sentiment" in dom
        assert "dev_accuracy" in dom and "test_macro_f1" in dom
        # The experiment link `paddle-mlops ui` prints opens on the runs; without the view parameter MLflow 3
        # opens a fresh browser on the GenAI traces overview.
        link = next(line.split(": ", 1)[1] for line in printed.read_text().splitlines() if "ernie-sentiment:" in line)
        assert link == f"{base}/#/experiments/{experiment_id}?workflowType=machine_learning"
        assert "<title>Runs - " in chromium(browser, tmp_path / "fresh-1", "--dump-dom", link)
        plain = chromium(browser, tmp_path / "fresh-2", "--dump-dom", f"{base}/#/experiments/{experiment_id}")
        assert "<title>Overview - " in plain
        models = chromium(browser, profile, "--dump-dom", f"{base}/#/models/ernie-sentiment")
        assert "Version 1" in models and CHAMPION in models
        shot = tmp_path / "mlflow-run.png"
        chromium(browser, profile, f"--screenshot={shot}", run_page)
        keep_screenshot(shot, "mlflow-run.png")
