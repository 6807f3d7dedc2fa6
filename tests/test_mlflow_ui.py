"""`paddle-mlops ui` serves the local MLflow store; headless Chromium sees the experiment, run and model."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import mlflow
import pytest
from mlflow.tracking import MlflowClient

from paddle_mlops_core.contracts import CHAMPION
from steps.runtime.serving.processes import stop_group

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in CI containers
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no network here: keep Chromium from trying
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def _require_browser() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
    pytest.skip("chromium is not installed (apt-get install chromium); CI=true makes this a failure")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def _chromium(browser: str, profile: Path, *args: str) -> str:
    out = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--window-size=1400,1400",
            "--virtual-time-budget=20000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return out.stdout


def test_mlflow_ui_shows_experiment_run_metrics_and_model(tmp_path: Path) -> None:
    browser = _require_browser()
    experiment_id, run_id = _seed_store(tmp_path)
    port = _free_port()
    printed = tmp_path / "ui.out"
    server = subprocess.Popen(
        [sys.executable, "-m", "paddle_mlops.cli", "ui", "--workdir", str(tmp_path), "--port", str(port)],
        stdout=printed.open("w"),
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # mlflow ui forks workers: stop the whole group
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, "paddle-mlops ui exited early"
            assert time.monotonic() < deadline, "MLflow UI did not become healthy"
            time.sleep(1)
        profile = tmp_path / "chromium-profile"
        run_page = f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
        dom = _chromium(browser, profile, "--dump-dom", run_page)
        assert "train-deploy-ui-test" in dom and "ernie-sentiment" in dom
        assert "dev_accuracy" in dom and "test_macro_f1" in dom
        # The experiment link `paddle-mlops ui` prints opens on the runs; without the view parameter MLflow 3
        # opens a fresh browser on the GenAI traces overview.
        link = next(line.split(": ", 1)[1] for line in printed.read_text().splitlines() if "ernie-sentiment:" in line)
        assert link == f"{base}/#/experiments/{experiment_id}?workflowType=machine_learning"
        assert "<title>Runs - " in _chromium(browser, tmp_path / "fresh-1", "--dump-dom", link)
        plain = _chromium(browser, tmp_path / "fresh-2", "--dump-dom", f"{base}/#/experiments/{experiment_id}")
        assert "<title>Overview - " in plain
        models = _chromium(browser, profile, "--dump-dom", f"{base}/#/models/ernie-sentiment")
        assert "Version 1" in models and CHAMPION in models
        shot = tmp_path / "mlflow-run.png"
        _chromium(browser, profile, f"--screenshot={shot}", run_page)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        keep = os.environ.get("PADDLE_MLOPS_SCREENSHOT_DIR")
        if keep:  # how docs/img/mlflow-run.png is refreshed
            shutil.copy(shot, Path(keep) / "mlflow-run.png")
    finally:
        stop_group(server, 20)
