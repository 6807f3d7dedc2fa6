"""Replicating a published version into another store: what a region that serves it reads from.

Published once (upload, `paddle-mlops publish`), a version is copied into the store of every region that serves it
before that region's predictors point at it. The copy keeps the publishing rules: each file body goes to its
content-addressed key and is verified there (an object already there with the same size and sha256 is not sent
again, so a rerun sends 0 bytes), and the manifest comes last, byte for byte the published one (same sha256), with a
create-if-absent: a store never holds a manifest whose objects are not all there. Across endpoints (a region's own
MinIO) nothing is copied server-side: each missing body is read from the source, checked, then uploaded.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import manifest
from steps.runtime.storage.objectstore.backends import Backend, open_backend
from steps.runtime.storage.objectstore.manifest import MANIFEST, AlreadyPublishedError, IntegrityError, object_key
from steps.runtime.storage.objectstore.publishing import with_retries


@dataclass(frozen=True)
class Replica:
    model_uri: str
    bytes_sent: int
    copied: int
    present: int


@dataclass(frozen=True)
class Place:
    """A store and how to reach it: `root` (s3://bucket/prefix or a directory), its endpoint, whether exactly, and
    the region whose own keys sign (None: the default credentials)."""

    root: str
    endpoint_url: str | None = None
    exact: bool = False
    credentials: str | None = None

    def open(self) -> Backend:
        return open_backend(self.root, self.endpoint_url, exact=self.exact, credentials=self.credentials)


def replicate(model_uri: str, source: Place, target: Place) -> Replica:
    """Copy the version published at `model_uri` (in `source`) into `target`; idempotent, 0 bytes when complete."""
    root, model, version = manifest.split_model_uri(model_uri)
    if target.root.rstrip("/") == root.rstrip("/") and target.endpoint_url == source.endpoint_url:
        return Replica(model_uri, 0, 0, 0)  # the publishing store itself: nothing to read or copy
    src = source.open()
    key = manifest.manifest_key(model, version)
    raw = src.read(key)
    if raw is None:
        raise StepError(f"{model_uri} is not published (no {MANIFEST}); nothing to replicate")
    files = manifest.parse(raw, model_uri)["files"]
    dst = target.open()
    dest_uri = f"{dst.root.rstrip('/')}/{model}/{version}"
    existing = dst.read(key)
    if existing is not None and existing != raw:
        raise AlreadyPublishedError(f"{dest_uri}/{MANIFEST} differs from {model_uri}/{MANIFEST}; inspect it by hand")
    missing = [f for f in files if not dst.has_object(object_key(f["sha256"]), f["size"], f["sha256"])]
    for entry in missing:
        _copy(src, dst, entry, model_uri)
    if existing is None and not dst.create_exclusive(key, raw) and dst.read(key) != raw:
        raise AlreadyPublishedError(f"{dest_uri}/{MANIFEST} was written by another publisher with other content")
    return Replica(dest_uri, sum(f["size"] for f in missing), len(missing), len(files) - len(missing))


def _copy(src: Backend, dst: Backend, entry: dict[str, Any], model_uri: str) -> None:
    """One body: read from the source, checked against the manifest, sent, checked in the target."""
    key = object_key(entry["sha256"])
    with tempfile.TemporaryDirectory(prefix="replicate-") as tmp:
        body = Path(tmp) / "body"
        try:
            src.get_file(key, body, lambda n: None)
        except FileNotFoundError:
            raise IntegrityError(
                f"{entry['path']} of {model_uri} is missing from its store ({src.root}/{key}); republish the model"
            ) from None
        manifest.verify_file(body, entry, model_uri)
        with_retries(f"replicate {entry['path']}", lambda: dst.put_file(body, key, entry["sha256"], lambda n: None))
    if not dst.has_object(key, entry["size"], entry["sha256"]):
        raise IntegrityError(f"{entry['path']} did not verify after the copy to {dst.root}/{key}; run again")
