"""The transfer progress bar that publish and fetch advance through their byte callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from steps.runtime.storage.objectstore.backends import Callback


@contextmanager
def transfer_progress(enabled: bool, total: int, label: str) -> Iterator[Callback]:
    """A callback that advances a bar of `total` bytes on stderr (a no-op bar when not `enabled`)."""
    with Progress(
        TextColumn(label),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),  # stdout carries the step's result lines
        disable=not enabled,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.update(task, advance=n)
