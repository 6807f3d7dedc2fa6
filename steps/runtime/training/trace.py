"""A per-step trace of what each rank trained: step, epoch, learning rate and a hash of every example.

Set `PADDLE_MLOPS_TRAIN_TRACE=PATH` and each rank appends one JSON line per optimizer step to `PATH.<rank>` (with
the wall time the step's update started: benchmarks/checkpoint_cost.py measures the work a kill loses by it). It is
how a resume is checked against an uninterrupted run (tests/test_train_interruptions.py): no example of an epoch
trained twice or skipped across the restart, the same learning rate at the first resumed step. Off by default.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from typing import Any

TRACE_ENV = "PADDLE_MLOPS_TRAIN_TRACE"


def example_hash(input_ids: Sequence[int]) -> str:
    """A short stable id of one tokenised example (its token ids)."""
    return hashlib.sha1(json.dumps(list(input_ids)).encode(), usedforsecurity=False).hexdigest()[:16]


class StepTrace:
    def __init__(self, rank: int) -> None:
        base = os.environ.get(TRACE_ENV)
        self.path = f"{base}.{rank}" if base else None

    def record(self, step: int, epoch: int, lr: float, rows: Any, indices: Sequence[int]) -> None:
        if self.path is None:
            return
        examples = [example_hash(rows.input_ids[i]) for i in indices]
        line = {"step": step, "epoch": epoch, "lr": lr, "examples": examples, "time": round(time.time(), 3)}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
