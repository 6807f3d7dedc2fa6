"""The pipeline's tracking and registry calls against MLflow run as argo/mlflow.yaml runs it: PostgreSQL
metadata (through the driver images/mlflow installs) and artifacts proxied to an S3 endpoint.

The server's command, arguments and environment come from `pipelines.platform.mlflow_server.deployment`,
the function that writes the manifest; only the Secret values, the bind address and HOME are
substituted. PostgreSQL is Debian's `postgresql` package (.ci/run installs it): missing, these tests
skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from paddle_mlops_core.config import PipelineConfig, load_config
from paddle_mlops_core.config.loader import default_config_path
from paddle_mlops_core.contracts import CHALLENGER, CHAMPION, PREVIOUS_CHAMPION
from pipelines.platform import mlflow_server
from steps import close_run, evaluate, prepare_data, register, train, upload
from steps.runtime.release import gate, registry
from steps.runtime.serving.processes import stop_group
from steps.runtime.storage import s3
from tests import pgserver
from tests.fixtures_ernie import common, sentiment_rows, write_jsonl
from tests.s3server import DUMMY_CREDENTIALS, free_port, moto_s3_server

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
ARTIFACT_BUCKET = mlflow_server.ARTIFACTS_DESTINATION.removeprefix("s3://")
MODEL_BUCKET = "models"
GIT_SHA = "0123456789abcdef0123"


def _require_postgres() -> Path:
    bindir = pgserver.find_bindir()
    if bindir:
        return bindir
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"PostgreSQL is not installed; .ci/run installs Debian's postgresql package ({pgserver.INSTALL_HINT})"
        )
    pytest.skip(f"PostgreSQL is not installed ({pgserver.INSTALL_HINT}); CI=true makes this a failure")


def manifest_process(
    cfg: PipelineConfig, secret_values: dict[tuple[str, str], str], home: Path
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the manifest's mlflow container, Secret references resolved from `secret_values`.

    Substituted: the bind address (loopback, not 0.0.0.0), HOME (the pod's /tmp emptyDir) and the
    `mlflow` executable (this virtualenv's, at the image's MLflow version).
    """
    container = mlflow_server.deployment(cfg)["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secret_values[(ref["name"], ref["key"])]
    env |= {"MLFLOW_HOST": "127.0.0.1", "HOME": str(home)}
    command = [str(VENV_BIN / container["command"][0]), *container["command"][1:], *container["args"]]
    return command, env


@dataclass(frozen=True)
class Stack:
    tracking_uri: str
    database_uri: str
    s3_endpoint: str
    cfg: PipelineConfig


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """PostgreSQL, moto S3 and `mlflow server` started from the manifest's container spec."""
    bindir = _require_postgres()
    tmp = tmp_path_factory.mktemp("mlflow-postgres")
    with pgserver.postgres_server(bindir) as database_uri, moto_s3_server() as endpoint:
        s3.client(endpoint).create_bucket(Bucket=ARTIFACT_BUCKET)
        port = free_port()
        # localhost, not 127.0.0.1: the manifest's MLFLOW_SERVER_ALLOWED_HOSTS admits localhost:<port> only.
        tracking_uri = f"http://localhost:{port}"
        # argo/ is compiled from the base config without an environment overlay; only the two URIs differ.
        cfg = load_config(
            default_config_path(), overrides=[f"mlflow.tracking_uri={tracking_uri}", f"storage.endpoint_url={endpoint}"]
        )
        secret_values = {
            (mlflow_server.BACKEND_SECRET["name"], mlflow_server.BACKEND_SECRET["key"]): database_uri,
            **{
                (cfg.storage.credentials_secret, k): DUMMY_CREDENTIALS[k]
                for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
            },
        }
        argv, env = manifest_process(cfg, secret_values, tmp)
        log = open(tmp / "server.log", "wb")
        # Only the container's environment (and PATH): nothing of the test process's leaks into the server.
        proc = subprocess.Popen(
            argv,
            env={"PATH": os.environ["PATH"], **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp,
            start_new_session=True,
        )
        try:
            _wait_healthy(proc, f"{tracking_uri}/health", tmp / "server.log")
            yield Stack(tracking_uri, database_uri, endpoint, cfg)
        finally:
            stop_group(proc, 15)
            log.close()


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(
                f"mlflow server not healthy at {url} after {timeout_s:.0f} "
                f"s:\n{log.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.3)


@pytest.fixture
def tracking(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The steps' environment in a workflow pod: the tracking URI and the S3 endpoint."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", stack.tracking_uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("S3_ENDPOINT_URL", stack.s3_endpoint)
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(tmp_path / "home"))
    return stack


def query(database_uri: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_uri) as conn:
        return conn.execute(sql, params).fetchall()


def artifact_keys(endpoint: str, run_id: str) -> list[str]:
    pages = s3.client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=ARTIFACT_BUCKET)
    return [o["Key"] for page in pages for o in page.get("Contents", []) if f"/{run_id}/artifacts/" in o["Key"]]


def train_and_evaluate(steps_common: list[str], source: Path, ws: Path, out: Path) -> str:
    """prepare-data, train and evaluate as the workflow runs them; returns the training run's id."""
    assert prepare_data.main([*common(f"data.source={source}"), "--output", str(ws / "data")]) == 0
    assert train.main([*steps_common, "--workspace", str(ws), "--git-sha", GIT_SHA]) == 0
    run_id = json.loads((ws / "model" / "training.json").read_text())["mlflow_run_id"]
    assert evaluate.main([*steps_common, "--workspace", str(ws), "--outputs-dir", str(out)]) == 0
    return run_id


def upload_and_register(steps_common: list[str], ws: Path, out: Path, run_id: str, published: str) -> str:
    """The upload and register steps for one published version; returns the registered model version."""
    upload_args = ["--workspace", str(ws), "--run-id", run_id, "--version", published]
    outputs = ["--outputs-dir", str(out)]
    assert upload.main([*steps_common, "--git-sha", GIT_SHA, *upload_args, *outputs]) == 0
    model = ["--model-uri", (out / "model-uri").read_text(), "--manifest-digest", (out / "manifest-digest").read_text()]
    register_args = [*model, "--run-id", run_id, *outputs]
    assert register.main([*steps_common, "--git-sha", GIT_SHA, *register_args]) == 0
    return (out / "model-version").read_text()


def assert_run_rows(db: str, run_id: str, workflow: str) -> None:
    """The training run's rows in PostgreSQL: status, name, params, metrics, tags and dataset inputs."""
    ((status, artifact_uri, run_name),) = query(
        db, "SELECT status, artifact_uri, name FROM runs WHERE run_uuid = %s", run_id
    )
    assert (status, run_name) == ("FINISHED", workflow)
    assert artifact_uri.startswith("mlflow-artifacts:/")  # proxied: steps hold no S3 credentials for artifacts
    assert query(db, "SELECT value FROM params WHERE run_uuid = %s AND key = 'model.hidden_size'", run_id) == [("32",)]
    steps = query(db, "SELECT step FROM metrics WHERE run_uuid = %s AND key = 'dev_accuracy' ORDER BY step", run_id)
    assert [s for (s,) in steps] == [1, 2]  # one dev evaluation per epoch
    metric_keys = {k for (k,) in query(db, "SELECT key FROM latest_metrics WHERE run_uuid = %s", run_id)}
    assert {"train_loss", "best_dev_accuracy", "test_accuracy", "test_macro_f1"} <= metric_keys
    gate = query(db, "SELECT value FROM tags WHERE run_uuid = %s AND key = 'gate.passed'", run_id)
    assert gate in ([("true",)], [("false",)])
    inputs = query(
        db,
        "SELECT d.name FROM inputs i JOIN datasets d ON d.dataset_uuid = i.source_id "
        "WHERE i.destination_id = %s AND i.destination_type = 'RUN'",
        run_id,
    )
    assert sorted(inputs) == [("dev",), ("test",), ("train",)]  # the train step logs its three splits


def assert_registry_rows(db: str, name: str, run_id: str, v1: str, v2: str) -> None:
    """The registered model, both versions (from the run, stored under the model bucket) and the aliases."""
    assert query(db, "SELECT name FROM registered_models WHERE name = %s", name) == [(name,)]
    rows = query(db, "SELECT version, source, run_id FROM model_versions WHERE name = %s ORDER BY version", name)
    assert [(str(v), r) for v, _, r in rows] == [(v1, run_id), (v2, run_id)]
    assert all(src.startswith(f"published-s3://{MODEL_BUCKET}/models/") for _, src, _ in rows)  # read via the plugin
    aliases = dict(query(db, "SELECT alias, version FROM registered_model_aliases WHERE name = %s", name))
    assert {k: str(v) for k, v in aliases.items()} == {CHALLENGER: v2, CHAMPION: v2, PREVIOUS_CHAMPION: v1}


@pytest.mark.slow
def test_pipeline_tracks_and_registers_on_postgres(
    tracking: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflow = f"train-deploy-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("PADDLE_MLOPS_RUN", workflow)
    name = f"ernie-{uuid.uuid4().hex[:6]}"
    steps_common = common(
        f"mlflow.experiment={name}", f"mlflow.registered_model={name}", f"storage.uri=s3://{MODEL_BUCKET}/models"
    )
    src = write_jsonl(tmp_path / "reviews.jsonl", sentiment_rows())
    ws, out = tmp_path / "ws", tmp_path / "out"
    run_id = train_and_evaluate(steps_common, src, ws, out)
    client = registry.connect(load_config(env="local"))

    s3.client(tracking.s3_endpoint).create_bucket(Bucket=MODEL_BUCKET)
    versions = []
    for published in ("v1", "v2"):
        versions.append(upload_and_register(steps_common, ws, out, run_id, published))
        assert registry.get_alias_version(name, CHALLENGER, client) == versions[-1]
        assert registry.promote(name, versions[-1], client) == (versions[0] if len(versions) == 2 else None)
    v1, v2 = versions
    assert registry.get_alias_version(name, CHAMPION, client) == v2
    assert registry.get_alias_version(name, PREVIOUS_CHAMPION, client) == v1
    # evaluate's champion lookup reads the champion's test metric back from its run on PostgreSQL.
    champ = gate.champion(client, name, tracking.cfg.gate.metric)
    assert champ is not None and champ[0] == v2

    # The rows are in PostgreSQL, not in some store of the client's ...
    assert_run_rows(tracking.database_uri, run_id, workflow)
    assert_registry_rows(tracking.database_uri, name, run_id, v1, v2)
    # ... and the artifacts in the S3 bucket the server proxies to.
    keys = artifact_keys(tracking.s3_endpoint, run_id)
    assert any(k.endswith("/artifacts/evaluation/metrics.json") for k in keys), keys
    assert any("/artifacts/model-info/" in k for k in keys), keys


@pytest.mark.slow
def test_exit_handler_closes_running_runs_with_the_workflow_status(
    tracking: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = f"ernie-{uuid.uuid4().hex[:6]}"
    client = registry.connect(load_config(env="local"))
    exp_id = client.create_experiment(experiment)
    # What a step killed mid-run (OOM, preemption) leaves behind: a run that never ended.
    left = {
        status: client.create_run(exp_id, tags={"workflow": f"wf-{status.lower()}"}).info.run_id
        for status in ("Failed", "Succeeded")
    }
    for argo_status, run_id in left.items():
        assert query(tracking.database_uri, "SELECT status FROM runs WHERE run_uuid = %s", run_id) == [("RUNNING",)]
        rc = close_run.main(
            [
                "--overrides",
                json.dumps([f"mlflow.experiment={experiment}"]),
                "--workflow-name",
                f"wf-{argo_status.lower()}",
                "--workflow-status",
                argo_status,
            ]
        )
        assert rc == 0 and run_id in capsys.readouterr().out
    rows = dict(
        query(
            tracking.database_uri,
            "SELECT run_uuid, status FROM runs WHERE experiment_id = %s AND end_time IS NOT NULL",
            int(exp_id),
        )
    )
    assert rows == {left["Failed"]: "FAILED", left["Succeeded"]: "FINISHED"}


def image_pins() -> dict[str, tuple[str, str]]:
    """{distribution, lower case: (requirement as written, version)} for each `==` pin in images/mlflow/Dockerfile."""
    text = (ROOT / "images" / "mlflow" / "Dockerfile").read_text()
    found = re.findall(r"([A-Za-z0-9_.-]+)(\[[\w,]*\])?==([\w.]+)", text)
    return {name.lower(): (name + extras, version) for name, extras, version in found}


def test_mlflow_image_installs_the_driver_postgresql_uris_select() -> None:
    """The Secret's `postgresql://` URI makes SQLAlchemy load its default PostgreSQL driver: images/mlflow must
    pin the SQLAlchemy these tests run and install that driver, at the version the dev extra pins.

    Upstream: SQLAlchemy 2.1 made psycopg 3 the default (sqlalchemy/sqlalchemy, tag rel_2_1_9,
    lib/sqlalchemy/dialects/postgresql/__init__.py line 99: `base.dialect = dialect = psycopg.dialect`);
    ghcr.io/mlflow/mlflow is `pip install mlflow==$VERSION` (mlflow/mlflow, docker/Dockerfile), which takes
    the newest `sqlalchemy<3`, so with psycopg2 alone the server exits at start.
    """
    import sqlalchemy
    from sqlalchemy.engine import make_url

    pins = image_pins()
    assert pins.get("sqlalchemy", ("", ""))[1] == sqlalchemy.__version__, (
        f"images/mlflow/Dockerfile must pin sqlalchemy=={sqlalchemy.__version__} (uv.lock's): the driver "
        "a postgresql:// URI loads is SQLAlchemy's default, which changes between releases"
    )
    module = make_url("postgresql://mlflow@db/mlflow").get_dialect().import_dbapi().__name__.split(".")[0]
    pinned = [pins[d.lower()] for d in packages_distributions().get(module, []) if d.lower() in pins]
    assert pinned, (
        f"images/mlflow/Dockerfile installs no distribution of {module!r}, the driver SQLAlchemy "
        f"{sqlalchemy.__version__} loads for postgresql:// URIs: add it to its pip install line"
    )
    ((requirement, version),) = pinned
    assert installed_version(requirement.split("[")[0]) == version
    assert f'"{requirement}=={version}"' in (ROOT / "pyproject.toml").read_text(), (
        "pin the same driver in the dev extra"
    )
