"""Publishing and fetching models: local directory and S3 (moto's real HTTP server) backends."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig

from steps.runtime.runner import StepError
from steps.runtime.storage import objectstore, s3
from steps.runtime.storage.objectstore import AlreadyPublishedError, IntegrityError
from steps.runtime.storage.objectstore.manifest import file_entries
from tests.s3server import moto_s3_server

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def s3_endpoint():
    with moto_s3_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, monkeypatch):
    """(store root URI, endpoint or None) — a fresh, empty store for each test."""
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    if request.param == "local":
        return str(tmp_path / "store"), None
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    s3.client(endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/published", endpoint


def make_model(path: Path, seed: str = "a", big: int = 0) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "inference.json").write_text(json.dumps({"program": seed}))
    (path / "inference.pdiparams").write_bytes((seed * 4096).encode())
    (path / "tokenizer").mkdir(exist_ok=True)
    (path / "tokenizer" / "vocab.txt").write_text(f"[PAD]\n[UNK]\n{seed}\n")
    if big:
        (path / "big.bin").write_bytes(bytes(range(256)) * (big // 256))
    return path


def publish(model: Path, store, version="v1", **kw):
    root, endpoint = store
    return objectstore.publish(
        model, root, "ernie", version, {"git_sha": "abc"}, endpoint_url=endpoint, progress=False, **kw
    )


def object_key(root: str, sha: str) -> str:
    return f"{root}/objects/sha256/{sha}"


def overwrite_object(store, sha: str, data: bytes) -> None:
    root, endpoint = store
    if s3.is_s3(root):
        bucket, prefix = s3.split_s3(object_key(root, sha))
        s3.client(endpoint).put_object(Bucket=bucket, Key=prefix, Body=data, Metadata={"sha256": sha})
    else:
        Path(object_key(root, sha)).write_bytes(data)


def test_publish_then_fetch_round_trips_and_layout(tmp_path, store):
    model = make_model(tmp_path / "model")
    result = publish(model, store)
    assert result.model_uri == f"{store[0]}/ernie/v1"
    assert result.bytes_sent == sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    raw = objectstore.read_manifest_bytes(result.model_uri, store[1])
    assert objectstore.sha256_bytes(raw) == result.manifest_digest
    manifest = objectstore.read_manifest(result.model_uri, store[1])
    assert manifest["schema"] == 1 and manifest["model"] == "ernie" and manifest["git_sha"] == "abc"
    assert {f["path"] for f in manifest["files"]} == {"inference.json", "inference.pdiparams", "tokenizer/vocab.txt"}
    out = objectstore.fetch(result.model_uri, tmp_path / "out", store[1])
    for f in manifest["files"]:
        assert (out / f["path"]).read_bytes() == (model / f["path"]).read_bytes()


def test_rerun_sends_zero_bytes(tmp_path, store):
    model = make_model(tmp_path / "model")
    first = publish(model, store)
    again = publish(model, store)
    assert again.bytes_sent == 0
    assert again.manifest_digest == first.manifest_digest
    # A new version with the same files reuses every object.
    other = publish(model, store, version="v2")
    assert other.bytes_sent == 0 and other.skipped == 3


def test_interrupted_upload_leaves_no_manifest_and_rerun_completes(tmp_path, store, monkeypatch):
    model = make_model(tmp_path / "model")
    backend_cls = objectstore.S3Backend if s3.is_s3(store[0]) else objectstore.LocalBackend
    real_put = backend_cls.put_file
    calls = []

    def dies_on_second(self, path, key, sha256, callback):
        calls.append(key)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed mid-upload")
        return real_put(self, path, key, sha256, callback)

    monkeypatch.setattr(backend_cls, "put_file", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        publish(model, store)
    with pytest.raises(StepError, match="not published"):
        objectstore.read_manifest(f"{store[0]}/ernie/v1", store[1])
    monkeypatch.setattr(backend_cls, "put_file", real_put)
    result = publish(model, store)
    assert result.skipped == 1
    total = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    assert 0 < result.bytes_sent < total
    objectstore.fetch(result.model_uri, tmp_path / "out", store[1])


def test_corrupted_object_is_detected_on_fetch(tmp_path, store):
    model = make_model(tmp_path / "model")
    result = publish(model, store)
    manifest = objectstore.read_manifest(result.model_uri, store[1])
    params = next(f for f in manifest["files"] if f["path"] == "inference.pdiparams")
    overwrite_object(store, params["sha256"], b"x" * params["size"])
    dest = tmp_path / "out"
    with pytest.raises(IntegrityError, match=r"inference\.pdiparams.*expected sha256 " + params["sha256"]):
        objectstore.fetch(result.model_uri, dest, store[1])
    assert not dest.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    # A re-publish notices the bad object (hash, not name) and repairs it.
    repaired = publish(model, store, version="v2")
    assert repaired.bytes_sent == params["size"]
    objectstore.fetch(result.model_uri, dest, store[1])


def test_missing_object_is_an_integrity_error(tmp_path, store):
    model = make_model(tmp_path / "model")
    result = publish(model, store)
    manifest = objectstore.read_manifest(result.model_uri, store[1])
    vocab = next(f for f in manifest["files"] if f["path"] == "tokenizer/vocab.txt")
    root, endpoint = store
    if s3.is_s3(root):
        bucket, key = s3.split_s3(object_key(root, vocab["sha256"]))
        s3.client(endpoint).delete_object(Bucket=bucket, Key=key)
    else:
        Path(object_key(root, vocab["sha256"])).unlink()
    with pytest.raises(IntegrityError, match=r"tokenizer/vocab\.txt.*missing"):
        objectstore.fetch(result.model_uri, tmp_path / "out", endpoint)


def test_concurrent_publishers_of_one_version_exactly_one_wins(tmp_path, store):
    models = [make_model(tmp_path / f"m{i}", seed=s) for i, s in enumerate("xy")]
    barrier = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = publish(models[i], store)
        except AlreadyPublishedError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [o for o in outcomes if isinstance(o, objectstore.PublishResult)]
    losers = [o for o in outcomes if isinstance(o, AlreadyPublishedError)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert "already published by another publisher" in str(losers[0])
    manifest = objectstore.read_manifest(winners[0].model_uri, store[1])
    winner_model = models[outcomes.index(winners[0])]
    assert manifest["files"] == file_entries(winner_model)


def test_multipart_upload_is_verified(tmp_path, s3_endpoint, monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    cli = s3.client(s3_endpoint)
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    cli.create_bucket(Bucket=bucket)
    model = make_model(tmp_path / "model", big=11 * MiB)
    small = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=4)
    result = publish(model, (f"s3://{bucket}", s3_endpoint), transfer_config=small)
    manifest = objectstore.read_manifest(result.model_uri, s3_endpoint)
    big = next(f for f in manifest["files"] if f["path"] == "big.bin")
    head = cli.head_object(Bucket=bucket, Key=f"objects/sha256/{big['sha256']}")
    assert head["ETag"].strip('"').endswith("-3")  # three parts: 5 + 5 + 1 MiB
    assert head["Metadata"]["sha256"] == big["sha256"] and head["ContentLength"] == big["size"]
    out = objectstore.fetch(result.model_uri, tmp_path / "out", s3_endpoint)
    assert objectstore.sha256_file(out / "big.bin") == big["sha256"]


def test_local_alias_uses_home_store(tmp_path, monkeypatch):
    monkeypatch.setenv("PADDLE_MLOPS_HOME", str(tmp_path / "home"))
    result = objectstore.publish(make_model(tmp_path / "model"), "local", "ernie", "v1", progress=True)
    assert result.model_uri == f"{tmp_path / 'home' / 'store'}/ernie/v1"
    assert (tmp_path / "home" / "store" / "ernie" / "v1" / "manifest.json").is_file()


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(StepError, match="does not exist"):
        objectstore.publish(tmp_path / "nope", str(tmp_path / "s"), "ernie", "v1", progress=False)
    with pytest.raises(StepError, match="not of the form"):
        objectstore.read_manifest("s3://bucket")


KILLED_PUBLISHER = """
import sys
from boto3.s3.transfer import TransferConfig
from steps.runtime.storage import objectstore
slow = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024, max_concurrency=1)
objectstore.publish(sys.argv[1], sys.argv[2], "ernie", "v1", {"git_sha": "abc"}, endpoint_url=sys.argv[3],
                    progress=False, transfer_config=slow)
"""


def test_publisher_killed_mid_upload_leaves_no_manifest_and_the_next_run_completes(tmp_path, s3_endpoint):
    """A real SIGKILL (no cleanup code runs) while a multipart upload is under way."""
    import os
    import signal
    import subprocess
    import sys
    import time

    model = make_model(tmp_path / "model", big=96 * MiB)
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    client = s3.client(s3_endpoint)
    client.create_bucket(Bucket=bucket)
    root = f"s3://{bucket}/published"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_PUBLISHER, str(model), root, s3_endpoint],
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    deadline = time.monotonic() + 120
    # Kill once the big file's multipart upload has started: some objects are stored, not all.
    while time.monotonic() < deadline and proc.poll() is None:
        if client.list_multipart_uploads(Bucket=bucket).get("Uploads"):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the publisher finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with pytest.raises(StepError, match="not published"):
        objectstore.read_manifest(f"{root}/ernie/v1", s3_endpoint)
    # The interrupted multipart upload is not an object: nothing half-written is visible.
    listed = client.list_objects_v2(Bucket=bucket, Prefix="published/objects/").get("Contents", [])
    sizes = {o["Key"].rsplit("/", 1)[-1]: o["Size"] for o in listed}
    big_sha = objectstore.sha256_file(model / "big.bin")
    assert big_sha not in sizes
    result = objectstore.publish(
        model, root, "ernie", "v1", {"git_sha": "abc"}, endpoint_url=s3_endpoint, progress=False
    )
    assert result.bytes_sent >= 96 * MiB
    out = objectstore.fetch(result.model_uri, tmp_path / "out", s3_endpoint)
    assert (out / "big.bin").read_bytes() == (model / "big.bin").read_bytes()
