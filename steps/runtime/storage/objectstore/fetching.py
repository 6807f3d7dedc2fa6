"""Reading a published version back: its manifest, and its files fetched and checked against it."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import manifest
from steps.runtime.storage.objectstore.backends import Backend, Callback, open_backend
from steps.runtime.storage.objectstore.manifest import MANIFEST, IntegrityError, object_key, split_model_uri
from steps.runtime.storage.objectstore.progress import transfer_progress


def read_manifest_bytes(model_uri: str, endpoint_url: str | None = None) -> bytes | None:
    root, model, version = split_model_uri(model_uri)
    return open_backend(root, endpoint_url).read(manifest.manifest_key(model, version))


def read_manifest_tagged(model_uri: str, endpoint_url: str | None = None) -> tuple[bytes, str] | None:
    """The manifest's bytes and the store's entity tag for them (one read), None when not published."""
    root, model, version = split_model_uri(model_uri)
    return open_backend(root, endpoint_url).read_tagged(manifest.manifest_key(model, version))


def read_manifest(model_uri: str, endpoint_url: str | None = None) -> dict[str, Any]:
    """The manifest of a published version; StepError if the version was never published."""
    data = read_manifest_bytes(model_uri, endpoint_url)
    if data is None:
        raise StepError(f"{model_uri} is not published (no {MANIFEST}); run the upload step first")
    return manifest.parse(data, model_uri)


def _download_all(
    backend: Backend, files: list[dict[str, Any]], staging: Path, model_uri: str, advance: Callback
) -> None:
    """Every file of the manifest into `staging`, each checked against its entry."""
    for entry in files:
        target = staging / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        fetch_file(backend, entry, target, model_uri, advance)


def fetch_file(backend: Backend, entry: dict[str, Any], target: Path, model_uri: str, advance: Callback) -> None:
    """One manifest entry's content-addressed object into `target`, checked against the entry; IntegrityError when
    the object is missing or its bytes differ (`target` is then removed)."""
    key = object_key(entry["sha256"])
    try:
        backend.get_file(key, target, advance)
    except FileNotFoundError:
        raise IntegrityError(
            f"{entry['path']} of {model_uri} is missing from the store (expected object {backend.root}/{key}, "
            f"sha256 {entry['sha256']}); republish the model"
        ) from None
    try:
        manifest.verify_file(target, entry, model_uri)
    except IntegrityError:
        target.unlink(missing_ok=True)
        raise


def _replace_dir(staging: Path, dest: Path) -> None:
    """Move `staging` to `dest`, replacing what was there."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex}")
        dest.rename(old)
    staging.rename(dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def fetch(
    model_uri: str,
    dest_dir: str | Path,
    endpoint_url: str | None = None,
    progress: bool = False,
    published: dict[str, Any] | None = None,
    exact: bool = False,
    credentials: str | None = None,
) -> Path:
    """Download a published version into `dest_dir`, verifying every file; all or nothing.

    `published`: the version's manifest when the caller has read and checked it already, so the files
    fetched are exactly the ones it lists (not a second read's). `exact`: through `endpoint_url` whatever
    S3_ENDPOINT_URL says (a region's own store), `credentials`: with that region's own keys."""
    files = (published if published is not None else read_manifest(model_uri, endpoint_url))["files"]
    root, _, _ = split_model_uri(model_uri)
    backend = open_backend(root, endpoint_url, exact=exact, credentials=credentials)
    dest = Path(dest_dir).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Staged beside the destination so the final rename stays on one filesystem.
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.fetch-"))
    try:
        with transfer_progress(progress, sum(f["size"] for f in files), f"fetch {model_uri}") as advance:
            _download_all(backend, files, staging, model_uri, advance)
        _replace_dir(staging, dest)
        return dest
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
