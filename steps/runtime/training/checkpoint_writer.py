"""One background thread that serialises and uploads checkpoints while training goes on; at most one in flight.

When the next checkpoint falls due while the previous upload is still running, the trainer does not wait (the GPUs
would idle on a slow store) and does not queue a second snapshot (host memory for two copies of the state): it
defers, and takes the checkpoint at the first step boundary after the upload finished (`busy()` tells it). A final
checkpoint (SIGTERM) waits for the upload in flight and then for its own.

From its first checkpoint until `close()` a second thread keeps the writer's liveness record fresh, so that another
trainer of the same run leaves its checkpoints alone (checkpoint_store.py). The upload thread is a daemon: `close()`
is what makes a stopping step wait for it before the process exits.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path

from steps.runtime.training.checkpoint_store import HEARTBEAT_SECONDS, CheckpointStore
from steps.runtime.training.snapshot import Snapshot

log = logging.getLogger("steps.train")


class CheckpointWriter:
    """Writes `Snapshot`s to a `CheckpointStore` on its own thread."""

    def __init__(self, store: CheckpointStore, scratch: Path | None = None) -> None:
        self.store = store
        self.scratch = scratch
        self._thread: threading.Thread | None = None
        self.last_seconds: float | None = None  # how long the last upload took (serialise, hash, upload, rotate)
        self.last_step: int | None = None  # the newest checkpoint this writer completed
        self.failures = 0
        self._stop_beating = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, snapshot: Snapshot) -> None:
        """Start writing `snapshot` in the background; the caller made sure no upload is in flight."""
        if self.busy():
            raise RuntimeError("a checkpoint upload is still in flight; check busy() first")
        self._start_heartbeat()
        self._thread = threading.Thread(target=self._write, args=(snapshot,), name="checkpoint-writer", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the upload in flight (if any) has finished."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def write_now(self, snapshot: Snapshot) -> None:
        """Write `snapshot` and return once it is complete in the store (or failed, logged)."""
        self.wait()
        self._start_heartbeat()
        self._write(snapshot)

    def close(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the upload in flight, then stop the heartbeat and remove the liveness
        record (the writer writes no more)."""
        if self._thread is not None:
            self._thread.join(max(timeout, 0.0))
            if self._thread.is_alive():
                log.warning("checkpoint upload to %s still in flight after %.0f s; exiting without it", self.store.uri,
                            timeout)  # fmt: skip
            self._thread = None
        if self._heartbeat is not None:
            self._stop_beating.set()
            self._heartbeat.join()
            self._heartbeat = None
            try:
                self.store.retire()
            except Exception:  # noqa: BLE001 - a record left behind only goes stale
                log.warning("could not remove the writer record in %s", self.store.uri, exc_info=True)

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None:
            self._stop_beating.clear()
            self._heartbeat = threading.Thread(target=self._beat, name="checkpoint-heartbeat", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        """Every HEARTBEAT_SECONDS until `close()` (each checkpoint's `store.write` beats as well, first)."""
        while not self._stop_beating.wait(HEARTBEAT_SECONDS):
            try:
                self.store.beat()
            except Exception:  # noqa: BLE001 - a missed beat is tolerated (WRITER_STALE_SECONDS); the next one tries
                log.warning("could not refresh the writer record in %s", self.store.uri, exc_info=True)

    def _write(self, snapshot: Snapshot) -> None:
        started = time.monotonic()
        folder = Path(tempfile.mkdtemp(prefix=f"checkpoint-{snapshot.step}-", dir=self.scratch))
        try:
            snapshot.write(folder)
            self.store.write(snapshot.step, folder, {"run_id": snapshot.meta.get("run_id")})
        except Exception:  # noqa: BLE001 - a failed upload must not stop training; the next checkpoint tries again
            self.failures += 1
            log.exception("checkpoint %d could not be written to %s", snapshot.step, self.store.uri)
            return
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.last_seconds = time.monotonic() - started
        self.last_step = snapshot.step
        log.info("checkpoint %d complete in %s (%.1f s)", snapshot.step, self.store.uri, self.last_seconds)
