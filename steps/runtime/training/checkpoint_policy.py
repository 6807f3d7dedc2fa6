"""When the trainer checkpoints and how it resumes: the policy between the training loop and the checkpoint store.

Rank 0 alone writes (data parallel: every rank holds the same state), every rank reads. Triggers
(`training.checkpoint`): every `every_steps` optimizer steps, every `every_seconds` of training, at the end of every
epoch (`epoch_end`); a trigger that falls due while the previous upload is in flight is deferred to the first step
boundary after it (checkpoint_writer.py says why). Whenever any trigger is on, the end of training is checkpointed
too, after the last epoch's scoring: it uploads while the model is exported, and a step stopped during the export
resumes at the very end and only exports again. A stop (SIGTERM) waits for its checkpoint's upload, and the step
(steps/train.py) for the upload in flight before the process exits (`close`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.training import snapshot as train_snapshot
from steps.runtime.training.checkpoint_store import CheckpointStore
from steps.runtime.training.checkpoint_writer import CheckpointWriter
from steps.runtime.training.snapshot import Snapshot

log = logging.getLogger("steps.train")

Capture = Callable[[], Snapshot]


class Checkpointer:
    def __init__(self, cfg: PipelineConfig, uri: str, rank: int, scratch: Path | None = None) -> None:
        self.policy = cfg.training.checkpoint
        self.store = CheckpointStore(uri, cfg.storage.endpoint_url, self.policy.keep)
        self.rank = rank
        self.writer = CheckpointWriter(self.store, scratch) if rank == 0 else None
        self.scratch = scratch
        self.since_step, self.since_time = 0, time.monotonic()
        self.deferred = False
        self.submitted: int | None = None  # the step of the newest checkpoint handed to the writer

    @property
    def uri(self) -> str:
        return self.store.uri

    def fetch(self) -> Snapshot | None:
        """The newest complete checkpoint of the run, downloaded and verified (None: start from scratch)."""
        root = Path(tempfile.mkdtemp(prefix="resume-", dir=self.scratch))
        try:
            found = self.store.fetch_latest(root)
            if found is None:
                return None
            step, folder = found
            return train_snapshot.load(step, folder)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def restart_clock(self, step: int) -> None:
        """Count the triggers from `step` (a resumed run from its checkpoint, a fresh one from 0)."""
        self.since_step, self.since_time = step, time.monotonic()

    def resumed(self, step: int) -> None:
        """The run resumed from the checkpoint of `step`: count from it, and never write that step again."""
        self.restart_clock(step)
        self.submitted = step

    def _due(self, step: int) -> bool:
        policy = self.policy
        by_steps = bool(policy.every_steps) and step - self.since_step >= policy.every_steps
        by_time = bool(policy.every_seconds) and time.monotonic() - self.since_time >= policy.every_seconds
        return by_steps or by_time

    def after_step(self, step: int, capture: Capture) -> None:
        """Rank 0 at a step boundary: checkpoint when a trigger is due and no upload is in flight."""
        if self.writer is None or not (self.deferred or self._due(step)):
            return
        if self.writer.busy():
            if not self.deferred:
                log.warning("checkpoint due at step %d while the previous upload is in flight; taking it at the first "
                            "step after that upload", step)  # fmt: skip
            self.deferred = True
            return
        self._submit(step, capture)

    def at_epoch_end(self, step: int, last: bool, capture: Capture) -> None:
        """Rank 0 after an epoch's dev evaluation: one checkpoint per epoch (`epoch_end`); after the last epoch one
        whenever checkpoints are on at all, left uploading (the end of training's)."""
        wanted = self.policy.enabled if last else self.policy.epoch_end
        if self.writer is None or not wanted or self.submitted == step:
            return
        self.writer.wait()
        self._submit(step, capture)

    def _submit(self, step: int, capture: Capture) -> None:
        assert self.writer is not None
        self.writer.submit(capture())
        self.submitted, self.deferred = step, False
        self.restart_clock(step)

    def final(self, step: int, capture: Capture) -> None:
        """Rank 0 before stopping: a checkpoint of this step, complete in the store when this returns."""
        if self.writer is not None and self.submitted != step:
            self.writer.write_now(capture())
        elif self.writer is not None:
            self.writer.wait()  # this very step's checkpoint is in flight: let it finish

    def wait(self) -> None:
        if self.writer is not None:
            self.writer.wait()

    def discard(self) -> None:
        """Rank 0, once the run's model is exported and staged out: its checkpoints are no longer needed (another
        live writer's stay: CheckpointStore.delete_all)."""
        if self.writer is not None:
            self.writer.wait()
            self.store.delete_all()

    def close(self, timeout: float) -> None:
        """Rank 0, however the step ends: wait up to `timeout` seconds for the upload in flight (the checkpoint a
        stop or the end of training protects its work with: the upload thread dies with the process), then retire
        the writer (CheckpointWriter.close)."""
        if self.writer is not None:
            self.writer.close(timeout)
