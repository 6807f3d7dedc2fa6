"""The V1 fast path: `POST /v1/models/{name}:predict` for our models, ahead of the FastAPI app."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from kserve import errors as kerrors
from kserve.metrics import POST_HIST_TIME, PRE_HIST_TIME, PREDICT_HIST_TIME, get_labels
from kserve.model_repository import ModelRepository
from kserve.utils.utils import is_structured_cloudevent
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from steps.runtime.serving.model_server.guard import read_body, replay
from steps.runtime.serving.model_server.model import ErnieModel, routed_to_ours

# Starlette's `{model_name}` path parameter: anything but a slash.
_V1_PREDICT = re.compile(r"/v1/models/(?P<name>[^/]+):predict")
_JSON_TYPES = (b"application/json", b"application/cloudevents+json")
ErrorHandlers = Mapping[Any, Callable[[Any, Exception], Any]]


class V1Predict:
    """Answer `POST /v1/models/{name}:predict` for our models on the shortest path; everything else to `app`.

    kserve's V1 handler runs every request through its generic DataPlane (decode with CloudEvent
    detection, model lookup, `Model.__call__` with its stage timers, encode), behind FastAPI's and
    Starlette's middleware, routing and request objects. For an `ErnieModel` and a plain JSON body this
    ASGI layer makes the same calls itself — `preprocess`, `predict`, `postprocess`, each timed into
    kserve's own `request_{pre,post}process_seconds` / `request_predict_seconds` histograms — and
    answers kserve's errors with the app's own handlers (`error_handlers`, the table the FastAPI app
    registers), and nothing else. After a model call that has swept the CPU caches every Python layer
    runs cold, so each one skipped shortens every request (docs/benchmarks.md, serving items 7 and 13).
    `application/json` with a charset parameter is JSON here (kserve's handler compares the whole header
    and refuses it). Anything else (other paths, unknown or other models, CloudEvents, other content types)
    goes to `app`, where kserve's handler answers it.
    """

    def __init__(self, app: ASGIApp, repository: ModelRepository, error_handlers: ErrorHandlers) -> None:
        self.app = app
        self.repository = repository
        self.error_handlers = error_handlers
        self._timers: dict[str, tuple[Any, Any, Any]] = {}

    def _stage_timers(self, name: str) -> tuple[Any, Any, Any]:
        if name not in self._timers:
            labels = get_labels(name)
            self._timers[name] = (
                PRE_HIST_TIME.labels(**labels),
                PREDICT_HIST_TIME.labels(**labels),
                POST_HIST_TIME.labels(**labels),
            )
        return self._timers[name]

    def _ours(self, scope: Scope) -> ErnieModel | None:
        """The model a plain-JSON V1 predict request is for, when it is ours; else None."""
        routed = routed_to_ours(self.repository, _V1_PREDICT, scope) if scope.get("method") == "POST" else None
        if routed is None:
            return None
        model = routed[1]
        content_type = b"application/json"
        for key, value in scope["headers"]:
            if key == b"content-type":
                content_type = value.split(b";")[0].strip().lower()
            elif key == b"ce-specversion":
                return None
        return model if content_type in _JSON_TYPES else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = self._ours(scope)
        if model is None:
            await self.app(scope, receive, send)
            return
        timed: list[float] = []  # the seconds of each stage that completed
        try:
            if not model.ready:
                raise kerrors.ModelNotReady(model.name)
            body = await read_body(receive)
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise kerrors.InvalidInput(f"Unrecognized request format: {exc}") from exc
            if isinstance(payload, dict) and is_structured_cloudevent(payload):
                await self.app(scope, replay(body, receive), send)
                return
            response = Response(orjson.dumps(await self._infer(model, payload, timed)), media_type="application/json")
        except Exception as exc:  # noqa: BLE001 — answered by the app's handler for its type, as the app would
            response = await self._handler(exc)(None, exc)
        await response(scope, receive, send)
        # The stages' histograms once this turn of the loop is over: after this answer and the others of its batch
        # are out, off the path between the model call and the clients (docs/benchmarks.md, serving item 15).
        asyncio.get_running_loop().call_soon(self._observe, model.name, timed)

    def _observe(self, name: str, timed: list[float]) -> None:
        for timer, seconds in zip(self._stage_timers(name), timed, strict=False):
            timer.observe(seconds)

    async def _infer(self, model: ErnieModel, payload: Any, timed: list[float]) -> Any:
        """preprocess, predict, postprocess; each stage that completed appends its seconds to `timed`."""
        start = time.perf_counter()
        texts = await model.preprocess(payload)
        mid = time.perf_counter()
        timed.append(mid - start)
        result = await model.predict(texts)
        end = time.perf_counter()
        timed.append(end - mid)
        result = await model.postprocess(result)
        timed.append(time.perf_counter() - end)
        return result

    def _handler(self, exc: Exception) -> Callable[[Any, Exception], Any]:
        """The most specific registered handler for `exc`, as Starlette looks one up (by the type's MRO)."""
        for cls in type(exc).__mro__:
            if cls in self.error_handlers:
                return self.error_handlers[cls]
        raise exc  # nothing registered (not even Exception): the server's own 500
