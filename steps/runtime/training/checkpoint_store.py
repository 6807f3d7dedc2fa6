"""A training run's checkpoints in its store: `<run>/checkpoints/<step>/` objects with a manifest written last.

One code path for every workspace: the object-store backends publishing uses (steps/runtime/storage/objectstore:
`LocalBackend` for a directory, `S3Backend` for `s3://`), so `make run` exercises what the cluster runs. A checkpoint
is complete exactly when `<step>/manifest.json` exists: the objects go up first, the manifest (every file's size
and sha256) is created last and only if absent, like a published model's. A loader never trusts a step without a
manifest, and checks every file it downloads against it, falling back to the previous complete checkpoint when one
does not verify; it reads the newest complete checkpoint whoever wrote it.

Two trainers of one run id (the same prefix) never destroy each other's work. Each writer (rank 0 of one training
process) has its own id; before a checkpoint's files it creates `<step>/writer.json` naming itself (the id is in the
manifest too), and while it lives it keeps `writer-<id>/heartbeat.json` fresh (CheckpointWriter refreshes it every
`HEARTBEAT_SECONDS`, and removes it when the step ends). Another writer is live while its record is at most
`WRITER_STALE_SECONDS` old, unless it ran in this pid namespace of this machine and its process is gone. A writer
prunes only what it answers for: its own checkpoints, and those of writers that are not live (a step without
`writer.json`, from older code, counts as one). Of these its own newest `keep` complete ones stay, and so do the
newest `keep` complete ones of all it answers for (so the store's newest `keep` stay, whoever wrote them); another
writer's go only when older than this writer's newest complete checkpoint; its own incomplete ones go too, so
leftovers of killed uploads are deleted only after a newer checkpoint is complete. A live writer's checkpoints,
complete or in flight, stay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from paddle_mlops_core.contracts import MANIFEST_NAME
from steps.runtime.runner import StepError
from steps.runtime.storage.objectstore import manifest as manifests
from steps.runtime.storage.objectstore.backends import Backend, open_backend
from steps.runtime.storage.objectstore.manifest import IntegrityError

log = logging.getLogger("steps.train")

KIND = "training-checkpoint"
SCHEMA = 1
MARKER = "writer.json"  # <step>/writer.json: the writer of the step, created before its files
# writer-<id>/heartbeat.json: a writer's liveness record, a folder of its own beside the steps (delete_prefix removes
# folders; one shared `writers/` folder would stay behind, empty, in a local store)
RECORD_PREFIX = "writer-"
HEARTBEAT = "heartbeat.json"
HEARTBEAT_SECONDS = 30
# A writer whose record is older than this counts as gone. Four heartbeats: three refreshes may fail or stall (a store
# outage, retries, a long call holding the GIL) and clocks of different nodes may disagree by tens of seconds before
# a live writer looks gone; and looking gone costs it at most checkpoints older than another writer's newest complete
# one, never the newest. The other way round, a writer killed on another machine holds its checkpoints this long.
WRITER_STALE_SECONDS = 4 * HEARTBEAT_SECONDS


def new_writer_id() -> str:
    """Unique per training process: host, pid and a random part (readable in the store, never reused)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _pid_space() -> str | None:
    """This kernel boot and pid namespace: where a pid means the same process (None where Linux does not say)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def _this_process() -> dict[str, Any]:
    """What tells, in the same pid namespace of the same machine, whether a writer's process still runs (`_gone`)."""
    return {"host": socket.gethostname(), "pid_space": _pid_space(), "pid": os.getpid(),
            "started": psutil.Process().create_time()}  # fmt: skip


def _gone(record: dict[str, Any]) -> bool:
    """True when the record's process ran in this pid namespace of this machine and is no longer running; False when
    that cannot be known here (another machine or container: only its record's age tells)."""
    here = _pid_space()
    if here is None or record.get("pid_space") != here:
        return False
    try:
        return abs(psutil.Process(int(record["pid"])).create_time() - float(record["started"])) > 0.01
    except (psutil.NoSuchProcess, KeyError, TypeError, ValueError):
        return True


def _no_progress(n: int) -> None:
    del n


class CheckpointStore:
    """The checkpoints under one URI (a directory or `s3://bucket/prefix`): write, list, fetch, rotate."""

    def __init__(self, uri: str, endpoint_url: str | None = None, keep: int = 2, writer_id: str | None = None) -> None:
        """`writer_id`: who this store writes as (default: a new one; only a writer needs it)."""
        self.uri = uri.rstrip("/")
        self.backend: Backend = open_backend(self.uri, endpoint_url)
        self.keep = keep
        self.writer_id = writer_id or new_writer_id()

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
        """Upload the files of `local_dir` as checkpoint `step` (marker first, manifest last), then rotate. False when
        that step was complete already or a live writer is writing it (another writer of the same run got there
        first: its checkpoint stands)."""
        if self.manifest(step) is not None:
            log.warning("checkpoint %s/%d was complete already; kept it", self.uri, step)
            return False
        self.beat()  # live before the marker names this writer
        if not self._claim(step):
            return False
        files = manifests.file_entries(local_dir)
        for entry in files:
            self.backend.put_file(local_dir / entry["path"], f"{step}/{entry['path']}", entry["sha256"], _no_progress)
        body = {**(metadata or {}), "kind": KIND, "schema": SCHEMA, "step": step, "files": files,
                "writer": self.writer_id, "created": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip
        created = self.backend.create_exclusive(f"{step}/{MANIFEST_NAME}", manifests.encode(body))
        if not created:
            log.warning("checkpoint %s/%d was complete already; kept it", self.uri, step)
        self.rotate()
        return created

    def _claim(self, step: int) -> bool:
        """Create `<step>/writer.json` naming this writer, before any file of the step. A step another writer claimed
        stays its own while that writer is live (or once it is complete); a gone writer's leftover is replaced."""
        marker = json.dumps({"writer": self.writer_id, "created": datetime.now(UTC).isoformat(timespec="seconds")})
        if self.backend.create_exclusive(f"{step}/{MARKER}", marker.encode()):
            return True
        owner = self.writer_of(step)
        if owner == self.writer_id:  # this writer's own earlier try at the step
            return True
        if self.manifest(step) is not None or self._liveness()(owner):
            log.warning("checkpoint %s/%d is another writer's (%s); kept it", self.uri, step, owner)
            return False
        log.warning("checkpoint %s/%d: replacing what gone writer %s left of it", self.uri, step, owner)
        self.backend.delete_prefix(str(step))
        return self.backend.create_exclusive(f"{step}/{MARKER}", marker.encode())

    def writer_of(self, step: int) -> str | None:
        """The writer that claimed `step`; None without a readable marker (older code, a leftover)."""
        data = self.backend.read(f"{step}/{MARKER}")
        try:
            writer = json.loads(data)["writer"] if data is not None else None
        except (json.JSONDecodeError, KeyError, TypeError):
            return None
        return writer if isinstance(writer, str) else None

    def beat(self, now: float | None = None) -> None:
        """Write this writer's liveness record, stamped `now` (default: the current time)."""
        record = {"writer": self.writer_id, "time": time.time() if now is None else now, **_this_process()}
        data = json.dumps(record).encode()
        with tempfile.TemporaryDirectory(prefix="checkpoint-writer-") as tmp:
            path = Path(tmp) / HEARTBEAT
            path.write_bytes(data)
            key = f"{RECORD_PREFIX}{self.writer_id}/{HEARTBEAT}"
            self.backend.put_file(path, key, hashlib.sha256(data).hexdigest(), _no_progress)

    def retire(self) -> None:
        """Remove this writer's liveness record: it writes no more."""
        self.backend.delete_prefix(f"{RECORD_PREFIX}{self.writer_id}")

    def writers(self) -> list[str]:
        """The writers with a liveness record in the store (live or not)."""
        return [name[len(RECORD_PREFIX) :] for name in self.backend.children("") if name.startswith(RECORD_PREFIX)]

    def _liveness(self) -> Callable[[str | None], bool]:
        """Whether a writer is live (module docstring), each one looked up once; this writer always is."""
        now, known = time.time(), {self.writer_id: True}

        def live(writer: str | None) -> bool:
            if writer is None:
                return False
            if writer not in known:
                data = self.backend.read(f"{RECORD_PREFIX}{writer}/{HEARTBEAT}")
                try:
                    record = json.loads(data) if data is not None else None
                    fresh = record is not None and now - float(record["time"]) <= WRITER_STALE_SECONDS
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    record, fresh = None, False
                known[writer] = fresh and not _gone(record or {})
            return known[writer]

        return live

    def rotate(self) -> None:
        """Prune what this writer answers for (its own checkpoints and those of writers that are not live): its
        newest `keep` complete ones stay, and so do the newest `keep` complete ones of all it answers for (the
        store's newest stay whoever wrote them); others go, another writer's only when older than this writer's
        newest complete checkpoint. Nothing goes before this writer has a complete checkpoint."""
        live, complete = self._liveness(), set(self.complete())
        writers = {step: self.writer_of(step) for step in self.steps()}
        own_complete = sorted(step for step, writer in writers.items() if writer == self.writer_id and step in complete)
        if not own_complete:
            return
        newest = own_complete[-1]
        answered = [step for step, writer in sorted(writers.items()) if writer == self.writer_id or not live(writer)]
        kept = {*own_complete[-self.keep :], *[step for step in answered if step in complete][-self.keep :]}
        for step in answered:
            if step not in kept and (writers[step] == self.writer_id or step < newest):
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
        """Every checkpoint of the run (after it finished and its model is exported) but a live writer's, and the
        records of writers that are not live."""
        live = self._liveness()
        for step in self.steps():
            writer = self.writer_of(step)
            if writer == self.writer_id or not live(writer):
                self.backend.delete_prefix(str(step))
            else:
                log.info("kept checkpoint %s/%d: its writer %s is live", self.uri, step, writer)
        for writer in self.writers():
            if writer != self.writer_id and not live(writer):
                self.backend.delete_prefix(f"{RECORD_PREFIX}{writer}")


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
