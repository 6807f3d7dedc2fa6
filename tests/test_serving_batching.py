"""The model server's dynamic batching: requests merged, batches bounded, waves gathered, lone requests fast."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx

from paddle_mlops_core.contracts import SERVING_BATCH_SIZE
from steps.runtime.serving import model_server as serving
from tests.serving_fixtures import V1, client, fake_app, metric, quiet_kserve, scrape  # noqa: F401 — autouse


def test_concurrent_requests_are_merged_into_batches() -> None:
    app, fake = fake_app(max_batch_size=8, max_wait_ms=200)

    async def go() -> list[httpx.Response]:
        async with client(app) as c:
            return await asyncio.gather(*[c.post(V1, json={"instances": [f"t{i}"]}) for i in range(8)])

    before = asyncio.run(scrape(app))
    responses = asyncio.run(go())
    after = asyncio.run(scrape(app))
    assert all(r.status_code == 200 and len(r.json()["predictions"]) == 1 for r in responses)
    assert max(fake.calls) > 1 and sum(fake.calls) == 8
    assert all(size <= 8 for size in fake.calls)
    # The histogram saw fewer model calls than requests: some batch held more than one request.
    calls = metric(after, f"{SERVING_BATCH_SIZE}_count") - metric(before, f"{SERVING_BATCH_SIZE}_count")
    assert calls == len(fake.calls) < 8


def test_batches_never_exceed_max_batch_size_and_results_route_back() -> None:
    seen: list[list[str]] = []

    def run(texts: list[str]) -> list[dict[str, Any]]:
        seen.append(texts)
        return [{"label": t, "probabilities": {t: 1.0}} for t in texts]

    batcher = serving.DynamicBatcher(run, max_batch_size=4, max_wait_ms=50)

    async def go() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*[batcher.submit([f"{i}a", f"{i}b", f"{i}c"][: 1 + i % 3]) for i in range(10)])

    results = asyncio.run(go())
    for i, res in enumerate(results):
        assert [r["label"] for r in res] == [f"{i}a", f"{i}b", f"{i}c"][: 1 + i % 3]
    assert all(len(batch) <= 4 for batch in seen)


def test_a_lone_request_runs_without_waiting_for_companions() -> None:
    # max_wait_ms only pays when others are queued; an idle server must not add it to latency.
    batcher = serving.DynamicBatcher(lambda texts: [{"label": t} for t in texts], max_batch_size=8, max_wait_ms=2000)

    async def go() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await batcher.submit(["only"])
        return loop.time() - start

    assert asyncio.run(go()) < 1.0


def test_a_lone_request_calls_the_model_in_its_own_task_and_a_wave_at_once_is_still_one_batch() -> None:
    """A lone client's request runs the model in its own task after one turn of the loop (no hand-over to the
    worker and back: serving item 14); requests that arrive together after lone traffic are one batch, not the
    first alone and the rest after it, and a request during a batch waits for the worker."""
    tasks: list[tuple[int, asyncio.Task[Any] | None]] = []

    def run(texts: list[str]) -> list[dict[str, Any]]:
        tasks.append((len(texts), asyncio.current_task() if threading.current_thread() is main else None))
        return [{"label": t} for t in texts]

    main = threading.current_thread()
    batcher = serving.DynamicBatcher(run, max_batch_size=16, max_wait_ms=50)

    async def go() -> list[asyncio.Task[Any] | None]:
        callers = []
        await batcher.submit(["first"])  # the worker starts, and runs it
        for text in ("one", "two"):  # a lone client, twice
            task = asyncio.create_task(batcher.submit([text]))
            callers.append(task)
            await task
        await asyncio.gather(*[batcher.submit([f"w{i}"]) for i in range(16)])  # a wave at once
        return callers

    callers = asyncio.run(go())
    assert [size for size, _ in tasks] == [1, 1, 1, 16]
    assert [task for _, task in tasks[1:3]] == callers  # each lone request in its own task, on the loop thread
    assert tasks[3][1] is None  # the wave on the model thread


def recording_batcher(max_batch_size: int, max_wait_ms: float) -> tuple[serving.DynamicBatcher, list[int]]:
    """A batcher whose model records the size of every call."""
    seen: list[int] = []

    def run(texts: list[str]) -> list[dict[str, Any]]:
        seen.append(len(texts))
        return [{"label": t} for t in texts]

    return serving.DynamicBatcher(run, max_batch_size=max_batch_size, max_wait_ms=max_wait_ms), seen


async def full_batch_then_staggered_wave(batcher: serving.DynamicBatcher, size: int, spacing_s: float) -> None:
    """One full batch of `size` requests, then a wave of `size` sent `spacing_s` apart."""
    await asyncio.gather(*[batcher.submit([f"a{i}"]) for i in range(size)])

    async def later(i: int) -> None:
        await asyncio.sleep(spacing_s * i)
        await batcher.submit([f"b{i}"])

    await asyncio.gather(*[later(i) for i in range(size)])


def test_a_staggered_wave_after_a_full_batch_is_gathered_again_and_a_lone_client_stops_waiting() -> None:
    # 16 clients get their answers together and send their next requests a few ms apart. The
    # batcher must gather that wave into one batch (not run the first request alone and the rest
    # after it), and once the load is gone a lone client must stop paying max_wait_ms.
    batcher, seen = recording_batcher(max_batch_size=8, max_wait_ms=400)

    async def go() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        await full_batch_then_staggered_wave(batcher, 8, 0.01)
        start = loop.time()
        await batcher.submit(["lone-1"])  # waits up to max_wait_ms for companions that never come
        first_lone = loop.time() - start
        start = loop.time()
        await batcher.submit(["lone-2"])  # the previous batch held one text: no waiting any more
        return first_lone, loop.time() - start

    first_lone, second_lone = asyncio.run(go())
    assert seen == [8, 8, 1, 1]
    assert first_lone < 1.0 and second_lone < 0.2


def test_a_wave_that_arrives_slower_than_max_wait_ms_is_still_one_batch_while_requests_keep_coming() -> None:
    # On a busy CPU the 16 requests of a wave can spread over more than max_wait_ms; the wait
    # restarts with each arrival, so the wave is not split into two model calls.
    batcher, seen = recording_batcher(max_batch_size=6, max_wait_ms=100)
    asyncio.run(full_batch_then_staggered_wave(batcher, 6, 0.04))  # 200 ms first to last: twice max_wait_ms
    assert seen == [6, 6]
