"""The trainer's state between steps: what a run works with (`Setup`) and where it stands (`TrainState`), which a
checkpoint saves and a resume restores; the run's summary for `training.json`."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from steps.runtime.training.optimization import AmpDtype
from steps.runtime.training.sampler import LengthGroupedBatchSampler
from steps.runtime.training.train_data import DevSplit, TrainData


@dataclass
class Setup:
    """What a training run works with, built once before the first epoch."""

    train: TrainData  # the train split by row number, encoded a batch at a time
    dev: DevSplit  # the dev split's rows, read for each scoring: only rank 0 evaluates
    sampler: LengthGroupedBatchSampler
    total_steps: int
    optimizer: Any
    scheduler: Any
    model: Any  # the model, wrapped in paddle.DataParallel when there are several processes
    amp: AmpDtype | None
    scaler: Any


@dataclass
class TrainState:
    """Where training stands: restored from a checkpoint, advanced by every step, read by the summary."""

    step: int = 0
    start_epoch: int = 0
    skip: int = 0  # batches of `start_epoch` already trained before the checkpoint
    resumed_from: int = 0
    best: dict[str, Any] = field(default_factory=dict)  # epoch and dev_<metric> of the best epoch so far
    best_state: dict[str, np.ndarray] | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    trained: int = 0  # examples trained over all processes
    loop_seconds: float = 0.0  # the optimisation loop alone

    def keep_best(self, epoch: int, dev: dict[str, float], model: Any) -> None:
        self.best = {"epoch": epoch, **{f"dev_{k}": v for k, v in dev.items()}}
        self.best_state = {k: v.numpy().copy() for k, v in model.state_dict().items()}

    def improves(self, dev: dict[str, float], metric: str) -> bool:
        return self.best_state is None or dev[metric] > self.best.get(f"dev_{metric}", -1.0)

    def position(self, epoch: int, batches_done: int) -> dict[str, Any]:
        """What a checkpoint taken now records besides the arrays: the data position and the history so far."""
        return {"step": self.step, "epoch": epoch, "batches_done": batches_done, "best": self.best,
                "history": self.history}  # fmt: skip

    @classmethod
    def resumed(cls, meta: dict[str, Any], best_state: dict[str, np.ndarray] | None) -> TrainState:
        step = int(meta["step"])
        return cls(step=step, start_epoch=int(meta["epoch"]), skip=int(meta["batches_done"]), resumed_from=step,
                   best=dict(meta.get("best") or {}), best_state=best_state,
                   history=list(meta.get("history") or []))  # fmt: skip


def summary(world: int, state: TrainState, started: float, cpu_started: float) -> dict[str, Any]:
    """The run's step counts and timings, for `training.json` and the caller."""
    return {
        "world_size": world,
        "global_steps": state.step,
        # steps this run executed: global_steps - resumed_from_step
        "steps_run": state.step - state.resumed_from,
        "resumed_from_step": state.resumed_from,
        "train_seconds": round(time.time() - started, 2),
        # CPU seconds of this process: wall time is meaningless on a shared, oversubscribed machine
        "train_cpu_seconds": round(time.process_time() - cpu_started, 2),
        # the optimisation loop alone (no dev evaluation, export or MLflow): benchmarks compare this
        "train_samples_per_second": round(state.trained / max(state.loop_seconds, 1e-9), 2),
    }


def seed_everything(seed: int) -> None:
    import paddle

    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)
