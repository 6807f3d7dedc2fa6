"""The server's ASGI app: KServe's REST endpoints (FastAPI), our V1 fast path ahead of them and the request guard.

The REST surface is KServe's own (Open Inference Protocol v1 and v2 endpoints, health, `/metrics`),
assembled with kserve's public building blocks (`register_v1_endpoints`, `register_v2_endpoints`,
its error handlers, `DataPlane`). We build the FastAPI app ourselves rather than via
`kserve.ModelServer` because kserve 0.21 hard-codes `host="0.0.0.0"` in `RESTServer` and shares one
process-global app: a local server must bind loopback only, and tests need a fresh app each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import kserve
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, ORJSONResponse
from kserve import errors as kerrors
from kserve.model_repository import ModelRepository
from kserve.protocol.dataplane import DataPlane
from kserve.protocol.model_repository_extension import ModelRepositoryExtension
from kserve.protocol.rest.server import metrics_handler
from kserve.protocol.rest.v1_endpoints import register_v1_endpoints
from kserve.protocol.rest.v2_endpoints import register_v2_endpoints
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from steps.runtime.serving.model_server.guard import GuardMiddleware
from steps.runtime.serving.model_server.v1_predict import V1Predict
from steps.runtime.serving.model_server.versions import VersionedPaths


class ModelDataPlane(DataPlane):
    """kserve's data plane, with the model's versions and platform in its V2 metadata (kserve 0.21 leaves
    `versions` out and `platform` empty; ModelMetadataResponse has both)."""

    async def model_metadata(self, model_name: str) -> dict[str, Any]:
        metadata = await super().model_metadata(model_name)
        model = self.get_model_from_registry(model_name)
        version = getattr(model, "version", None)
        if version:
            metadata["versions"] = [str(version)]
        metadata["platform"] = getattr(model, "platform", "") or ""
        return metadata


async def _validation_error(_request: Any, exc: RequestValidationError) -> JSONResponse:
    # FastAPI's default answer is {"detail": [...]}; keep one error shape, {"error": "..."}, for clients.
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err.get('loc', ()) if p != 'body') or 'body'}: {err.get('msg', '')}"
        for err in exc.errors()[:5]
    )
    return JSONResponse(status_code=422, content={"error": f"invalid inference request: {problems}"})


async def _http_error(_request: Any, exc: HTTPException) -> JSONResponse:
    return JSONResponse(status_code=exc.status_code, content={"error": str(exc.detail)}, headers=exc.headers)


# One error answer per type, for the FastAPI app and the V1 fast path alike.
ERROR_HANDLERS: dict[type[Exception], Callable[[Any, Any], Awaitable[JSONResponse]]] = {
    kerrors.InvalidInput: kerrors.invalid_input_handler,
    kerrors.InferenceError: kerrors.inference_error_handler,
    kerrors.ModelNotFound: kerrors.model_not_found_handler,
    kerrors.ModelNotReady: kerrors.model_not_ready_handler,
    NotImplementedError: kerrors.not_implemented_error_handler,
    kerrors.ServerNotLive: kerrors.server_not_live_handler,
    kerrors.ServerNotReady: kerrors.server_not_ready_handler,
    RequestValidationError: _validation_error,
    HTTPException: _http_error,
    Exception: kerrors.generic_exception_handler,
}


def create_app(models: Sequence[kserve.Model], max_request_bytes: int) -> ASGIApp:
    """KServe's REST endpoints for `models` (already loaded), our V1 fast path ahead of them, all behind the
    body-size/metrics guard."""
    repository = ModelRepository()
    for model in models:
        repository.update(model)
    dataplane = ModelDataPlane(model_registry=repository)
    extension = ModelRepositoryExtension(model_registry=repository)
    app = FastAPI(
        title="paddle-mlops model server", docs_url=None, redoc_url=None, default_response_class=ORJSONResponse
    )
    app.add_api_route("/", dataplane.live)
    app.add_api_route("/metrics", metrics_handler, methods=["GET"])
    register_v1_endpoints(app, dataplane, extension)
    register_v2_endpoints(app, dataplane, extension)
    for exc_type, handler in ERROR_HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
    # The hot path ahead of FastAPI: our models' plain JSON V1 requests skip its middleware, routing
    # and request objects; V1Predict hands everything else on, where kserve's routes answer (our
    # models' versioned V2 paths as their unversioned ones).
    served = VersionedPaths(app, repository)
    return GuardMiddleware(V1Predict(served, repository, ERROR_HANDLERS), max_request_bytes=max_request_bytes)
