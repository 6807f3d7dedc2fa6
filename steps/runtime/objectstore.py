"""Publish model directories to an object store, and fetch them back with integrity checks.

Layout under the store root (a local directory or an `s3://bucket/prefix`):

    objects/sha256/<hex>                     content-addressed file bodies
    <model-name>/<version>/manifest.json     {"schema": 1, "model", "version", "files": [...], ...}

A model version is published exactly when its manifest exists. Objects go up first and are
verified; the manifest is written last with a create-if-absent, so a crash or a lost race never
leaves a manifest that points at missing or wrong bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from steps.runtime import runner, s3
from steps.runtime.runner import StepError

log = logging.getLogger(__name__)

SCHEMA = 1
MANIFEST = "manifest.json"
OBJECTS = "objects/sha256"
# Large model files go up in parallel parts; 16 MiB parts keep a failed part cheap to resend.
DEFAULT_TRANSFER = TransferConfig(
    multipart_threshold=64 * 1024 * 1024, multipart_chunksize=16 * 1024 * 1024, max_concurrency=8
)
# What makes two publishes of one version the same model: the files, byte for byte. Metadata
# (creation time, evaluation latencies of a rerun) may differ; the first manifest stays.
_IDENTITY = ("schema", "model", "version", "files")
_CHUNK = 1024 * 1024

Callback = Callable[[int], None]


class IntegrityError(StepError):
    """Stored bytes do not match what the manifest promises (corrupt, truncated or missing object)."""


class AlreadyPublishedError(StepError):
    """The version already exists with different content (another publisher won)."""


@dataclass(frozen=True)
class PublishResult:
    model_uri: str
    manifest_digest: str
    bytes_sent: int
    skipped: int


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Backend(Protocol):
    """The few operations publishing needs; keys are relative to the store root."""

    root: str

    def has_object(self, key: str, size: int, sha256: str) -> bool: ...
    def put_file(self, path: Path, key: str, sha256: str, callback: Callback) -> None: ...
    def get_file(self, key: str, dest: Path, callback: Callback) -> None: ...
    def create_exclusive(self, key: str, data: bytes) -> bool: ...
    def read(self, key: str) -> bytes | None: ...


class LocalBackend:
    """A directory as the store (the embedded default)."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(Path(root).resolve())

    def _path(self, key: str) -> Path:
        return Path(self.root, *key.split("/"))

    def has_object(self, key: str, size: int, sha256: str) -> bool:
        path = self._path(key)
        # Re-hash rather than trust the name: a truncated or edited object must be re-sent.
        return path.is_file() and path.stat().st_size == size and sha256_file(path) == sha256

    def put_file(self, path: Path, key: str, sha256: str, callback: Callback) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
                for block in iter(lambda: src.read(_CHUNK), b""):
                    out.write(block)
                    callback(len(block))
                out.flush()
                os.fsync(out.fileno())
            # Readers see the old object or the whole new one, never a partial write.
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get_file(self, key: str, dest: Path, callback: Callback) -> None:
        src = self._path(key)
        if not src.is_file():
            raise FileNotFoundError(key)
        shutil.copyfile(src, dest)
        callback(dest.stat().st_size)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            # link(2) fails if the name exists: an atomic create-without-overwrite of a complete file.
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def read(self, key: str) -> bytes | None:
        path = self._path(key)
        return path.read_bytes() if path.is_file() else None


class S3Backend:
    """Any S3 endpoint (MinIO in production) through boto3's managed transfers."""

    def __init__(self, uri: str, endpoint_url: str | None = None, transfer: TransferConfig | None = None) -> None:
        self.root = uri.rstrip("/")
        self.bucket, self.prefix = s3.split_s3(self.root)
        self.client = s3.client(endpoint_url)
        self.transfer = transfer or DEFAULT_TRANSFER

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key), ChecksumMode="ENABLED")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def has_object(self, key: str, size: int, sha256: str) -> bool:
        head = self._head(key)
        if head is None or head["ContentLength"] != size or head.get("Metadata", {}).get("sha256") != sha256:
            return False
        # Metadata is only a claim. The server-computed checksum is the evidence: publish always
        # sends one, so an object without it was written by someone else and is sent again.
        stored = head.get("ChecksumSHA256")
        if not stored:
            return False
        if "-" in head.get("ETag", ""):
            # Multipart: the checksum covers the parts, each verified by the server on arrival.
            return True
        return base64.b64decode(stored).hex() == sha256

    def put_file(self, path: Path, key: str, sha256: str, callback: Callback) -> None:
        # ChecksumAlgorithm makes the server check every part as it arrives; the sha256 metadata
        # records the whole-file digest, which a multipart checksum is not.
        self.client.upload_file(
            str(path),
            self.bucket,
            self._key(key),
            ExtraArgs={"Metadata": {"sha256": sha256}, "ChecksumAlgorithm": "SHA256"},
            Config=self.transfer,
            Callback=callback,
        )

    def get_file(self, key: str, dest: Path, callback: Callback) -> None:
        try:
            self.client.download_file(self.bucket, self._key(key), str(dest), Config=self.transfer, Callback=callback)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(key) from None
            raise

    def create_exclusive(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*", ContentType="application/json"
            )
            return True
        except ClientError as exc:
            # 412: the key exists; 409: a concurrent conditional write is in flight and won.
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise

    def read(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise


def resolve_root(store_uri: str) -> str:
    """`local` means `<PADDLE_MLOPS_HOME>/store`; anything else is a directory or an s3:// URI."""
    if store_uri == "local":
        return str(runner.home_dir() / "store")
    return store_uri if s3.is_s3(store_uri) else str(Path(store_uri).resolve())


def open_backend(root: str, endpoint_url: str | None = None, transfer: TransferConfig | None = None) -> Backend:
    if s3.is_s3(root):
        return S3Backend(root, endpoint_url, transfer)
    return LocalBackend(root)


def split_model_uri(model_uri: str) -> tuple[str, str, str]:
    """`<root>/<model>/<version>` -> (root, model, version)."""
    parts = model_uri.rstrip("/").rsplit("/", 2)
    if len(parts) != 3 or not all(parts) or (s3.is_s3(model_uri) and parts[0] in ("s3:", "s3:/")):
        raise StepError(f"model URI {model_uri!r} is not of the form <store>/<model-name>/<version>")
    return parts[0], parts[1], parts[2]


def _with_retries(what: str, action: Callable[[], None], attempts: int = 3, base_delay: float = 0.5) -> None:
    """Retry one object's transfer: botocore retries requests, this retries the whole object."""
    for attempt in range(1, attempts + 1):
        try:
            action()
            return
        except (ClientError, OSError) as exc:
            if attempt == attempts:
                raise
            delay = base_delay * 2 ** (attempt - 1)
            log.warning("%s failed (%s); retry %d/%d in %.1fs", what, exc, attempt, attempts - 1, delay)
            time.sleep(delay)


@contextmanager
def _progress(enabled: bool, total: int, label: str) -> Iterator[Callback]:
    with Progress(
        TextColumn(label),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),  # stdout carries the step's result lines
        disable=not enabled,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.update(task, advance=n)


def _files(local_dir: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in local_dir.rglob("*") if p.is_file())
    if not files:
        raise StepError(f"{local_dir} holds no files to publish; check that the train step wrote the model there")
    return [
        {"path": p.relative_to(local_dir).as_posix(), "size": p.stat().st_size, "sha256": sha256_file(p)} for p in files
    ]


def _stable(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: manifest.get(k) for k in _IDENTITY}


def _settle_existing(existing: bytes, manifest: dict[str, Any], model_uri: str) -> str:
    """Same content already published -> its digest; different content -> AlreadyPublishedError."""
    try:
        theirs = json.loads(existing)
    except json.JSONDecodeError:
        raise IntegrityError(f"{model_uri}/{MANIFEST} exists but is not valid JSON; inspect it by hand") from None
    if _stable(theirs) != _stable(manifest):
        raise AlreadyPublishedError(
            f"version {manifest['version']} of {manifest['model']} is already published by another publisher "
            f"with different content ({model_uri}/{MANIFEST}); publish under a new version"
        )
    return sha256_bytes(existing)


def publish(
    local_dir: str | Path,
    store_uri: str,
    model_name: str,
    version: str,
    metadata: dict[str, Any] | None = None,
    endpoint_url: str | None = None,
    progress: bool = True,
    transfer_config: TransferConfig | None = None,
) -> PublishResult:
    """Upload the files of `local_dir` as `model_name`/`version`; idempotent for the same content."""
    local = Path(local_dir)
    if not local.is_dir():
        raise StepError(f"model directory {local} does not exist; run the train step first")
    for name, value in (("model name", model_name), ("version", version)):
        if not value or "/" in value or value in (".", ".."):
            raise StepError(f"{name} {value!r} is not usable as a path segment")
    root = resolve_root(store_uri)
    backend = open_backend(root, endpoint_url, transfer_config)
    model_uri = f"{root.rstrip('/')}/{model_name}/{version}"
    manifest_key = f"{model_name}/{version}/{MANIFEST}"
    files = _files(local)
    manifest: dict[str, Any] = {
        **(metadata or {}),
        "schema": SCHEMA,
        "model": model_name,
        "version": version,
        "files": files,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }

    existing = backend.read(manifest_key)
    if existing is not None:
        return PublishResult(model_uri, _settle_existing(existing, manifest, model_uri), 0, len(files))

    todo = [f for f in files if not backend.has_object(f"{OBJECTS}/{f['sha256']}", f["size"], f["sha256"])]
    skipped = len(files) - len(todo)
    bytes_sent = 0
    with _progress(progress, sum(f["size"] for f in todo), f"upload {model_name}/{version}") as advance:
        for f in todo:
            key = f"{OBJECTS}/{f['sha256']}"
            _with_retries(
                f"upload {f['path']}", partial(backend.put_file, local / f["path"], key, f["sha256"], advance)
            )
            if not backend.has_object(key, f["size"], f["sha256"]):
                raise IntegrityError(f"{f['path']} did not verify after upload to {root}/{key}; run again")
            bytes_sent += f["size"]

    body = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).encode("utf-8")
    if backend.create_exclusive(manifest_key, body):
        return PublishResult(model_uri, sha256_bytes(body), bytes_sent, skipped)
    existing = backend.read(manifest_key)
    if existing is None:
        raise AlreadyPublishedError(f"{model_uri}/{MANIFEST} is being written by another publisher; run again")
    return PublishResult(model_uri, _settle_existing(existing, manifest, model_uri), bytes_sent, skipped)


def read_manifest_bytes(model_uri: str, endpoint_url: str | None = None) -> bytes | None:
    root, model, version = split_model_uri(model_uri)
    return open_backend(root, endpoint_url).read(f"{model}/{version}/{MANIFEST}")


def read_manifest(model_uri: str, endpoint_url: str | None = None) -> dict[str, Any]:
    """The manifest of a published version; StepError if the version was never published."""
    data = read_manifest_bytes(model_uri, endpoint_url)
    if data is None:
        raise StepError(f"{model_uri} is not published (no {MANIFEST}); run the upload step first")
    try:
        manifest = json.loads(data)
    except json.JSONDecodeError:
        raise IntegrityError(f"{model_uri}/{MANIFEST} is not valid JSON") from None
    if manifest.get("schema") != SCHEMA:
        raise StepError(
            f"{model_uri}/{MANIFEST} has schema {manifest.get('schema')!r}; this code reads schema {SCHEMA}"
        )
    return manifest


def _check(path: Path, entry: dict[str, Any], model_uri: str) -> None:
    size = path.stat().st_size
    actual = sha256_file(path)
    if size != entry["size"] or actual != entry["sha256"]:
        raise IntegrityError(
            f"{entry['path']} of {model_uri} is corrupt: expected sha256 {entry['sha256']} ({entry['size']} bytes), "
            f"got {actual} ({size} bytes); republish the model"
        )


def fetch(model_uri: str, dest_dir: str | Path, endpoint_url: str | None = None, progress: bool = False) -> Path:
    """Download a published version into `dest_dir`, verifying every file; all or nothing."""
    manifest = read_manifest(model_uri, endpoint_url)
    root, _, _ = split_model_uri(model_uri)
    backend = open_backend(root, endpoint_url)
    dest = Path(dest_dir).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Staged beside the destination so the final rename stays on one filesystem.
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.fetch-"))
    try:
        with _progress(progress, sum(f["size"] for f in manifest["files"]), f"fetch {model_uri}") as advance:
            for entry in manifest["files"]:
                target = staging / entry["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                key = f"{OBJECTS}/{entry['sha256']}"
                try:
                    backend.get_file(key, target, advance)
                except FileNotFoundError:
                    raise IntegrityError(
                        f"{entry['path']} of {model_uri} is missing from the store (expected object {root}/{key}, "
                        f"sha256 {entry['sha256']}); republish the model"
                    ) from None
                _check(target, entry, model_uri)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex}")
            dest.rename(old)
        staging.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return dest
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
