"""MLflow reads a published version through the `published-s3` / `published-file` artifact repository.

The repository is found through pyproject.toml's `mlflow.artifact_repository` entry points, as MLflow finds any
plugin (mlflow/mlflow, mlflow/store/artifact/artifact_repository_registry.py `register_entrypoints`); listing is the
manifest, every download the content-addressed object checked against it. Both stores: a local directory and S3
(moto's real HTTP server), the endpoint given the way MLflow users give it (MLFLOW_S3_ENDPOINT_URL).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.exceptions import MlflowException
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

from paddle_mlops_core.config import load_config
from paddle_mlops_core.contracts import CHAMPION
from steps.runtime import config_names
from steps.runtime.release import registry
from steps.runtime.runner import StepError
from steps.runtime.storage import objectstore, s3
from steps.runtime.storage.objectstore import mlflow_repository
from steps.runtime.storage.objectstore.mlflow_repository import PublishedArtifactRepository, source_uri
from tests.s3server import moto_s3_server

MODEL = "ernie-sentiment"


class TextLength(mlflow.pyfunc.PythonModel):
    """A stand-in pyfunc (the project's flavour lands with steps/runtime/serving/mlflow_flavor.py): text -> length."""

    def predict(self, context: Any, model_input: Any, params: Any = None) -> list[int]:
        texts = model_input["text"] if hasattr(model_input, "columns") and "text" in model_input else model_input
        return [len(str(t)) for t in list(texts)]


def mlflow_model_dir(path: Path) -> Path:
    """An export plus the MLflow model files at its root, as evaluate writes them (a tiny pyfunc model)."""
    mlflow.pyfunc.save_model(path, python_model=TextLength(), pip_requirements=[f"mlflow=={mlflow.__version__}"])
    (path / "inference.pdiparams").write_bytes(b"\x01\x02" * 4096)
    (path / "tokenizer").mkdir()
    (path / "tokenizer" / "vocab.txt").write_text("[PAD]\n[UNK]\n好\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def s3_endpoint():
    with moto_s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, monkeypatch) -> tuple[str, str | None]:
    """(store root, endpoint for publishing): MLflow's side gets the endpoint only from MLFLOW_S3_ENDPOINT_URL."""
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    if request.param == "local":
        return str(tmp_path / "store"), None
    endpoint = request.getfixturevalue("s3_endpoint")
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", endpoint)
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    s3.client(endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/published", endpoint


@pytest.fixture
def published(tmp_path, store) -> tuple[objectstore.PublishResult, Path]:
    model = mlflow_model_dir(tmp_path / "model")
    result = objectstore.publish(model, store[0], MODEL, "v1", {"git_sha": "abc"}, endpoint_url=store[1])
    return result, model


def overwrite_object(store: tuple[str, str | None], sha: str, data: bytes) -> None:
    key = f"{store[0]}/objects/sha256/{sha}"
    if s3.is_s3(key):
        bucket, prefix = s3.split_s3(key)
        s3.client(store[1]).put_object(Bucket=bucket, Key=prefix, Body=data)
    else:
        Path(key).write_bytes(data)


def test_source_uri_names_the_store_and_round_trips(tmp_path):
    assert source_uri("s3://models/prod/ernie/v1/") == "published-s3://models/prod/ernie/v1"
    local = tmp_path / "a store" / "ernie" / "v1"
    assert source_uri(str(local)) == "published-" + local.as_uri()
    assert mlflow_repository.model_uri(source_uri(str(local))) == str(local)
    assert mlflow_repository.model_uri("published-s3://models/prod/ernie/v1") == "s3://models/prod/ernie/v1"
    with pytest.raises(StepError, match="<store>/<model-name>/<version>"):
        source_uri("s3://models")
    with pytest.raises(MlflowException, match="names no store"):
        mlflow_repository.model_uri("published-http://host/ernie/v1")


def test_lists_a_version_from_its_manifest(published):
    result, model = published
    repo = get_artifact_repository(source_uri(result.model_uri))
    assert isinstance(repo, PublishedArtifactRepository)
    top = {f.path: (f.is_dir, f.file_size) for f in repo.list_artifacts("")}
    files = {p.name: (False, p.stat().st_size) for p in model.iterdir() if p.is_file()}
    assert top == {**files, "tokenizer": (True, None)}
    assert "MLmodel" in top and "manifest.json" not in top
    assert [(f.path, f.file_size) for f in repo.list_artifacts("tokenizer")] == [
        ("tokenizer/vocab.txt", (model / "tokenizer" / "vocab.txt").stat().st_size)
    ]
    assert repo.list_artifacts("MLmodel") == [] and repo.list_artifacts("no/such") == []


def test_downloads_are_the_published_bytes(published, tmp_path):
    result, model = published
    source = source_uri(result.model_uri)
    out = Path(mlflow.artifacts.download_artifacts(source, dst_path=str(tmp_path / "out")))
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    # one file, addressed below the version (MLflow roots the repository at the URI's parent)
    vocab = mlflow.artifacts.download_artifacts(f"{source}/tokenizer/vocab.txt", dst_path=str(tmp_path / "one"))
    assert Path(vocab).read_bytes() == (model / "tokenizer" / "vocab.txt").read_bytes()
    loaded = mlflow.pyfunc.load_model(source)
    assert loaded.predict(["ab", "abcd"]) == [2, 4]


def test_a_corrupt_object_is_a_clear_error(published, store, tmp_path):
    result, _ = published
    entry = next(f for f in objectstore.read_manifest(result.model_uri, store[1])["files"] if f["path"] == "MLmodel")
    overwrite_object(store, entry["sha256"], b"x" * entry["size"])
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(MlflowException, match=r"MLmodel of .* is corrupt: expected sha256 " + entry["sha256"]):
        mlflow.artifacts.download_artifacts(source_uri(result.model_uri), dst_path=str(dest))
    assert not (dest / "MLmodel").exists()  # the bad bytes are not left behind for a loader to trust
    with pytest.raises(MlflowException, match="republish the model"):
        mlflow.pyfunc.load_model(source_uri(result.model_uri))


def test_an_unpublished_version_is_a_clear_error(store, tmp_path):
    missing = source_uri(f"{store[0]}/{MODEL}/never")
    with pytest.raises(MlflowException, match=r"no manifest\.json .*paddle-mlops publish"):
        mlflow.artifacts.download_artifacts(missing, dst_path=str(tmp_path))


def test_writes_are_refused(published, tmp_path):
    result, model = published
    repo = get_artifact_repository(source_uri(result.model_uri))
    with pytest.raises(MlflowException, match="immutable.*paddle-mlops publish"):
        repo.log_artifact(str(model / "MLmodel"))
    with pytest.raises(MlflowException, match="immutable"):
        repo.log_artifacts(str(model), "again")
    with pytest.raises(MlflowException, match="immutable"):
        repo.delete_artifacts()


def test_registry_stores_the_scheme_and_the_server_accepts_it():
    """What a tracking server checks before it stores a version's source (mlflow/mlflow, mlflow/server/handlers.py
    `_create_model_version`: `_validate_artifact_uri_scheme` (host policy, mlflow/store/artifact/host_policy.py) and
    `_validate_source_run` (local paths only inside the run's artifacts; no `..`)). A published URI is neither a local
    path nor host-addressed, so it passes with or without a run; a bare local path is refused, which is why register
    no longer sends one. The SQL store keeps any non-`models:/` source as the storage location
    (mlflow/store/model_registry/sqlalchemy_store.py `create_model_version`): the registry tests below read it back."""
    from mlflow.server import handlers

    for source in ("published-s3://models/prod/ernie/v1", "published-file:///srv/store/ernie/v1"):
        handlers._validate_artifact_uri_scheme(source, "source")
        handlers._validate_source_run(source, "")
    with pytest.raises(MlflowException, match="local path"):
        handlers._validate_source_run("/srv/store/ernie/v1", "")
    with pytest.raises(MlflowException, match="relative path"):
        handlers._validate_source_run("published-s3://models/prod/../../ernie/v1", "")


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    cfg = load_config(env="local")
    return cfg, registry.connect(cfg)


def test_a_registered_version_loads_and_serves_from_the_published_copy(published, tracking):
    """`models:/` resolves to the version's source, read through the repository. Serving is what `mlflow models serve
    --env-manager local` runs (mlflow/pyfunc/backend.py `PyFuncBackend.serve`: `_download_artifact_from_uri(model_uri)`,
    then mlflow/pyfunc/scoring_server `load_model_with_mlflow_config` + `init`), in process."""
    from fastapi.testclient import TestClient
    from mlflow.pyfunc import scoring_server
    from mlflow.tracking.artifact_utils import _download_artifact_from_uri

    result, _ = published
    cfg, client = tracking
    name = config_names.registered_model(cfg)
    version = registry.register(cfg, result.model_uri, None, {"manifest_digest": result.manifest_digest}, client)
    assert client.get_model_version(name, version).source == source_uri(result.model_uri)
    assert client.get_model_version_download_uri(name, version) == source_uri(result.model_uri)
    assert mlflow.pyfunc.load_model(f"models:/{name}/{version}").predict(["好", "好好"]) == [1, 2]

    registry.set_alias(name, CHAMPION, version, client)
    local = _download_artifact_from_uri(f"models:/{name}@{CHAMPION}")
    app = scoring_server.init(scoring_server.load_model_with_mlflow_config(local))
    with TestClient(app) as http:
        answer = http.post("/invocations", json={"instances": ["很好", "不好看"]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"predictions": [2, 3]}


def test_the_entry_points_name_the_schemes_and_the_class():
    """MLflow finds the repository only through pyproject.toml's entry points; their names are the schemes
    `source_uri` writes, and none holds a "+" (see the handlers test above)."""
    import tomllib

    from tests.conftest import PROJECT_ROOT

    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    points = project["entry-points"]["mlflow.artifact_repository"]
    target = f"{PublishedArtifactRepository.__module__}:{PublishedArtifactRepository.__name__}"
    assert points == {scheme: target for scheme in mlflow_repository.SCHEMES}
    assert not any("+" in scheme for scheme in points)


def test_republishing_an_unchanged_mlflow_model_sends_nothing(published, store):
    """The MLflow files are files of the version like the export's: a rerun, or a new version of the same files,
    sends 0 bytes and keeps the manifest (tests/test_objectstore.py covers the export alone)."""
    result, model = published
    again = objectstore.publish(model, store[0], MODEL, "v1", {"git_sha": "abc"}, endpoint_url=store[1])
    assert (again.bytes_sent, again.manifest_digest) == (0, result.manifest_digest)
    other = objectstore.publish(model, store[0], MODEL, "v2", {"git_sha": "abc"}, endpoint_url=store[1])
    files = [p for p in model.rglob("*") if p.is_file()]
    assert other.bytes_sent == 0 and other.skipped == len(files)
    assert {"MLmodel", "python_env.yaml", "requirements.txt"} <= {p.name for p in files}
