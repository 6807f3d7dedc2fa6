"""benchmarks/load.py's closed-loop client against a real TCP server on 127.0.0.1 that answers as told."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from benchmarks import load


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def chunked(body: bytes) -> bytes:
    half = len(body) // 2
    parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + parts + b"0\r\n\r\n"


async def serve(answer: Callable[[bytes, int], bytes | None]) -> tuple[asyncio.Server, int, list[bytes], list[int]]:
    """A server calling `answer(request body, request number on its connection)`: the bytes to write, or None to
    drop the connection. The bodies it received, and how many connections it accepted."""
    received: list[bytes] = []
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        number = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                received.append(body)
                number += 1
                reply = answer(body, number)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if b"Connection: close" in reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], received, accepted


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def requests(port: int, n: int) -> list[bytes]:
    return [
        load.post_request("127.0.0.1", port, "/v1/models/m:predict", b'{"instances": ["%d"]}' % i) for i in range(n)
    ]


def test_every_request_is_sent_once_and_every_answer_read_whole() -> None:
    async def main() -> None:
        server, port, received, accepted = await serve(
            lambda body, n: (chunked if n % 2 else ok)(b'{"predictions": [' + body + b"]}")
        )
        async with server:
            ready = load.get_request("127.0.0.1", port, "/v1/models/m")
            done, seconds = await load.closed_loop("127.0.0.1", port, requests(port, 37), clients=4, ready=ready)
        assert done == 37 and seconds > 0
        assert len(accepted) == 4  # one keep-alive connection per client, the ready check included
        bodies = [b for b in received if b]  # the ready GETs have no body
        assert sorted(bodies) == sorted(b'{"instances": ["%d"]}' % i for i in range(37))

    run(main())


def test_a_refusal_stops_the_run_with_the_answer() -> None:
    async def main() -> None:
        def answer(body: bytes, n: int) -> bytes:
            if b'"5"' in body:
                return b"HTTP/1.1 422 Unprocessable\r\nContent-Length: 13\r\n\r\ntext too long"
            return ok(b"{}")

        server, port, _, _ = await serve(answer)
        async with server:
            with pytest.raises(RuntimeError, match=r"answered 422: b'text too long'"):
                await load.closed_loop("127.0.0.1", port, requests(port, 10), clients=2)

    run(main())


def test_a_connection_the_server_closes_after_its_answer_is_reopened() -> None:
    async def main() -> None:
        closing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        server, port, received, accepted = await serve(lambda body, n: closing)
        async with server:
            done, _ = await load.closed_loop("127.0.0.1", port, requests(port, 6), clients=2)
        assert done == 6 and len(received) == 6
        assert len(accepted) == 6  # every answer closed its connection, every next request opened one

    run(main())


def test_a_connection_dropped_before_the_answer_fails_the_run() -> None:
    async def main() -> None:
        server, port, _, _ = await serve(lambda body, n: None)
        async with server:
            with pytest.raises(ConnectionError, match="closed the connection before answering"):
                await load.closed_loop("127.0.0.1", port, requests(port, 3), clients=1)

    run(main())
