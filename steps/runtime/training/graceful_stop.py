"""SIGTERM at any moment ends a worker within the grace period, with exit 143, having lost at most one checkpoint
interval of training. What the signal does depends on the phase the worker is in (`Phase`).

The kubelet sends SIGTERM to a pod that is evicted, preempted or drained, and kills it `terminationGracePeriodSeconds`
later. While the ranks train, a rank must never leave the job on its own: the others would wait for it in the next
all-reduce until the kill (gloo and NCCL have no notion of a peer that left). So during training the signal only sets
a flag, read at a step boundary (and at an epoch boundary, after rank 0's dev scoring) through a MAX all-reduce of one
integer that every rank makes at the same steps: if any rank was signalled, all stop after the same step. Rank 0
writes the checkpoint and waits for its upload; then every rank meets in a barrier (so no rank exits, and no launcher
tears down its peers, before the checkpoint is in the store) and exits with `EXIT_TERMINATED`, which the pod failure
policy and Argo treat as retryable.

Outside the training steps nothing waits for a step boundary, which may be minutes away:
- setting up (staging data, building the model, counting the n-gram vocabulary) and finishing (the export, the CRF
  baseline fold): the handler raises `StepStopped` at once. Nothing is lost in setup; before finishing, rank 0 has
  handed the end-of-training checkpoint to its upload thread, which the step waits for before it exits.
- rank 0's dev scoring of an epoch: the handler raises `ScoringInterrupted`; the trainer checkpoints the state after
  the epoch's last step (the snapshot a stop at that step boundary writes: a resume scores the epoch again) and stops
  with its peers, which wait for it in the epoch-boundary all-reduce.
A flag set before a raising phase begins raises when it begins; the first signal raises, later ones (Paddle's launcher
sends up to three) only find the flag set.

On CPU (gloo) the step-boundary check runs after every step; on a GPU every `GPU_CHECK_EVERY` steps, since reading
the reduced flag waits for the step's kernels (a host-device sync the training loop otherwise avoids) and the grace
period easily holds ten more steps.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from paddle_mlops_core.contracts import LAUNCH_CONTROL_ENV
from steps.runtime.runner import StepStopped

log = logging.getLogger("steps.train")

GPU_CHECK_EVERY = 10
# Of the grace period, what the process's own exit and the signal's way to it take (the "+ 10 s" the grace period's
# size holds: paddle_mlops_core/config/checkpoint.py); a stopping worker waits for its upload until then.
EXIT_SECONDS = 10


class Phase(enum.Enum):
    """What a worker is doing, so what SIGTERM does to it (module docstring)."""

    SETUP = "setup"  # raises StepStopped
    TRAINING = "training"  # sets the flag, read at the next step or epoch boundary
    SCORING = "scoring"  # raises ScoringInterrupted
    FINISHING = "finishing"  # raises StepStopped
    STOPPING = "stopping"  # sets the flag: the worker is on its way out already


class ScoringInterrupted(Exception):
    """SIGTERM during rank 0's dev scoring: the trainer checkpoints the epoch's last step and stops."""


class StopRequest:
    """The SIGTERM flag and phase of this process; `installed()` makes the signal act on them and leaves this
    process's pid where steps.runtime.training.launch forwards the signal."""

    def __init__(self) -> None:
        self.signalled_at: float | None = None
        self.armed = False
        self.phase = Phase.SETUP

    @property
    def requested(self) -> bool:
        return self.signalled_at is not None

    def seconds_left(self, grace_seconds: float) -> float:
        """How long a stopping worker may still wait (for its checkpoint's upload) and exit within the grace period
        counted from the signal; the whole grace period when there was none (another error ends the step)."""
        if self.signalled_at is None:
            return grace_seconds - EXIT_SECONDS
        return max(0.0, self.signalled_at + grace_seconds - EXIT_SECONDS - time.monotonic())

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        if self.signalled_at is not None:
            return
        self.signalled_at = time.monotonic()
        then = {Phase.TRAINING: "checkpointing at the next step or epoch boundary, then exiting",
                Phase.STOPPING: "stopping already"}.get(self.phase, "stopping now")  # fmt: skip
        log.warning("signal %d during %s: %s", signum, self.phase.value, then)
        self._raise_for_phase()

    def _raise_for_phase(self) -> None:
        phase = self.phase
        if phase in (Phase.SETUP, Phase.FINISHING):
            self.phase = Phase.STOPPING
            raise StepStopped(f"SIGTERM during {phase.value}; exiting")
        if phase is Phase.SCORING:
            self.phase = Phase.STOPPING
            raise ScoringInterrupted("SIGTERM during the dev scoring")

    def enter(self, phase: Phase) -> None:
        """From now on the signal acts as `phase` says; a signal that came before acts now (and the handler is
        installed again: see `installed`)."""
        self.phase = phase
        self.arm()
        if self.requested:
            self._raise_for_phase()

    @contextmanager
    def during(self, phase: Phase) -> Iterator[None]:
        """`phase` while the block runs, the phase before it after; an exception leaves the worker STOPPING."""
        before = self.phase
        self.enter(phase)
        try:
            yield
        except BaseException:
            self.phase = Phase.STOPPING
            raise
        self.enter(before)

    @contextmanager
    def installed(self, rank: int) -> Iterator[StopRequest]:
        """SIGTERM acts on this request (flag cleared, phase SETUP) while the block runs; the previous handler is
        restored after.

        Native code replaces the process's SIGTERM action behind Python's back: Paddle's core installs its own
        handler when imported ("FatalError: Termination signal is detected", abort), and importing PaddleNLP resets
        it to the default (death, whichever thread the signal reaches: Paddle's own threads do not block it). Both
        are imported here first, so that ours replaces theirs; Python still reports its handler whatever native code
        does later, so `arm()` installs it again at every phase change and step boundary (one sigaction call)."""
        import paddle  # noqa: F401 - installs Paddle's handler now, so that ours replaces it below
        import paddlenlp  # noqa: F401 - resets the action to the default at import: before ours, not after

        self.signalled_at = None
        self.armed = True
        self.phase = Phase.SETUP
        previous = signal.signal(signal.SIGTERM, self._handle)
        control = os.environ.get(LAUNCH_CONTROL_ENV)
        if control and Path(control).is_dir():
            (Path(control) / f"pid.{rank}").write_text(str(os.getpid()))
        try:
            yield self
        finally:
            self.armed = False
            self.phase = Phase.STOPPING
            signal.signal(signal.SIGTERM, previous)

    def arm(self) -> None:
        """Make our handler the process's SIGTERM action again (see `installed`)."""
        if self.armed:
            signal.signal(signal.SIGTERM, self._handle)


REQUEST = StopRequest()


class StopDecision:
    """Whether the job stops after this step or epoch: the same answer on every rank (module docstring)."""

    def __init__(self, world: int, use_gpu: bool, request: StopRequest = REQUEST) -> None:
        self.world, self.request = world, request
        self.every = GPU_CHECK_EVERY if use_gpu else 1

    def after_step(self, step: int) -> bool:
        self.request.arm()
        if self.world > 1 and step % self.every:
            return False
        return self._agreed()

    def after_epoch(self) -> bool:
        """At the end of an epoch, after rank 0's dev scoring and epoch-end checkpoint: the other ranks wait for rank
        0 here (rather than in the next step's all-reduce), so a rank 0 whose scoring a signal interrupted stops
        together with them."""
        self.request.arm()
        return self._agreed()

    def _agreed(self) -> bool:
        if self.world <= 1:
            return self.request.requested
        import paddle
        import paddle.distributed as dist

        flag = paddle.to_tensor([1 if self.request.requested else 0], dtype="int32")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def barrier(self) -> None:
        """Every rank waits here until rank 0's final checkpoint is in the store."""
        if self.world > 1:
            import paddle.distributed as dist

            dist.barrier()
