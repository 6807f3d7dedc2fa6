"""MLflow's view of a published version: an artifact repository over its manifest and content-addressed objects.

A registry version's source is `published-s3://<bucket>/<prefix>/<model>/<version>` (or
`published-file:///<store>/<model>/<version>` for a local store). MLflow picks this repository for those schemes
through the `mlflow.artifact_repository` entry points in pyproject.toml, so `mlflow.pyfunc.load_model("models:/...")`,
`mlflow models serve` and the tracking server's model-version page read the one published copy: the listing is the
manifest's files (directories implied by their paths), each download the object named by the file's sha256, checked
against the manifest. Published versions are immutable: every write is refused.

The S3 endpoint is the one the objectstore uses (`S3_ENDPOINT_URL` / `AWS_ENDPOINT_URL`, storage/s3.py), else
`MLFLOW_S3_ENDPOINT_URL` as MLflow users and the tracking server's Deployment set it; credentials come from boto3's
default chain, as for MLflow's own S3 repository.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote, urlparse

with warnings.catch_warnings():
    # Importing mlflow loads its artifact-repository entry points, this module among them; imported before mlflow,
    # this module is then only half-initialised and MLflow warns that it could not register it. `_register` below
    # completes the registration, so that warning is not news.
    warnings.filterwarnings(
        "ignore", message='Failure attempting to register artifact repository for scheme "published-'
    )
    from mlflow.entities.file_info import FileInfo
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import DATA_LOSS, INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST
    from mlflow.store.artifact import artifact_repository_registry
    from mlflow.store.artifact.artifact_repo import ArtifactRepository

from steps.runtime.runner import StepError
from steps.runtime.storage import s3
from steps.runtime.storage.objectstore import manifest
from steps.runtime.storage.objectstore.backends import Backend, open_backend
from steps.runtime.storage.objectstore.fetching import fetch_file
from steps.runtime.storage.objectstore.manifest import MANIFEST, IntegrityError, split_model_uri

SCHEME_PREFIX = "published-"
SCHEMES = (f"{SCHEME_PREFIX}s3", f"{SCHEME_PREFIX}file")  # pyproject.toml's mlflow.artifact_repository entry points
MLFLOW_ENDPOINT_ENV = "MLFLOW_S3_ENDPOINT_URL"
_PUBLISH_HINT = "publish a new version with `paddle-mlops publish` or the pipeline's upload step"


def source_uri(model_uri: str) -> str:
    """The MLflow source URI of a published model URI (`<store>/<model>/<version>`, the upload step's model-uri)."""
    split_model_uri(model_uri)  # a StepError naming the expected form for anything else
    if s3.is_s3(model_uri):
        return SCHEME_PREFIX + model_uri.rstrip("/")
    return SCHEME_PREFIX + Path(model_uri).resolve().as_uri()


def model_uri(published_uri: str) -> str:
    """The store URI behind a `published-s3://` or `published-file://` URI (the inverse of `source_uri`)."""
    if not published_uri.startswith(SCHEME_PREFIX):
        raise MlflowException(
            f"{published_uri!r} is not a published model URI (published-s3://... or published-file:///...)",
            INVALID_PARAMETER_VALUE,
        )
    inner = published_uri[len(SCHEME_PREFIX) :].rstrip("/")
    parsed = urlparse(inner)
    if parsed.scheme == "s3" and parsed.netloc:
        return inner
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost") and parsed.path.startswith("/"):
        return unquote(parsed.path)
    raise MlflowException(
        f"{published_uri!r} names no store: use published-s3://<bucket>/<prefix>/<model>/<version> or "
        "published-file:///<absolute store path>/<model>/<version>",
        INVALID_PARAMETER_VALUE,
    )


def _join(base: str, path: str | None) -> str:
    rel = (path or "").strip("/")
    return f"{base}/{rel}" if rel else base


class PublishedArtifactRepository(ArtifactRepository):
    """Read-only artifact repository of published model versions (see the module docstring)."""

    def __init__(self, artifact_uri: str, tracking_uri: str | None = None, registry_uri: str | None = None) -> None:
        super().__init__(artifact_uri, tracking_uri, registry_uri)
        self._location = model_uri(artifact_uri)
        self._endpoint = os.environ.get(MLFLOW_ENDPOINT_ENV) or None
        self._lock = threading.Lock()
        self._backends: dict[str, Backend] = {}
        self._manifests: dict[str, dict[str, Any] | None] = {}

    # -- reading ---------------------------------------------------------------------------------------------------

    def _backend(self, root: str) -> Backend:
        with self._lock:
            if root not in self._backends:
                self._backends[root] = open_backend(root, self._endpoint)
            return self._backends[root]

    def _manifest(self, version_uri: str) -> dict[str, Any] | None:
        """The manifest of the version at `version_uri`, None when nothing is published there (cached)."""
        with self._lock:
            if version_uri in self._manifests:
                return self._manifests[version_uri]
        try:
            root, model, version = split_model_uri(version_uri)
        except StepError:  # not of the form <store>/<model>/<version>: nothing can be published there
            found = None
        else:
            data = self._backend(root).read(manifest.manifest_key(model, version))
            found = None if data is None else manifest.parse(data, version_uri)
        with self._lock:
            self._manifests[version_uri] = found
        return found

    def _candidates(self, full: str) -> list[str]:
        """Where the version holding `full` may be: this repository's own URI first (the usual case: MLflow roots it
        at the version), then every ancestor of `full`, deepest first (`mlflow.artifacts.download_artifacts` roots
        the repository at the parent of the URI it is given)."""
        ancestors, current = [], full
        while "/" in current.rstrip("/"):
            ancestors.append(current)
            current = current.rsplit("/", 1)[0]
        own = [self._location] if full == self._location or full.startswith(self._location + "/") else []
        return own + [a for a in ancestors if a != self._location]

    def _locate(self, path: str | None) -> tuple[str, dict[str, Any], str]:
        """(version URI, its manifest, `path` relative to the version) for a path relative to this repository."""
        full = _join(self._location, path)
        for candidate in self._candidates(full):
            found = self._manifest(candidate)
            if found is not None:
                return candidate, found, full[len(candidate) :].strip("/")
        raise MlflowException(
            f"{_join(self.artifact_uri, path)} is in no published model version: no {MANIFEST} at "
            f"{self._location} or above it. Check the registry version's source, or {_PUBLISH_HINT}",
            RESOURCE_DOES_NOT_EXIST,
        )

    def list_artifacts(self, path: str | None = None) -> list[FileInfo]:
        """The files and directories directly under `path`, from the manifest; [] for a file or an unknown path."""
        _, found, inner = self._locate(path)
        prefix = f"{inner}/" if inner else ""
        base = (path or "").strip("/")
        entries: dict[str, FileInfo] = {}
        for entry in found["files"]:
            if not entry["path"].startswith(prefix):
                continue
            head, sep, _ = entry["path"][len(prefix) :].partition("/")
            rel = f"{base}/{head}" if base else head
            entries[head] = FileInfo(rel, True, None) if sep else FileInfo(rel, False, int(entry["size"]))
        return [entries[name] for name in sorted(entries)]

    def _download_file(self, remote_file_path: str, local_path: str) -> None:
        version_uri, found, inner = self._locate(remote_file_path)
        entry = next((e for e in found["files"] if e["path"] == inner), None)
        if entry is None:
            raise MlflowException(
                f"{version_uri} has no file {inner!r}: its {MANIFEST} lists "
                f"{', '.join(e['path'] for e in found['files'])}",
                RESOURCE_DOES_NOT_EXIST,
            )
        root, _, _ = split_model_uri(version_uri)
        try:
            fetch_file(self._backend(root), entry, Path(local_path), version_uri, lambda _n: None)
        except IntegrityError as exc:
            raise MlflowException(str(exc), DATA_LOSS) from None

    # -- writing: refused ------------------------------------------------------------------------------------------

    def _refuse(self, what: str) -> NoReturn:
        raise MlflowException(
            f"cannot {what} {self.artifact_uri}: a published model version is immutable (its files are "
            f"content-addressed and its {MANIFEST} written once); {_PUBLISH_HINT}",
            INVALID_PARAMETER_VALUE,
        )

    def log_artifact(self, local_file: str, artifact_path: str | None = None) -> None:
        self._refuse(f"log {local_file} to")

    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        self._refuse(f"log {local_dir} to")

    def delete_artifacts(self, artifact_path: str | None = None) -> None:
        self._refuse("delete artifacts of")


def _register() -> None:
    """Register the schemes MLflow's entry-point loading missed (this module imported before mlflow, see above)."""
    registry = artifact_repository_registry._artifact_repository_registry  # exists before the entry points load
    known = registry.get_registered_artifact_repositories()
    for scheme in SCHEMES:
        if scheme not in known:
            registry.register(scheme, PublishedArtifactRepository)


_register()
