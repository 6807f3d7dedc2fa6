"""The MLflow registry helpers and the exit handler against a real `mlflow server` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import CHAMPION, PREVIOUS_CHAMPION
from steps import close_run
from steps.runtime.release import registry
from steps.runtime.runner import StepError
from steps.runtime.serving.processes import stop_group
from steps.runtime.storage import objectstore
from tests.s3server import free_port

pytestmark = pytest.mark.slow
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real tracking server on loopback; yields its URI."""
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    # One worker and no job runner: the fewest processes that serve the tracking and registry APIs
    # (the job runner would also race the server to create the SQLite schema).
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp}/m.db",
            "--default-artifact-root",
            str(tmp / "art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited: {(tmp / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{uri}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("mlflow server did not become healthy in 240 s")
            time.sleep(0.5)
        yield uri
    finally:
        stop_group(proc, 15)
        log.close()


@pytest.fixture
def env(mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    name = f"ernie-{uuid.uuid4().hex[:8]}"
    cfg = PipelineConfig.model_validate({"mlflow": {"experiment": name, "registered_model": name}})
    return cfg, registry.connect(cfg)


def _tags(digest: str) -> dict[str, str]:
    return {"git_sha": "abc123", "manifest_digest": digest, "data.train_rows": "10"}


def test_tracking_uri_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(tmp_path))
    assert registry.tracking_uri(PipelineConfig()) == f"sqlite:///{tmp_path}/mlflow.db"
    cfg = PipelineConfig.model_validate({"mlflow": {"tracking_uri": "http://mlflow:5000"}})
    assert registry.tracking_uri(cfg) == "http://mlflow:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://other:5000")
    assert registry.tracking_uri(cfg) == "http://other:5000"


def test_register_is_idempotent_and_tagged(env):
    cfg, client = env
    name = cfg.mlflow.registered_model
    v1 = registry.register(cfg, "s3://models/ernie/v1", None, _tags("d1"), client=client)
    assert registry.register(cfg, "s3://models/ernie/v1", None, _tags("d1"), client=client) == v1
    v2 = registry.register(cfg, "s3://models/ernie/v2", None, _tags("d2"), client=client)
    assert v2 != v1
    tags = client.get_model_version(name, v2).tags
    assert tags["manifest_digest"] == "d2" and tags["storage_uri"] == "s3://models/ernie/v2"
    assert tags["git_sha"] == "abc123" and tags["data.train_rows"] == "10"
    # the source MLflow reads the version through (steps/runtime/storage/objectstore/mlflow_repository.py): a real
    # server's create_model_version accepts it (mlflow/server/handlers.py `_validate_source_run`)
    assert client.get_model_version(name, v2).source == "published-s3://models/ernie/v2"


def test_a_local_store_is_registered_and_its_mlmodel_served_by_the_server(env, tmp_path):
    """A local store's version is registered as `published-file://` (a bare path is refused by the server) and the
    server reads its files through the repository: the route the UI's model-version page fetches MLmodel from
    (mlflow/server/handlers.py `get_model_version_artifact_handler`)."""
    cfg, client = env
    model = tmp_path / "model"
    model.mkdir()
    (model / "MLmodel").write_text("flavors:\n  python_function: {}\n", encoding="utf-8")
    published = objectstore.publish(model, str(tmp_path / "store"), "ernie", "v1", {}, progress=False)
    name = cfg.mlflow.registered_model
    version = registry.register(cfg, published.model_uri, None, _tags("d9"), client=client)
    assert client.get_model_version(name, version).source.startswith("published-file:///")
    answer = httpx.get(
        f"{client.tracking_uri}/model-versions/get-artifact",
        params={"name": name, "version": version, "path": "MLmodel"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.content == (model / "MLmodel").read_bytes()


def test_promote_moves_champion_and_keeps_the_previous_one(env):
    cfg, client = env
    name = cfg.mlflow.registered_model
    v1, v2 = (registry.register(cfg, f"s3://m/e/{d}", None, _tags(d), client=client) for d in ("a", "b"))
    assert registry.promote(name, v1, client=client) is None
    assert registry.get_alias_version(name, CHAMPION, client) == v1
    assert registry.promote(name, v2, client=client) == v1
    assert registry.get_alias_version(name, CHAMPION, client) == v2
    assert registry.get_alias_version(name, PREVIOUS_CHAMPION, client) == v1
    assert client.get_model_version(name, v2).tags["previous_champion"] == v1
    assert registry.promote(name, v2, client=client) == v1  # promoting the champion again changes nothing
    assert registry.get_alias_version(name, PREVIOUS_CHAMPION, client) == v1


_STARTS_RUN = """
import sys, time, mlflow
mlflow.set_experiment(sys.argv[1])
run = mlflow.start_run(tags={"workflow": sys.argv[2]})
print(run.info.run_id, flush=True)
time.sleep(300)
"""


def test_run_left_running_by_a_killed_step_is_closed_failed(env, capsys):
    cfg, client = env
    workflow = f"train-deploy-{uuid.uuid4().hex[:6]}"
    step = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", _STARTS_RUN, cfg.mlflow.experiment, workflow],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        killed_run = step.stdout.readline().strip()
    finally:
        step.send_signal(signal.SIGKILL)
        step.wait(10)
    assert killed_run, "the step never started its run"
    assert client.get_run(killed_run).info.status == "RUNNING"
    exp = client.get_experiment_by_name(cfg.mlflow.experiment).experiment_id
    other = client.create_run(exp, tags={"workflow": "someone-else"}).info.run_id

    overrides = json.dumps([f"mlflow.experiment={cfg.mlflow.experiment}"])
    rc = close_run.main(["--overrides", overrides, "--workflow-name", workflow, "--workflow-status", "Failed"])
    assert rc == 0
    assert client.get_run(killed_run).info.status == "FAILED"
    assert client.get_run(other).info.status == "RUNNING"
    assert killed_run in capsys.readouterr().out

    # Rerun of the exit handler finds nothing left to close.
    assert close_run.main(["--overrides", overrides, "--workflow-name", workflow, "--workflow-status", "Failed"]) == 0
    assert "no MLflow run left RUNNING" in capsys.readouterr().out
    rc = close_run.main(["--overrides", overrides, "--workflow-name", "someone-else", "--workflow-status", "Succeeded"])
    assert rc == 0 and client.get_run(other).info.status == "FINISHED"


def test_close_run_reports_unreachable_mlflow(monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    rc = close_run.main(["--workflow-name", "wf", "--workflow-status", "Failed"])
    assert rc == 1
    assert "unreachable" in capsys.readouterr().err


def test_the_rollout_reads_the_champion_from_its_storage_uri_tag(env):
    """An image-only rollout serves the champion's published model; a version registered some other way (its
    source a runs:/ URI the model server cannot load) is refused instead of rolled out and rolled back."""
    from steps.runtime.release.champion import MlflowRegistry

    cfg, client = env
    name = cfg.mlflow.registered_model
    published = registry.register(cfg, "s3://m/e/v1", None, _tags("c1"), client=client)
    registry.promote(name, published, client=client)
    assert MlflowRegistry(cfg).champion() == (published, "s3://m/e/v1")

    run = client.create_run(client.create_experiment("logged-elsewhere"))
    logged = client.create_model_version(name, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    registry.promote(name, str(logged.version), client=client)
    with pytest.raises(StepError, match="has no storage_uri tag"):
        MlflowRegistry(cfg).champion()
