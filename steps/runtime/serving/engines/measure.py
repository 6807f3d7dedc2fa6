"""How fast an engine runs: batch-1 latency and batched throughput, the median of a few timed rounds.

`measure` times one engine alone. A comparison of several engines interleaves them instead (`interleaved`: each
round times every engine once, the order rotated), so that a slow spell of a shared machine falls on all of them
alike; evaluate's engine selection and benchmarks/engines.py both compare that way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from steps.runtime.serving.engines.inputs import Batch
from steps.runtime.serving.engines.runners import Engine

__all__ = ["Batch", "Speed", "interleaved", "measure", "summarise", "time_round", "warm_up"]


@dataclass(frozen=True)
class Speed:
    """Median batch-1 latency and the texts/s it gives, and texts/s at the measured batch size."""

    batch1_p50_ms: float
    batch1_texts_per_s: float
    batchN_texts_per_s: float


def warm_up(engine: Engine, one: Batch, many: Batch) -> None:
    """Run each shape once untimed: the first call of a shape builds kernels, caches and thread pools."""
    engine.run(*one)
    engine.run(*many)


def time_round(engine: Engine, one: Batch, many: Batch) -> tuple[float, float]:
    """Seconds for one batch-1 call and one batched call."""
    start = time.perf_counter()
    engine.run(*one)
    middle = time.perf_counter()
    engine.run(*many)
    return middle - start, time.perf_counter() - middle


def summarise(batch1_s: Sequence[float], batchN_s: Sequence[float], batch: int) -> Speed:
    """The `Speed` of per-round timings: medians, so that a round caught in a slow spell is an outlier."""
    one, many = statistics.median(batch1_s), statistics.median(batchN_s)
    return Speed(batch1_p50_ms=one * 1000, batch1_texts_per_s=1 / one, batchN_texts_per_s=batch / many)


def measure(engine: Engine, make_batch: Callable[[int], Batch], rounds: int = 5, batch: int = 16) -> Speed:
    """Warm `engine` up, then time `rounds` rounds of one batch-1 and one batch-`batch` call on the inputs
    `make_batch(n)` gives (the same inputs every round)."""
    if rounds < 1 or batch < 1:
        raise ValueError("rounds and batch must be at least 1")
    one, many = make_batch(1), make_batch(batch)
    warm_up(engine, one, many)
    timings = [time_round(engine, one, many) for _ in range(rounds)]
    return summarise([t[0] for t in timings], [t[1] for t in timings], batch)


def interleaved(engines: Mapping[str, Engine], one: Batch, many: Batch, rounds: int, pause: float) -> dict[str, Speed]:
    """Warm every engine up, then time `rounds` rounds of one batch-1 and one batched call per engine; round r
    starts at engine r (the order rotated) and each turn waits `pause` seconds first, so that the previous
    engine's worker threads have stopped spinning. Each engine's `Speed` is the median of its rounds."""
    for engine in engines.values():
        warm_up(engine, one, many)
    names = list(engines)
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            time.sleep(pause)
            timings[name].append(time_round(engines[name], one, many))
    size = len(many[0])
    return {name: summarise([t[0] for t in runs], [t[1] for t in runs], size) for name, runs in timings.items()}
