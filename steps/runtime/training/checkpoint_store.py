"""A training run's checkpoints in its store: `<run>/checkpoints/<step>/` objects with a manifest written last.

One code path for every workspace: the object-store backends publishing uses (steps/runtime/storage/objectstore:
`LocalBackend` for a directory, `S3Backend` for `s3://`), so `make run` exercises what the cluster runs. A checkpoint
is complete exactly when `<step>/manifest.json` exists: the objects go up first, the manifest (every file's size
and sha256) is created last and only if absent, like a published model's. A loader never trusts a step without a
manifest, and checks every file it downloads against it, falling back to the previous complete checkpoint when one
does not verify. The newest `keep` complete checkpoints stay; older ones, and leftovers of an upload killed before
its manifest, are deleted only after a newer checkpoint is complete.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paddle_mlops_core.contracts import MANIFEST_NAME
from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import manifest as manifests
from steps.runtime.storage.objectstore.backends import Backend, open_backend
from steps.runtime.storage.objectstore.manifest import IntegrityError

log = logging.getLogger("steps.train")

KIND = "training-checkpoint"
SCHEMA = 1


def _no_progress(n: int) -> None:
    del n


class CheckpointStore:
    """The checkpoints under one URI (a directory or `s3://bucket/prefix`): write, list, fetch, rotate."""

    def __init__(self, uri: str, endpoint_url: str | None = None, keep: int = 2) -> None:
        self.uri = uri.rstrip("/")
        self.backend: Backend = open_backend(self.uri, endpoint_url)
        self.keep = keep

    def steps(self) -> list[int]:
        """Every step with objects in the store, complete or not, oldest first."""
        return sorted(int(name) for name in self.backend.children("") if name.isdigit())

    def manifest(self, step: int) -> dict[str, Any] | None:
        """The step's manifest, None when it has none (an upload killed mid-way) or one this code cannot read."""
        data = self.backend.read(f"{step}/{MANIFEST_NAME}")
        if data is None:
            return None
        try:
            found = json.loads(data)
        except json.JSONDecodeError:
            return None
        return found if found.get("kind") == KIND and found.get("schema") == SCHEMA else None

    def complete(self) -> list[int]:
        """The steps whose manifest exists, oldest first."""
        return [step for step in self.steps() if self.manifest(step) is not None]

    def write(self, step: int, local_dir: Path, metadata: dict[str, Any] | None = None) -> bool:
        """Upload the files of `local_dir` as checkpoint `step`, manifest last, then rotate. False when that step was
        complete already (another writer of the same run got there first: its checkpoint stands)."""
        if self.manifest(step) is not None:
            log.warning("checkpoint %s/%d was complete already; kept it", self.uri, step)
            return False
        files = manifests.file_entries(local_dir)
        for entry in files:
            self.backend.put_file(local_dir / entry["path"], f"{step}/{entry['path']}", entry["sha256"], _no_progress)
        body = {**(metadata or {}), "kind": KIND, "schema": SCHEMA, "step": step, "files": files,
                "created": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
        created = self.backend.create_exclusive(f"{step}/{MANIFEST_NAME}", manifests.encode(body))
        if not created:
            log.warning("checkpoint %s/%d was complete already; kept it", self.uri, step)
        self.rotate()
        return created

    def rotate(self) -> None:
        """Delete complete checkpoints older than the newest `keep`, and incomplete ones (killed uploads), but only
        while at least one complete checkpoint stays."""
        complete = self.complete()
        if not complete:
            return
        kept = set(complete[-self.keep :])
        for step in self.steps():
            if step not in kept:
                self.backend.delete_prefix(str(step))

    def fetch(self, step: int, dest: Path) -> dict[str, Any]:
        """Download checkpoint `step` into `dest`, every file checked against its manifest; the manifest."""
        found = self.manifest(step)
        if found is None:
            raise IntegrityError(f"checkpoint {self.uri}/{step} has no readable {MANIFEST_NAME}")
        for entry in found["files"]:
            target = dest / entry["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.backend.get_file(f"{step}/{entry['path']}", target, _no_progress)
            except FileNotFoundError:
                raise IntegrityError(f"{entry['path']} of checkpoint {self.uri}/{step} is missing") from None
            size, digest = target.stat().st_size, manifests.sha256_file(target)
            if (size, digest) != (entry["size"], entry["sha256"]):
                raise IntegrityError(
                    f"{entry['path']} of checkpoint {self.uri}/{step} differs from its manifest (sha256 {digest}, "
                    f"{size} bytes; expected {entry['sha256']}, {entry['size']} bytes)"
                )
        return found

    def fetch_latest(self, dest_root: Path) -> tuple[int, Path] | None:
        """The newest complete checkpoint that verifies, downloaded into a folder under `dest_root`; None when
        there is none. A checkpoint that does not verify is skipped (logged), the one before it tried."""
        for step in reversed(self.complete()):
            dest = Path(tempfile.mkdtemp(prefix=f"checkpoint-{step}-", dir=dest_root))
            try:
                self.fetch(step, dest)
                return step, dest
            except IntegrityError as exc:
                log.warning("checkpoint %d does not verify, trying the one before: %s", step, exc)
                shutil.rmtree(dest, ignore_errors=True)
        return None

    def delete_all(self) -> None:
        """Every checkpoint of the run (after it finished and its model is exported)."""
        for step in self.steps():
            self.backend.delete_prefix(str(step))


def staging_dir(root: Path | None = None) -> Iterator[Path]:
    """A temporary folder for one checkpoint's files, removed afterwards (a generator for contextlib)."""
    path = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check_layout(where: str, saved: dict[str, int] | None, now: dict[str, int]) -> None:
    """StepError when the checkpoint at `where` counted its data position in another batch layout than `now`
    (or recorded none, so its data position cannot be trusted)."""
    if saved is None:
        raise StepError(
            f"checkpoint {where} records no batch layout, so where it stopped in the data is unknown. Delete its "
            "run's checkpoints (or pass another run id) to start over."
        )
    changed = {key: (value, now[key]) for key, value in saved.items() if key in now and now[key] != value}
    if changed:
        what = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed.items())
        raise StepError(
            f"checkpoint {where} was written with a different batch layout ({what}): resuming would skip the wrong "
            "samples. Run with the checkpoint's settings, or delete its run's checkpoints (or pass another run id) "
            "to start over."
        )
