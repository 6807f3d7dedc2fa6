"""SIGTERM means "checkpoint at the next step boundary, then exit": the signal sets a flag, the ranks agree on it.

The kubelet sends SIGTERM to a pod that is evicted, preempted or drained, and kills it `terminationGracePeriodSeconds`
later. A rank must never leave the job on its own: the others would wait for it in the next all-reduce until the
kill (gloo and NCCL have no notion of a peer that left). So the flag is only read at a step boundary, through a
MAX all-reduce of one integer that every rank makes at the same steps: if any rank was signalled, all stop after
the same step. Rank 0 writes the checkpoint and waits for its upload; then every rank meets in a barrier (so no rank
exits, and no launcher tears down its peers, before the checkpoint is in the store) and exits with
`EXIT_TERMINATED`, which the pod failure policy and Argo treat as retryable.

On CPU (gloo) the check runs after every step; on a GPU every `GPU_CHECK_EVERY` steps, since reading the reduced
flag waits for the step's kernels (a host-device sync the training loop otherwise avoids) and the grace period
easily holds ten more steps.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from paddle_mlops_core.contracts import LAUNCH_CONTROL_ENV

log = logging.getLogger("steps.train")

GPU_CHECK_EVERY = 10


class StopRequest:
    """The SIGTERM flag of this process; `installed()` makes the signal set it (idempotent: Paddle's launcher sends
    SIGTERM up to three times) and leaves this process's pid where steps.runtime.training.launch forwards the signal."""

    def __init__(self) -> None:
        self.signalled_at: float | None = None
        self.armed = False

    @property
    def requested(self) -> bool:
        return self.signalled_at is not None

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
            log.warning("signal %d: checkpointing at the next step boundary, then exiting", signum)

    @contextmanager
    def installed(self, rank: int) -> Iterator[StopRequest]:
        """SIGTERM sets the flag (cleared first) while the block runs; the previous handler is restored after.

        Native code replaces the process's SIGTERM action behind Python's back: Paddle's core installs its own
        handler when imported ("FatalError: Termination signal is detected", abort), and importing PaddleNLP resets
        it to the default (death). Python still reports its handler, so `arm()` installs it again at every step
        boundary (one sigaction call), after whatever the trainer imported."""
        import paddle  # noqa: F401 - installs Paddle's handler now, so that ours replaces it below

        self.signalled_at = None
        self.armed = True
        previous = signal.signal(signal.SIGTERM, self._handle)
        control = os.environ.get(LAUNCH_CONTROL_ENV)
        if control and Path(control).is_dir():
            (Path(control) / f"pid.{rank}").write_text(str(os.getpid()))
        try:
            yield self
        finally:
            self.armed = False
            signal.signal(signal.SIGTERM, previous)

    def arm(self) -> None:
        """Make our handler the process's SIGTERM action again (see `installed`)."""
        if self.armed:
            signal.signal(signal.SIGTERM, self._handle)


REQUEST = StopRequest()


class StopDecision:
    """Whether the job stops after this step: the same answer on every rank (module docstring)."""

    def __init__(self, world: int, use_gpu: bool, request: StopRequest = REQUEST) -> None:
        self.world, self.request = world, request
        self.every = GPU_CHECK_EVERY if use_gpu else 1

    def after_step(self, step: int) -> bool:
        self.request.arm()
        if self.world <= 1:
            return self.request.requested
        if step % self.every:
            return False
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
