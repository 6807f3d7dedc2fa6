"""Dynamic batching: concurrent requests merged into one model call, run on one model thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from steps.runtime.serving.model_server.metrics import BATCH_SIZE

T = TypeVar("T")
Results = list[dict[str, Any]]
Pending = tuple[list[str], asyncio.Future[Results]]  # a request's texts and where its results go

GATHER_CAP = 4  # a batch waits for its wave at most this many max_wait_ms in all


class DynamicBatcher:
    """Merge concurrent requests into one model call of at most `max_batch_size` texts.

    One worker task per event loop takes the first waiting request and everything already queued
    behind it, then keeps collecting while the batch is smaller than the previous one (the recent
    concurrency) and the next request comes within `max_wait_ms` of the last (at most
    `GATHER_CAP` x `max_wait_ms` in all), until the next request would overflow the batch (a
    request is never split). So a lone client never waits (its previous batch held one text), while
    16 clients whose answers all went out together are gathered into one batch again instead of
    alternating between a batch of 1 and a batch of 15. Batches run in one dedicated model thread
    so the loop keeps accepting requests (and answering health checks) meanwhile; a lone request on
    an idle server (`inline_lone`) runs on the loop thread, which is quicker by two thread wake-ups,
    and in its own task: after one turn of the loop, in which any request that came in with it
    reaches the queue (and then they go to the worker together), it calls the model itself instead
    of handing over to the worker and being woken with the answer. The model is only ever called by
    the worker or, while the worker waits on an empty queue, by a lone request on the loop thread,
    so the predictor never sees two calls at once.
    """

    def __init__(
        self,
        run_batch: Callable[[list[str]], Results],
        max_batch_size: int,
        max_wait_ms: float,
        inline_lone: bool = True,
        thread_initializer: Callable[[], object] | None = None,
    ):
        """`thread_initializer` runs once on every thread that will call `run_batch`: the model
        thread, and the event loop's thread when lone requests run inline."""
        self._run_batch = run_batch
        self._max_batch = max_batch_size
        self._max_wait = max_wait_ms / 1000.0
        self._queue: asyncio.Queue[Pending] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expected = 1  # texts in the previous batch: how many to wait for
        self._idle = False  # the worker waits on an empty queue, no batch in flight
        self._lone_pending = False  # a lone request is taking its turn of the loop before it runs
        self._inline_lone = inline_lone
        self._thread_initializer = thread_initializer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model", initializer=thread_initializer)

    def run_on_model_thread(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run `fn(*args)` on the thread that runs the batches, after any batch already running.

        Calls of one Paddle predictor from two threads can differ in speed by several per cent
        for the life of the process (each thread has its own OpenMP team and per-thread buffers),
        so work that must match the batches' conditions (a warm-up, a reference timing) runs here.
        """
        return self._executor.submit(fn, *args)

    def close(self) -> None:
        """Stop the model thread once what it was given has run (a batcher that serves no more requests)."""
        self._executor.shutdown(wait=False)

    def _ensure_worker(self) -> asyncio.Queue[Pending]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            if self._loop is not loop and self._inline_lone and self._thread_initializer is not None:
                self._thread_initializer()
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._work(self._queue))
        assert self._queue is not None
        return self._queue

    async def submit(self, texts: list[str]) -> Results:
        queue = self._ensure_worker()
        if self._inline_lone and len(texts) == 1 and self._alone(queue) and not self._lone_pending:
            self._lone_pending = True
            try:
                await asyncio.sleep(0)  # one turn: requests parsed with this one reach the queue
            finally:
                self._lone_pending = False
            if self._alone(queue):
                return self._run_lone(texts)
        future: asyncio.Future[Results] = asyncio.get_running_loop().create_future()
        queue.put_nowait((texts, future))
        return await future

    def _alone(self, queue: asyncio.Queue[Pending]) -> bool:
        """Nothing queued or running, and the previous batch held one text (a lone client)."""
        return self._idle and self._expected == 1 and queue.empty()

    def _run_lone(self, texts: list[str]) -> Results:
        """A lone request's model call, on the loop thread, in the request's own task (docs/benchmarks.md, serving
        items 6 and 14)."""
        results = self._run_batch(texts)
        if len(results) != len(texts):
            raise RuntimeError(f"model returned {len(results)} results for {len(texts)} texts")
        # Counted once this turn of the loop is over: the answer has been written by then.
        asyncio.get_running_loop().call_soon(BATCH_SIZE.observe, 1)
        return results

    async def _work(self, queue: asyncio.Queue[Pending]) -> None:
        carry: Pending | None = None
        loop = asyncio.get_running_loop()
        while True:
            if carry is None:
                self._idle = True
                try:
                    first = await queue.get()
                finally:
                    self._idle = False
            else:
                first, carry = carry, None
            batch = [first]
            size = len(first[0])
            # Wait for companions only while the batch is smaller than the previous one: a lone
            # client's request runs at once; under load the answers of one batch come back as the
            # requests of the next, and waiting briefly for them beats running a batch of one.
            target = min(self._max_batch, self._expected)
            # The wait restarts with every arrival (the wave is still coming in), within a cap: a
            # wave of 16 arrives over a few ms, more on a busy CPU, and a wave split in two costs
            # a whole extra model call.
            started = loop.time()
            deadline, cap = started + self._max_wait, started + GATHER_CAP * self._max_wait
            while size < self._max_batch:
                remaining = deadline - loop.time() if size < target else -1.0
                try:
                    item = (
                        queue.get_nowait()
                        if remaining <= 0 or not queue.empty()
                        else await asyncio.wait_for(queue.get(), remaining)
                    )
                except (TimeoutError, asyncio.QueueEmpty):
                    break
                if size + len(item[0]) > self._max_batch:
                    carry = item
                    break
                batch.append(item)
                size += len(item[0])
                deadline = min(loop.time() + self._max_wait, cap)
            # A lone request on an idle server runs on the loop thread itself: two thread wake-ups
            # fewer, which Paddle's spinning OpenMP workers make worth having (docs/benchmarks.md,
            # serving item 6). Anything batched runs on the model thread (loop stays free).
            inline = self._inline_lone and size == 1 and target == 1 and queue.empty()
            self._expected = size
            await self._run(batch, size, inline)

    async def _run(self, batch: list[Pending], size: int, inline: bool) -> None:
        texts = [t for item, _ in batch for t in item]
        try:
            if inline:
                BATCH_SIZE.observe(size)
                results = self._run_batch(texts)
            else:
                running = asyncio.get_running_loop().run_in_executor(self._executor, self._run_batch, texts)
                BATCH_SIZE.observe(size)  # while the model thread starts on the batch
                results = await running
            if len(results) != len(texts):
                raise RuntimeError(f"model returned {len(results)} results for {len(texts)} texts")
        except Exception as exc:  # noqa: BLE001 — every waiting request must learn of the failure
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for item, future in batch:
            if not future.done():
                future.set_result(results[start : start + len(item)])
            start += len(item)
