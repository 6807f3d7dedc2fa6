"""Publishing a model directory: objects first, each verified, then the manifest with a create-if-absent."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import manifest
from steps.runtime.storage.objectstore.backends import Backend, Callback, open_backend, resolve_root
from steps.runtime.storage.objectstore.manifest import MANIFEST, AlreadyPublishedError, IntegrityError, object_key
from steps.runtime.storage.objectstore.progress import transfer_progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishResult:
    model_uri: str
    manifest_digest: str
    bytes_sent: int
    skipped: int


def with_retries(what: str, action: Callable[[], None], attempts: int = 3, base_delay: float = 0.5) -> None:
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


def _settle_existing(existing: bytes, ours: dict[str, Any], model_uri: str) -> str:
    """Same content already published -> its digest; different content -> AlreadyPublishedError."""
    try:
        theirs = json.loads(existing)
    except json.JSONDecodeError:
        raise IntegrityError(f"{model_uri}/{MANIFEST} exists but is not valid JSON; inspect it by hand") from None
    if not manifest.same_content(ours, theirs):
        raise AlreadyPublishedError(
            f"version {ours['version']} of {ours['model']} is already published by another publisher "
            f"with different content ({model_uri}/{MANIFEST}); publish under a new version"
        )
    return manifest.sha256_bytes(existing)


def _checked_dir(local_dir: str | Path, model_name: str, version: str) -> Path:
    local = Path(local_dir)
    if not local.is_dir():
        raise StepError(f"model directory {local} does not exist; run the train step first")
    for name, value in (("model name", model_name), ("version", version)):
        if not value or "/" in value or value in (".", ".."):
            raise StepError(f"{name} {value!r} is not usable as a path segment")
    return local


def _upload_missing(backend: Backend, local: Path, todo: list[dict[str, Any]], advance: Callback) -> None:
    """Send each file of `todo` to its content-addressed object, and check the store has it."""
    for entry in todo:
        key = object_key(entry["sha256"])
        upload = partial(backend.put_file, local / entry["path"], key, entry["sha256"], advance)
        with_retries(f"upload {entry['path']}", upload)
        if not backend.has_object(key, entry["size"], entry["sha256"]):
            raise IntegrityError(f"{entry['path']} did not verify after upload to {backend.root}/{key}; run again")


def publish(
    local_dir: str | Path,
    store_uri: str,
    model_name: str,
    version: str,
    metadata: dict[str, Any] | None = None,
    endpoint_url: str | None = None,
    progress: bool = True,
    transfer_config: TransferConfig | None = None,
    content_suffix: bool = False,
    repair: bool = False,
    exact: bool = False,
    credentials: str | None = None,
) -> PublishResult:
    """Upload the files of `local_dir` as `model_name`/`version`; idempotent for the same content.

    With `content_suffix` the version is `<version>-<first 8 hex of the files' digest>`: the same files land on
    the same version (a retry is a no-op), different files (a re-evaluated export whose engine choice differs)
    on a new one, never on a conflict. With `repair` a version already published with the same files still gets
    any object that is missing or damaged in the store sent again (staged weights, `weights stage` rerun)."""
    local = _checked_dir(local_dir, model_name, version)
    files = manifest.file_entries(local)
    if content_suffix:
        version = f"{version}-{manifest.content_digest(files)[:8]}"
    root = resolve_root(store_uri)
    backend = open_backend(root, endpoint_url, transfer_config, exact, credentials)
    model_uri = f"{root.rstrip('/')}/{model_name}/{version}"
    key = manifest.manifest_key(model_name, version)
    ours = manifest.build(model_name, version, files, metadata)

    existing = backend.read(key)
    if existing is not None and not repair:
        return PublishResult(model_uri, _settle_existing(existing, ours, model_uri), 0, len(files))

    todo = [f for f in files if not backend.has_object(object_key(f["sha256"]), f["size"], f["sha256"])]
    bytes_sent = sum(f["size"] for f in todo)
    with transfer_progress(progress, bytes_sent, f"upload {model_name}/{version}") as advance:
        _upload_missing(backend, local, todo, advance)

    body = manifest.encode(ours)
    if backend.create_exclusive(key, body):
        return PublishResult(model_uri, manifest.sha256_bytes(body), bytes_sent, len(files) - len(todo))
    existing = backend.read(key)
    if existing is None:
        raise AlreadyPublishedError(f"{model_uri}/{MANIFEST} is being written by another publisher; run again")
    return PublishResult(model_uri, _settle_existing(existing, ours, model_uri), bytes_sent, len(files) - len(todo))
