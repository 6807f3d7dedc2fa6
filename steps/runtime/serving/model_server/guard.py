"""`GuardMiddleware`: the body-size limit and the request/latency/error metrics of every request."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steps.runtime.serving.model_server.metrics import ERRORS, LATENCY, REQUESTS

_REASONS = {400: "invalid_input", 404: "model_not_found", 413: "body_too_large", 422: "invalid_input", 503: "not_ready"}


def _protocol_of(path: str) -> str | None:
    if path.startswith("/v1/models/") and path.endswith(":predict"):
        return "v1"
    if path.startswith("/v2/models/") and path.endswith("/infer"):
        return "v2"
    return None


# Each series' child, looked up once (prometheus_client's labels() validates and locks on every call).
@functools.cache
def _requests(protocol: str, code: int) -> Any:
    return REQUESTS.labels(protocol=protocol, code=str(code))


@functools.cache
def _latency(protocol: str) -> Any:
    return LATENCY.labels(protocol=protocol)


@functools.cache
def _errors(reason: str) -> Any:
    return ERRORS.labels(reason=reason)


def _record(protocol: str, code: int, seconds: float) -> None:
    _requests(protocol, code).inc()
    _latency(protocol).observe(seconds)
    if code >= 400:
        _errors(_REASONS.get(code, "inference_error" if code >= 500 else "bad_request")).inc()


class GuardMiddleware:
    """Reject oversized bodies before anything parses them, and count every inference request.

    Both the declared Content-Length and the bytes actually received are checked, so a chunked or
    lying client cannot push more than `max_request_bytes` into the JSON parser.
    """

    def __init__(self, app: ASGIApp, max_request_bytes: int):
        self.app = app
        self.max_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        protocol = _protocol_of(scope.get("path", ""))
        start = time.perf_counter()
        status: dict[str, int] = {}

        async def send_and_record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        body = await self._read_body(scope, receive)
        if body is None:
            await _json_response(
                send_and_record, 413, f"request body exceeds {self.max_bytes} bytes; send fewer or shorter texts"
            )
        else:
            await self.app(scope, replay(body, receive), send_and_record)
        if protocol is not None:
            # Recorded once this turn of the loop is over: a batch's answers all resume in one turn, and each one's
            # records would otherwise hold back the next one's answer (docs/benchmarks.md, serving item 15).
            seconds = time.perf_counter() - start
            asyncio.get_running_loop().call_soon(_record, protocol, status.get("code", 500), seconds)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    if int(value) > self.max_bytes:
                        return None
                except ValueError:
                    return None
        try:
            return await read_body(receive, self.max_bytes)
        except BodyTooLarge:
            return None


class BodyTooLarge(Exception):
    """More of the body came in than allowed."""


async def read_body(receive: Receive, max_bytes: int | None = None) -> bytes:
    """A request's whole body: its chunks until the last one (or the client's disconnect). BodyTooLarge as soon as
    more than `max_bytes` came in, before the rest is read."""
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise BodyTooLarge(f"more than {max_bytes} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app after the body was read: the body once, then the connection's messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _json_response(send: Send, status: int, message: str) -> None:
    payload = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
