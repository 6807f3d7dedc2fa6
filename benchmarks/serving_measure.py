"""The serving benchmark's measurements, interleaved so that a shared machine's slow spells fall on every
contender alike.

On a shared machine the speed of every contender dips for a few seconds at a time (other guests;
docs/benchmarks.md gives the size of the dips), so the contenders are interleaved as finely as each
measurement allows: batch-1 latency one request at a time, each contender in turn; throughput in many short
rounds whose order rotates, with a pause before each round for the previous contender's OpenMP threads to stop
spinning. Each contender's texts/s is the median of its rounds (a round caught in a dip is an outlier, not half
the sample).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.serving_contenders import HttpContender, InProcess, Result
from paddle_mlops_core.config.serving import ServingConfig

T = TypeVar("T")
SETTLE_S = 0.25  # > Intel OpenMP's 200 ms spin after a parallel region (KMP_BLOCKTIME)


def batch_rates(inproc: InProcess, texts: list[str], quick: bool) -> dict[int, float]:
    """Texts/s of the in-process predictor for each batch size, one quick sweep."""
    sizes = (1, 2, 4, 8, 16, 32)
    rates = {}
    for size in sizes:
        inproc.throughput(texts[:size], size)  # a first run per shape pays one-off set-up costs
        n = size * (1 if quick else max(2, 64 // size))
        done, seconds = inproc.throughput(texts[:n], size)
        rates[size] = done / seconds
    return rates


def settle() -> None:
    """Let the previous contender's OpenMP threads stop spinning before the next one is timed."""
    time.sleep(SETTLE_S)


def batch_sizes(url: str) -> dict[int, int]:
    """How many model calls of each size our server has made so far, from its `/metrics`."""
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        if family.name == "paddle_mlops_serving_batch_size":
            buckets = sorted((float(s.labels["le"]), s.value) for s in family.samples if s.name.endswith("_bucket"))
    # cumulative buckets (1, 2, 4, ... 16, ...) -> calls with size in (previous bound, bound]
    out, below = {}, 0.0
    for bound, cumulative in buckets:
        if bound != float("inf"):
            out[int(bound)] = int(cumulative - below)
            below = cumulative
    return out


def rotated(items: Sequence[T], r: int) -> list[T]:
    """`items` rotated left by `r`: round r's order, so that each item takes each place in turn."""
    k = r % len(items)
    return [*items[k:], *items[:k]]


def warm_up(
    inproc: InProcess, ours: HttpContender, base: HttpContender, floor: HttpContender, texts: list[str], clients: int
) -> None:
    """The first runs of every batch shape on every calling thread allocate and pick kernels
    (oneDNN caches are per thread). Our server sees batches of up to `clients` texts here; every
    contender runs one such batch too, so all carry the same history into the batch-1 timings."""
    for contender in (inproc, ours, base, floor):
        contender.open(texts[0])
        for text in texts[1:4]:
            contender.time_one(text)
    for contender in (ours, base):
        contender.throughput(texts[: 2 * clients], clients)
    for contender in (inproc, ours, base):
        contender.predict_many(texts[:clients])


def measure_latency(
    contenders: Sequence[tuple[str, Any]], results: dict[str, Result], texts: list[str], requests: int
) -> None:
    """Batch-1 latency one request at a time, each contender in turn (the order rotating), so that
    the machine's slow spells (seconds long on a shared host) fall on all of them alike. Every call
    runs on the host's one loop thread with its OpenMP team still spinning from the call before,
    whichever contender made it: the steady state of back-to-back requests."""
    for _, contender in contenders:
        contender.open(texts[0])
    for i in range(requests):
        text = texts[i % len(texts)]
        for name, contender in rotated(contenders, i):
            results[name].latencies.append(contender.time_one(text))


def throughput_rounds(
    args: argparse.Namespace,
    measured: Sequence[tuple[Result, Callable[[list[str]], tuple[int, float]]]],
    round_texts: Callable[[int], list[str]],
    servers: tuple[HttpContender, HttpContender],
    ours_url: str,
) -> dict[int, int]:
    """`args.rounds` rotations of one round per contender; our server's model calls by size meanwhile."""
    # One untimed round for each server first: after the batch-1 requests and the in-process
    # sweep, our batcher expects lone clients, and the first wave of 16 is split (its first
    # request runs alone, then the few already parsed, then the rest): a transition worth two
    # model calls that the steady state under 16 clients does not have.
    for contender in servers:
        contender.throughput(round_texts(0), args.clients)
    batches_before = batch_sizes(ours_url)
    for r in range(args.rounds):
        chunk = round_texts(r)
        for result, run in rotated(measured, r):
            settle()
            result.add_round(*run(chunk))
    return {size: n - batches_before.get(size, 0) for size, n in batch_sizes(ours_url).items()}


def measure_throughput(
    args: argparse.Namespace,
    texts: list[str],
    rates: dict[int, float],
    contenders: tuple[InProcess, HttpContender, HttpContender],
    results: dict[str, Result],
    ours_url: str,
) -> None:
    """Fill `results` with every contender's throughput rounds; in-process: the machine's limit."""
    inproc, ours, base = contenders
    # The machine's limit: the in-process predictor at the fastest batch size of the sweep and at
    # the batch our server forms under `clients` clients, each measured in the same rotating
    # rounds as the servers; the better of them is the denominator. (One sweep alone is too
    # noisy to pick a single size: its fastest size is often not the fastest a minute later.)
    server_batch = min(args.clients, args.max_batch_size or ServingConfig().max_batch_size)
    sizes = sorted({max(rates, key=rates.__getitem__), server_batch})
    limit = {size: Result(f"in-process@{size}") for size in sizes}
    # Short rounds (two waves of `clients` requests), many of them: a slow spell of the machine
    # spoils one round of one contender, and the median round leaves it out.
    tp_round = max(2 * args.clients, max(sizes))
    measured: list[tuple[Result, Callable[[list[str]], tuple[int, float]]]] = [
        *((limit[size], lambda c, size=size: inproc.throughput(c, size)) for size in sizes),
        (results["ours"], lambda c: ours.throughput(c, args.clients)),
        (results["ours-aiohttp"], lambda c: ours.throughput_aiohttp(c, args.clients)),
        (results["baseline"], lambda c: base.throughput(c, args.clients)),
    ]

    def round_texts(r: int) -> list[str]:
        return [texts[(r * tp_round + i) % len(texts)] for i in range(tp_round)]

    ours_batches = throughput_rounds(args, measured, round_texts, (ours, base), ours_url)
    # Each round is tp_round / clients waves (two rounds per rotation: either client); a wave that is not
    # gathered into one batch shows here.
    results["ours"].note = (
        f"{args.clients} clients; {sum(ours_batches.values())} model calls for "
        f"{2 * args.rounds * tp_round // args.clients} waves of either client; sizes "
        + ", ".join(f"<={size}: {n}" for size, n in sorted(ours_batches.items()) if n)
    )
    results["ours-aiohttp"].note = f"{args.clients} aiohttp clients"
    best = max(sizes, key=lambda size: limit[size].throughput)
    # The batch our server forms under `clients` clients, on its own (#32: the throughput target is against it).
    results["in-process@batch"] = replace(limit[server_batch], name=f"in-process@{server_batch}")
    results["in-process"] = replace(
        limit[best],
        name="in-process",
        latencies=results["in-process"].latencies,
        note=f"batch {best}"
        + (" of " + ", ".join(f"{s}: {limit[s].throughput:.1f}" for s in sizes) if len(sizes) > 1 else ""),
    )
