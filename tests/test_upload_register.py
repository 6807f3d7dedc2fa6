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
    splits = {"train": 80, "dev": 10, "test": 10}
    stats = {
        "splits": {k: {"total": n} for k, n in splits.items()},
        "sha256": {f"{k}.jsonl": k[0] * 64 for k in splits},
    }
    (path / "data" / "stats.json").write_text(json.dumps(stats))
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


def run_register(model_uri: str, digest: str, out: Path, run_id: str = "") -> int:
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
            run_id,
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
    assert manifest["metrics"]["accuracy"] == 0.9 and manifest["data_stats"]["splits"]["train"]["total"] == 80
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
    assert tags["data.test_rows"] == "10" and tags["data.test_sha256"] == "t" * 16 and tags["storage_uri"] == model_uri
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


def test_the_version_is_linked_to_its_logged_model_and_described_by_a_model_card(tmp_path, home):
    """upload names evaluate's LoggedModel in the manifest (`mlflow_model_id`); register passes it as `model_id=` and
    the LoggedModel lists the version (`mlflow.modelVersions`, as mlflow/server/handlers.py `_create_model_version`
    records it); the description is a Markdown card and no tag is a JSON document."""
    import mlflow

    from steps.runtime.training import model_tracking

    ws = make_workspace(tmp_path / "ws")
    test = {"name": "McNemar exact", "p_value": 0.01}
    baseline = {"kind": "tfidf-logreg", "metric": "accuracy", "model": 0.9, "baseline": 0.8, "difference": 0.1,
                "ci_low": 0.02, "ci_high": 0.18, "confidence": 0.95, "test": test}  # fmt: skip
    report = {"task_type": "text-classification", "accuracy": 0.9, "macro_f1": 0.88, "examples": 10,
              "baseline": baseline, "engine": {"selected": "onnx-int8"}, "per_class": {"a": {"f1": 0.9}}}  # fmt: skip
    (ws / "eval" / "metrics.json").write_text(json.dumps(report))
    client = registry.connect(load_config(env="local"))
    # artifacts under the test's home: MLflow's default root is ./mlruns in the checkout (the external model's
    # placeholder MLmodel lands there)
    experiment = client.create_experiment("ernie-sentiment", artifact_location=(home / "mlruns").as_uri())
    run = client.create_run(experiment)
    model_id = model_tracking.ensure_logged_model(client, client.get_run(run.info.run_id), "ernie-sentiment",
                                                  "text-classification", "d" * 64)  # fmt: skip
    model_tracking.write_record(ws / "eval", model_id)
    out = tmp_path / "outputs"
    assert run_upload(str(ws), out) == 0
    model_uri, digest = (out / "model-uri").read_text(), (out / "manifest-digest").read_text()
    assert objectstore.read_manifest(model_uri)["mlflow_model_id"] == model_id
    assert run_register(model_uri, digest, out, run.info.run_id) == 0
    version = client.get_model_version("ernie-sentiment", (out / "model-version").read_text())
    assert version.run_id == run.info.run_id
    linked = client.get_logged_model(model_id)
    assert json.loads(linked.tags["mlflow.modelVersions"]) == [{"name": "ernie-sentiment", "version": 1}]
    assert linked.tags["published_uri"] == model_uri
    card = version.description
    assert (
        card.startswith("### sentiment (text-classification)")
        and "| test accuracy | **0.9000** on 10 examples |" in card
    )
    assert "0.8000: difference 0.1000 [0.0200, 0.1800] (95 % CI; McNemar exact p=0.0100)" in card
    assert (
        "onnx-int8" in card and f"`{GIT_SHA[:12]}`" in card and run.info.run_id in card and "`tttttttttttttttt`" in card
    )
    assert all(len(v) <= 250 or not v.lstrip().startswith(("{", "[")) for v in version.tags.values())
    assert "data_stats" not in version.tags and "metrics" not in version.tags
    # Registered again (a retry): the same version, linked once.
    assert run_register(model_uri, digest, out, run.info.run_id) == 0
    assert len(json.loads(client.get_logged_model(model_id).tags["mlflow.modelVersions"])) == 1
    assert mlflow.search_logged_models(experiment_ids=[experiment], output_format="list")[0].model_id == model_id


def test_a_logged_model_of_another_tracking_server_is_kept_as_a_tag_not_linked(tmp_path, home):
    ws = make_workspace(tmp_path / "ws")
    (ws / "eval" / "logged_model.json").write_text(json.dumps({"model_id": "m-elsewhere"}))
    out = tmp_path / "outputs"
    assert run_upload(str(ws), out) == 0
    assert run_register((out / "model-uri").read_text(), (out / "manifest-digest").read_text(), out) == 0
    client = registry.connect(load_config(env="local"))
    tags = client.get_model_version("ernie-sentiment", (out / "model-version").read_text()).tags
    assert tags["source_model_id"] == "m-elsewhere"


def test_the_card_links_the_run_in_the_model_training_view():
    """MLflow 3.17's UI lays an experiment out by the `workflowType` URL parameter (contracts.MLFLOW_UI_VIEW): a
    link without it may open the GenAI overview."""
    from steps.runtime.release import model_card

    link = model_card.run_link("http://mlflow.example:5000", "7", "abc")
    assert link == "[abc](http://mlflow.example:5000/#/experiments/7/runs/abc?workflowType=machine_learning)"
    assert model_card.run_link("sqlite:///x/mlflow.db", "7", "abc") == "`abc`"
