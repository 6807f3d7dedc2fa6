"""A per-step trace of what each rank trained: step, epoch, learning rate and a hash of every example.

Set `PADDLE_MLOPS_TRAIN_TRACE=PATH` and each rank appends one JSON line per optimizer step to `PATH.<rank>` (with
the wall time the step's update started: benchmarks/checkpoint_cost.py measures the work a kill loses by it). It is
how a resume is checked against an uninterrupted run (tests/test_train_interruptions.py): no example of an epoch
trained twice or skipped across the restart, the same learning rate at the first resumed step. Off by default.

Set `PADDLE_MLOPS_TRAIN_SCORING_DELAY=SECONDS` (a test hook) and rank 0 logs `pausing ... before the dev scoring` and
waits that long at the start of every epoch's dev scoring, inside its SIGTERM phase (graceful_stop.py): a signal sent
once the line is logged reaches the scoring. The dev scoring of a tiny model lasts a fraction of a second, too short
to hit from outside (tests/test_train_interruptions.py). Unset, it costs one attribute check per epoch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence

TRACE_ENV = "PADDLE_MLOPS_TRAIN_TRACE"
SCORING_DELAY_ENV = "PADDLE_MLOPS_TRAIN_SCORING_DELAY"

log = logging.getLogger("steps.train")


def example_hash(input_ids: Sequence[int]) -> str:
    """A short stable id of one tokenised example (its token ids)."""
    return hashlib.sha1(json.dumps(list(input_ids)).encode(), usedforsecurity=False).hexdigest()[:16]


class StepTrace:
    def __init__(self, rank: int) -> None:
        base = os.environ.get(TRACE_ENV)
        self.path = f"{base}.{rank}" if base else None
        self.scoring_delay = float(os.environ.get(SCORING_DELAY_ENV) or 0)

    def before_scoring(self, epoch: int) -> None:
        """The test hook's pause at the start of a dev scoring (module docstring)."""
        if self.scoring_delay:
            log.warning("pausing %g s before the dev scoring of epoch %d (%s)", self.scoring_delay, epoch + 1,
                        SCORING_DELAY_ENV)  # fmt: skip
            time.sleep(self.scoring_delay)

    def record(self, step: int, epoch: int, lr: float, input_ids: Sequence[Sequence[int]]) -> None:
        """One line for the step that trained the model rows `input_ids`."""
        if self.path is None:
            return
        examples = [example_hash(ids) for ids in input_ids]
        line = {"step": step, "epoch": epoch, "lr": lr, "examples": examples, "time": round(time.time(), 3)}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
