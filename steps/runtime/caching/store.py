"""The step cache: a step's outputs kept under its content key (steps/runtime/caching/keys.py), reused by any later run
whose key is the same, on either executor.

Layout under the cache root (a local directory or an s3:// prefix: the workflow parameter `step-cache`):

    objects/sha256/<hex>              file bodies, content-addressed and shared by every entry
    <step>/<key>/manifest.json        the entry: its files (workspace paths), the step's output parameters, the run
                                      that computed them, and the parts of its key

An entry is written the way models are published (steps/runtime/storage/objectstore): objects first, the manifest last
with a create-if-absent, so an entry is whole or absent; the first run to record a key keeps it. A restore checks every
file's size and sha256 against the manifest before anything reaches the workspace: a damaged or missing object makes the
step compute again, never serve it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.runtime.caching.keys import Key
from steps.runtime.runner import StepError
from steps.runtime.storage import s3, workspace
from steps.runtime.storage.objectstore import AlreadyPublishedError, IntegrityError, fetch, publish, read_manifest_bytes
from steps.runtime.storage.objectstore.backends import Backend, open_backend
from steps.runtime.storage.objectstore.manifest import parse

log = logging.getLogger("steps.cache")


@dataclass(frozen=True)
class Entry:
    """A cached result: where it is and what its manifest says."""

    uri: str  # <root>/<step>/<key>
    manifest: Mapping[str, Any]

    @property
    def outputs(self) -> dict[str, str]:
        return dict(self.manifest.get("outputs") or {})

    @property
    def run(self) -> str:
        return str(self.manifest.get("run") or "?")

    @property
    def paths(self) -> list[str]:
        return list(self.manifest.get("paths") or [])


class StepCache:
    """The entries of one cache root (`open_backend`: a local directory or S3)."""

    def __init__(self, root: str, endpoint_url: str | None = None) -> None:
        self.root = root.rstrip("/") if s3.is_s3(root) else str(Path(root).resolve())
        self.endpoint_url = endpoint_url

    def entry_uri(self, key: Key) -> str:
        return f"{self.root}/{key.step}/{key.digest}"

    def lookup(self, key: Key) -> Entry | None:
        """The entry recorded under `key`, or None (none recorded, or a manifest this code cannot read)."""
        return self._entry_at(self.entry_uri(key))

    def restore(self, entry: Entry, targets: Mapping[str, str]) -> None:
        """Put each named part of the entry where `targets` says (a directory or an s3:// prefix), every file checked
        first; IntegrityError when any is missing or damaged, and then nothing has been written."""
        missing = sorted(set(targets) - set(entry.paths))
        if missing:
            raise IntegrityError(f"{entry.uri} holds no {', '.join(missing)}")
        local = [Path(t) for t in targets.values() if not s3.is_s3(t)]
        scratch = local[0].parent if local else None  # beside a local target: the files then move by rename
        if scratch is not None:
            scratch.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".cache-restore-", dir=scratch))
        try:
            fetched = fetch(entry.uri, staging / "files", self.endpoint_url, published=dict(entry.manifest))
            for name, target in targets.items():
                if s3.is_s3(target):
                    workspace.stage_out(fetched / name, target, self.endpoint_url)
                else:
                    _replace(fetched / name, Path(target))
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def record(self, key: Key, sources: Mapping[str, Path], outputs: Mapping[str, str], run: str) -> Entry | None:
        """Keep the directories `sources` (name -> local directory) and `outputs` under `key`; the entry now stored
        under it (the first recorder's when another run recorded the key first), or None when it could not be kept."""
        staging = Path(tempfile.mkdtemp(prefix=".cache-record-"))
        try:
            for name, source in sources.items():
                _link_tree(source, staging / name)
            metadata = {"step": key.step, "key_parts": dict(key.parts), "outputs": dict(outputs), "run": run,
                        "paths": sorted(sources)}  # fmt: skip
            # repair: an entry whose objects were found damaged gets them sent again (same files, same manifest)
            publish(staging, self.root, key.step, key.digest, metadata, self.endpoint_url, progress=False, repair=True)
        except AlreadyPublishedError:
            log.info("%s was recorded by another run first; keeping that entry", self.entry_uri(key))
        except (OSError, IntegrityError) as exc:
            log.warning("could not record %s in the step cache (%s); the next run computes it again", key.step, exc)
            return None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return self.lookup(key)

    def latest(self, step: str) -> Entry | None:
        """The newest entry recorded for `step` (to say which part of a new key changed), or None."""
        entries = [self._entry_at(f"{self.root}/{step}/{name}") for name in self._backend().children(step)]
        found = [e for e in entries if e is not None]
        return max(found, key=lambda e: str(e.manifest.get("created")), default=None)

    def _backend(self) -> Backend:
        return open_backend(self.root, self.endpoint_url)

    def _entry_at(self, uri: str) -> Entry | None:
        data = read_manifest_bytes(uri, self.endpoint_url)
        if data is None:
            return None
        try:
            return Entry(uri, parse(data, uri))
        except StepError as exc:
            log.warning("ignoring the cache entry %s: %s", uri, exc)
            return None


def _replace(source: Path, dest: Path) -> None:
    """Move `source` (a file or directory) to `dest`, replacing what was there."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    os.replace(source, dest)


def _link_tree(source: Path, dest: Path) -> None:
    """`dest` mirrors `source` (a file or directory) by hard links, copies where links are impossible."""
    if source.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, dest)
        except OSError:
            shutil.copy2(source, dest)
        return
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is not there to cache")
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        _link_tree(file, dest / file.relative_to(source))
