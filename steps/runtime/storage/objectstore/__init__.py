"""Publish model directories to an object store, and fetch them back with integrity checks.

Layout under the store root (a local directory or an `s3://bucket/prefix`):

    objects/sha256/<hex>                     content-addressed file bodies
    <model-name>/<version>/manifest.json     {"schema": 1, "model", "version", "files": [...], ...}

A model version is published exactly when its manifest exists. Objects go up first and are
verified; the manifest is written last with a create-if-absent, so a crash or a lost race never
leaves a manifest that points at missing or wrong bytes.

- `manifest`: the manifest format, its keys in the store, sha256 digests and the integrity errors
- `backends`: `LocalBackend` and `S3Backend`, the store operations publishing needs
- `publishing`: `publish`, idempotent for the same content
- `fetching`: `read_manifest` and `fetch`, every file checked against the manifest
- `replication`: `replicate`, a published version copied into another store (a serving region's), manifest last
- `progress`: the transfer progress bar on stderr
"""

from __future__ import annotations

from steps.runtime.storage.objectstore.backends import DEFAULT_TRANSFER, LocalBackend, S3Backend
from steps.runtime.storage.objectstore.fetching import fetch, read_manifest, read_manifest_bytes, read_manifest_tagged
from steps.runtime.storage.objectstore.manifest import AlreadyPublishedError, IntegrityError, sha256_bytes, sha256_file
from steps.runtime.storage.objectstore.publishing import PublishResult, publish

__all__ = [
    "DEFAULT_TRANSFER",
    "AlreadyPublishedError",
    "IntegrityError",
    "LocalBackend",
    "PublishResult",
    "S3Backend",
    "fetch",
    "publish",
    "read_manifest",
    "read_manifest_bytes",
    "read_manifest_tagged",
    "sha256_bytes",
    "sha256_file",
]
