"""A closed-loop HTTP/1.1 load generator that costs the shared CPUs as little as it can.

The benchmarks run client and server on the same two cores, so whatever the client spends per request is taken
from the server being measured (the in-process contender has no client at all). aiohttp spends ~140 µs of Python
per request building, sending and reading it; under 16 clients the server waits for it: a wave's 16 requests
reached our server over ~2.2 ms with aiohttp and ~0.4 ms with this client (docs/benchmarks.md, "Fifth session").
Here each client is one keep-alive connection, an `asyncio.Protocol` whose responses httptools parses (the HTTP
parser uvicorn uses), sending requests that were encoded before the clock started. Every answer's status is
checked; anything but 200 stops the run with the answer's first bytes.

    done, seconds = run_closed_loop("127.0.0.1", 8080, [post_request(...), ...], clients=16)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable, Iterator

import httptools

TIMEOUT_S = 120.0  # the whole run, as the aiohttp session's total timeout


def post_request(host: str, port: int, path: str, body: bytes) -> bytes:
    """One keep-alive `POST path` with a JSON `body`, as bytes on the wire."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


def get_request(host: str, port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode("ascii")


class Connection(asyncio.Protocol):
    """One keep-alive connection: `exchange` writes a request and returns the status and body of its answer."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._body: list[bytes] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(RuntimeError(f"unparsable HTTP answer: {exc}"))
            self.close()

    def on_body(self, body: bytes) -> None:  # httptools callback
        self._body.append(body)

    def on_message_complete(self) -> None:  # httptools callback
        body, self._body = b"".join(self._body), []
        if not self._parser.should_keep_alive():
            self.close()  # the server ends the connection after this answer; the next request reconnects
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((self._parser.get_status_code(), body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"the server closed the connection before answering ({exc or 'EOF'})"))

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        assert self._transport is not None and not self.closed
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return await self._waiter

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


async def connect(host: str, port: int) -> Connection:
    _, connection = await asyncio.get_running_loop().create_connection(Connection, host, port)
    return connection


async def closed_loop(
    host: str, port: int, requests: Iterable[bytes], clients: int, ready: bytes | None = None
) -> tuple[int, float]:
    """`clients` connections, each sending its next request as soon as the previous one is answered, until
    `requests` run out: (answered, seconds). Every connection is opened first (and sends `ready` once, untimed),
    so connection set-up is not part of the measurement."""
    connections = [await connect(host, port) for _ in range(clients)]
    try:
        if ready is not None:
            await asyncio.gather(*(check(c.exchange(ready)) for c in connections))
        pending: Iterator[bytes] = iter(requests)

        async def client(connection: Connection) -> int:
            sent = 0
            for request in pending:
                if connection.closed:
                    connection = await connect(host, port)
                await check(connection.exchange(request))
                sent += 1
            connection.close()
            return sent

        start = time.perf_counter()
        async with asyncio.timeout(TIMEOUT_S):
            counts = await asyncio.gather(*(client(c) for c in connections))
        return sum(counts), time.perf_counter() - start
    finally:
        for connection in connections:
            connection.close()


async def check(answer: Awaitable[tuple[int, bytes]]) -> bytes:
    """The answer's body; RuntimeError for any status but 200."""
    status, body = await answer
    if status != 200:
        raise RuntimeError(f"the server answered {status}: {body[:200]!r}")
    return body


def run_closed_loop(
    host: str, port: int, requests: Iterable[bytes], clients: int, ready: bytes | None = None
) -> tuple[int, float]:
    """`closed_loop` on a fresh uvloop event loop."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(closed_loop(host, port, requests, clients, ready))
