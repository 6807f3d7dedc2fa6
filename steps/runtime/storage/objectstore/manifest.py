"""The manifest of a published model version: its format, its keys in the store, and the integrity checks.

A manifest lists every file of the version by path, size and sha256; the bodies live once each under
`objects/sha256/<hex>`, so a byte that differs from the manifest is corruption, never a newer version.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paddle_mlops_core.contracts import MANIFEST_NAME
from steps.runtime.runner import StepError
from steps.runtime.storage import s3

SCHEMA = 1
MANIFEST = MANIFEST_NAME
OBJECTS = "objects/sha256"
# What makes two publishes of one version the same model: the files, byte for byte. Metadata
# (creation time, evaluation latencies of a rerun) may differ; the first manifest stays.
_IDENTITY = ("schema", "model", "version", "files")
CHUNK = 1024 * 1024


class IntegrityError(StepError):
    """Stored bytes do not match what the manifest promises (corrupt, truncated or missing object)."""


class AlreadyPublishedError(StepError):
    """The version already exists with different content (another publisher won)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def object_key(sha256: str) -> str:
    """The store key of a file body, named by its content."""
    return f"{OBJECTS}/{sha256}"


def manifest_key(model: str, version: str) -> str:
    return f"{model}/{version}/{MANIFEST}"


def split_model_uri(model_uri: str) -> tuple[str, str, str]:
    """`<root>/<model>/<version>` -> (root, model, version)."""
    parts = model_uri.rstrip("/").rsplit("/", 2)
    if len(parts) != 3 or not all(parts) or (s3.is_s3(model_uri) and parts[0] in ("s3:", "s3:/")):
        raise StepError(f"model URI {model_uri!r} is not of the form <store>/<model-name>/<version>")
    return parts[0], parts[1], parts[2]


def file_entries(local_dir: Path) -> list[dict[str, Any]]:
    """The manifest's `files`: path, size and sha256 of every file under `local_dir`, sorted by path."""
    files = sorted(p for p in local_dir.rglob("*") if p.is_file())
    if not files:
        raise StepError(f"{local_dir} holds no files to publish; check that the train step wrote the model there")
    return [
        {"path": p.relative_to(local_dir).as_posix(), "size": p.stat().st_size, "sha256": sha256_file(p)} for p in files
    ]


def content_digest(files: list[dict[str, Any]]) -> str:
    """sha256 over the `files` entries (path, size, sha256): equal exactly when two manifests' files are."""
    lines = "".join(f"{f['path']}\t{f['size']}\t{f['sha256']}\n" for f in files)
    return sha256_bytes(lines.encode("utf-8"))


def build(model: str, version: str, files: list[dict[str, Any]], metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A new manifest: `metadata` plus the fields this format owns (which `metadata` cannot override)."""
    return {
        **(metadata or {}),
        "schema": SCHEMA,
        "model": model,
        "version": version,
        "files": files,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def encode(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False).encode("utf-8")


def same_content(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether two manifests publish the same files under the same name and version."""
    return {k: ours.get(k) for k in _IDENTITY} == {k: theirs.get(k) for k in _IDENTITY}


def parse(data: bytes, model_uri: str) -> dict[str, Any]:
    """A stored manifest's JSON, checked for this code's schema."""
    try:
        manifest = json.loads(data)
    except json.JSONDecodeError:
        raise IntegrityError(f"{model_uri}/{MANIFEST} is not valid JSON") from None
    if manifest.get("schema") != SCHEMA:
        raise StepError(
            f"{model_uri}/{MANIFEST} has schema {manifest.get('schema')!r}; this code reads schema {SCHEMA}"
        )
    return manifest


def verify_file(path: Path, entry: dict[str, Any], model_uri: str) -> None:
    """IntegrityError unless `path` has the size and sha256 its manifest entry promises."""
    size = path.stat().st_size
    actual = sha256_file(path)
    if size != entry["size"] or actual != entry["sha256"]:
        raise IntegrityError(
            f"{entry['path']} of {model_uri} is corrupt: expected sha256 {entry['sha256']} ({entry['size']} bytes), "
            f"got {actual} ({size} bytes); republish the model"
        )
