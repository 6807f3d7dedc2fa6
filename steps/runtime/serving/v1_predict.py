"""The V1 fast path: `POST /v1/models/{name}:predict` for our models without kserve's DataPlane."""

from __future__ import annotations

import time
from typing import Any

import orjson
from kserve import errors as kerrors
from kserve.metrics import POST_HIST_TIME, PRE_HIST_TIME, PREDICT_HIST_TIME, get_labels
from kserve.model_repository import ModelRepository
from kserve.protocol.rest.v1_endpoints import V1Endpoints
from kserve.utils.utils import is_structured_cloudevent
from starlette.requests import Request
from starlette.responses import Response

from steps.runtime.serving.model import ErnieModel


class V1Predict:
    """`POST /v1/models/{name}:predict` for our models, on the shortest path through them.

    kserve's V1 handler runs every request through its generic DataPlane (decode with CloudEvent
    detection, model lookup, `Model.__call__` with its stage timers, encode). For an `ErnieModel`
    and a plain JSON body this handler makes the same calls itself — `preprocess`, `predict`,
    `postprocess`, each timed into kserve's own `request_{pre,post}process_seconds` /
    `request_predict_seconds` histograms, kserve's error types for kserve's handlers to answer —
    and nothing else, which shortens every request (docs/benchmarks.md, serving item 7).
    `application/json` with a charset parameter is JSON here (kserve's handler compares the whole
    header and refuses it). Anything else (unknown or other models, CloudEvents, other content
    types) goes to kserve's handler.
    """

    def __init__(self, repository: ModelRepository, fallback: V1Endpoints) -> None:
        self.repository = repository
        self.fallback = fallback
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

    async def handle(self, request: Request) -> Response:
        name = request.path_params["model_name"]
        model = self.repository.get_model(name)
        content_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if (
            not isinstance(model, ErnieModel)
            or content_type not in ("application/json", "application/cloudevents+json")
            or "ce-specversion" in request.headers
        ):
            return await self.fallback.predict(name, request)
        if not model.ready:
            raise kerrors.ModelNotReady(name)
        body = await request.body()
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise kerrors.InvalidInput(f"Unrecognized request format: {exc}") from exc
        if isinstance(payload, dict) and is_structured_cloudevent(payload):
            return await self.fallback.predict(name, request)
        pre, predict, post = self._stage_timers(name)
        start = time.perf_counter()
        texts = await model.preprocess(payload)
        mid = time.perf_counter()
        pre.observe(mid - start)
        result = await model.predict(texts)
        end = time.perf_counter()
        predict.observe(end - mid)
        result = await model.postprocess(result)
        post.observe(time.perf_counter() - end)
        return Response(orjson.dumps(result), media_type="application/json")
