"""The upload and register steps end to end: workspace -> object store -> MLflow registry."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import CHALLENGER
from steps import register, upload
from steps.runtime.release import registry
from steps.runtime.storage import objectstore, s3, workspace
from steps.runtime.storage.objectstore.manifest import content_digest, sha256_bytes
from tests.s3server import moto_s3_server

GIT_SHA = "0123456789abcdef0123"
RUN_ID = "feedbeefcafe0000"


@pytest.fixture(scope="module")
def s3_endpoint():
    with moto_s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/home/mlflow.db")
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return tmp_path / "home"


def make_workspace(path: Path) -> Path:
    (path / "model").mkdir(parents=True)
    (path / "model" / "inference.json").write_text('{"program": 1}')
    (path / "model" / "inference.pdiparams").write_bytes(b"\x00\x01" * 2048)
    (path / "model" / "label_map.json").write_text('{"0": "negative", "1": "positive"}')
    (path / "eval").mkdir()
    (path / "eval" / "metrics.json").write_text(json.dumps({"accuracy": 0.9, "macro_f1": 0.88}))
    (path / "data").mkdir()
    (path / "data" / "stats.json").write_text(json.dumps({"train": 80, "dev": 10, "test": 10}))
    return path


def run_upload(ws: str, out: Path, *extra: str) -> int:
    return upload.main(
        [
            "--env",
            "local",
            "--git-sha",
            GIT_SHA,
            "--workspace",
            ws,
            "--run-id",
            RUN_ID,
            "--outputs-dir",
            str(out),
            *extra,
        ]
    )


def run_register(model_uri: str, digest: str, out: Path) -> int:
    return register.main(
        [
            "--env",
            "local",
            "--git-sha",
            GIT_SHA,
            "--model-uri",
            model_uri,
            "--manifest-digest",
            digest,
            "--run-id",
            "",
            "--outputs-dir",
            str(out),
        ]
    )


def test_upload_then_register_locally(tmp_path, home, capsys):
    ws = make_workspace(tmp_path / "ws")
    out = tmp_path / "outputs"
    assert run_upload(str(ws), out) == 0
    model_uri = (out / "model-uri").read_text()
    digest = (out / "manifest-digest").read_text()
    files = objectstore.manifest.file_entries(ws / "model")
    assert model_uri == f"{home}/store/ernie-sentiment/{GIT_SHA[:12]}-{RUN_ID[:8]}-{content_digest(files)[:8]}"
    manifest = objectstore.read_manifest(model_uri)
    assert manifest["metrics"]["accuracy"] == 0.9 and manifest["data_stats"]["train"] == 80
    assert manifest["git_sha"] == GIT_SHA
    assert "bytes sent" in capsys.readouterr().out

    # A retried upload step is a no-op with the same outputs.
    assert run_upload(str(ws), out) == 0
    assert "published" in (captured := capsys.readouterr().out) and " 0 bytes sent" in captured
    assert (out / "manifest-digest").read_text() == digest

    assert run_register(model_uri, digest, out) == 0
    version = (out / "model-version").read_text()
    client = registry.connect(load_config(env="local"))
    assert registry.get_alias_version("ernie-sentiment", CHALLENGER, client) == version
    tags = client.get_model_version("ernie-sentiment", version).tags
    assert tags["manifest_digest"] == digest and tags["git_sha"] == GIT_SHA
    assert json.loads(tags["data_stats"])["test"] == 10 and tags["storage_uri"] == model_uri
    assert run_register(model_uri, digest, out) == 0
    assert (out / "model-version").read_text() == version


def test_a_reevaluated_export_of_the_same_run_is_a_new_version(tmp_path, home):
    """`--from evaluate` re-measures the engine variants; a different engine.json is different content, published
    beside the first version rather than refused as a conflicting publish of it."""
    ws = make_workspace(tmp_path / "ws")
    out = tmp_path / "outputs"
    (ws / "model" / "engine.json").write_text(json.dumps({"selected": "paddle-fp32"}))
    assert run_upload(str(ws), out) == 0
    first = (out / "model-uri").read_text()
    (ws / "model" / "engine.json").write_text(json.dumps({"selected": "onnx-int8"}))
    assert run_upload(str(ws), out) == 0
    second = (out / "model-uri").read_text()
    prefix = f"{home}/store/ernie-sentiment/{GIT_SHA[:12]}-{RUN_ID[:8]}-"
    assert first.startswith(prefix) and second.startswith(prefix) and first != second
    # The engine choice is content: each version lists its own engine.json, the other files are shared objects.
    engines = [
        {f["path"]: f["sha256"] for f in objectstore.read_manifest(uri)["files"]}["engine.json"]
        for uri in (first, second)
    ]
    assert engines[0] == sha256_bytes(json.dumps({"selected": "paddle-fp32"}).encode()) != engines[1]


def test_an_explicit_version_with_different_content_is_refused(tmp_path, home, capsys):
    ws = make_workspace(tmp_path / "ws")
    out = tmp_path / "outputs"
    assert run_upload(str(ws), out, "--version", "v1") == 0
    (ws / "model" / "label_map.json").write_text('{"0": "neg", "1": "pos"}')
    assert run_upload(str(ws), out, "--version", "v1") == 2
    assert "already published by another publisher" in capsys.readouterr().err


def test_register_refuses_unpublished_or_altered_models(tmp_path, home, capsys):
    out = tmp_path / "outputs"
    assert run_register(f"{home}/store/ernie-sentiment/nope", "0" * 64, out) == 2
    assert "is not published" in capsys.readouterr().err
    ws = make_workspace(tmp_path / "ws")
    assert run_upload(str(ws), out) == 0
    model_uri = (out / "model-uri").read_text()
    assert run_register(model_uri, "f" * 64, out) == 2
    assert "not the expected" in capsys.readouterr().err
    assert not (out / "model-version").exists()


def test_upload_bad_workspace_is_a_clear_error(tmp_path, home, capsys):
    (tmp_path / "empty").mkdir()
    assert run_upload(str(tmp_path / "empty"), tmp_path / "o") == 2
    assert "run the train step first" in capsys.readouterr().err


def test_upload_from_s3_workspace_to_s3_store(tmp_path, home, s3_endpoint, monkeypatch):
    monkeypatch.setenv("S3_ENDPOINT_URL", s3_endpoint)
    bucket = f"runs-{uuid.uuid4().hex[:10]}"
    s3.client().create_bucket(Bucket=bucket)
    ws_uri = f"s3://{bucket}/runs/wf-1"
    workspace.stage_out(make_workspace(tmp_path / "ws"), ws_uri)
    out = tmp_path / "outputs"
    store = json.dumps([f"storage.uri=s3://{bucket}/models"])
    assert run_upload(ws_uri, out, "--overrides", store, "--version", "v7") == 0
    model_uri = (out / "model-uri").read_text()
    assert model_uri == f"s3://{bucket}/models/ernie-sentiment/v7"
    fetched = objectstore.fetch(model_uri, tmp_path / "fetched")
    assert (fetched / "inference.pdiparams").read_bytes() == b"\x00\x01" * 2048
    assert run_register(model_uri, (out / "manifest-digest").read_text(), out) == 0
