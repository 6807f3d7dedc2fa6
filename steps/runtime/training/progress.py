"""Training's live view while it runs: a progress bar on stderr (rank 0) and, when `training.metrics_port` is set,
the Prometheus training metrics rank 0 serves (docs/observability.md)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from steps.runtime.training.metrics import TrainingMetrics

log = logging.getLogger("steps.train")


class LiveProgress:
    """A context manager around the training loop: `start_epoch()` before an epoch, `step(...)` after each step,
    `stop()` once training is over (it stops the metrics server)."""

    def __init__(self, enabled: bool, total: int, done: int, world: int, metrics_port: int, use_gpu: bool,
                 port_file: Path) -> None:  # fmt: skip
        self.world = world
        self.bar = _progress_bar(enabled, total, done)
        self.metrics = _training_metrics(metrics_port, use_gpu, port_file) if enabled else None
        self._step_started = time.perf_counter()

    def __enter__(self) -> LiveProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.bar.__exit__(kind, exc, tb)

    def start_epoch(self) -> None:
        self._step_started = time.perf_counter()

    def step(self, step: int, epoch: int, loss: Any, examples: int, wait: float) -> None:
        """Step `step` of epoch `epoch` (from 1) is done: `examples` on this rank, `wait` seconds spent batching."""
        if self.bar.task_ids:
            self.bar.update(self.bar.task_ids[0], completed=step, description=f"epoch {epoch}")
        if self.metrics:
            now = time.perf_counter()
            self.metrics.update(step, epoch, float(loss), examples * self.world, now - self._step_started, wait=wait)
            self._step_started = now

    def stop(self) -> None:
        if self.metrics:
            self.metrics.stop()


def _progress_bar(enabled: bool, total: int, done: int) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), disable=not enabled,
    )  # fmt: skip
    if enabled:
        progress.add_task("training", total=total, completed=done)
    return progress


def _training_metrics(port: int, use_gpu: bool, port_file: Path) -> Any:
    """Rank 0 serves Prometheus metrics when `training.metrics_port` is set (docs/observability.md)."""
    if not port:
        return None
    metrics = TrainingMetrics(gpu=use_gpu)
    bound = metrics.start(port, port_file=port_file)
    log.info("training metrics on port %d (/metrics)", bound)
    return metrics
