"""Running the app: a pre-bound socket and uvicorn on an event loop of uvicorn's choice."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving so that port 0 resolves to a known free port we can report."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # uvicorn writes a response as two sends (headers, body); with Nagle on, the body waits for the
    # client's delayed ACK, ~40 ms on every keep-alive request. Accepted sockets inherit this option.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def uvicorn_server(app: ASGIApp) -> uvicorn.Server:
    """One worker (one predictor, one batcher); httptools and uvloop when installed ("auto")."""
    config = uvicorn.Config(
        app, log_config=None, timeout_graceful_shutdown=10, access_log=False, http="auto", loop="auto"
    )
    return uvicorn.Server(config)


async def run_server(server: uvicorn.Server, sock: socket.socket, on_started: Callable[[], None] | None = None) -> None:
    """Serve on the running event loop until the server exits; `on_started` once it listens."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started and on_started is not None:
        on_started()
    await task


def serve(app: ASGIApp, sock: socket.socket, on_started: Callable[[], None] | None = None) -> None:
    """Run `app` under uvicorn on an already bound socket until SIGTERM/SIGINT."""
    server = uvicorn_server(app)
    # uvicorn picks the loop only when it runs the loop itself; we run it, so ask for its choice.
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(run_server(server, sock, on_started))
