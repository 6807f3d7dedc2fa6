"""Open Inference Protocol's versioned paths (`/v2/models/{name}/versions/{version}[/ready|/infer]`) for our models."""

from __future__ import annotations

import re

from kserve.model_repository import ModelRepository
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from steps.runtime.serving.model_server.model import routed_to_ours

_VERSIONED = re.compile(r"/v2/models/(?P<name>[^/]+)/versions/(?P<version>[^/]+)(?P<rest>/ready|/infer)?")


class VersionedPaths:
    """Serve `/v2/models/{name}/versions/{version}[...]` for the one version one of our models serves.

    Our V2 metadata names the published version it serves (`versions`), so a generic OIP client may
    address it by version; kserve 0.21 answers every versioned path 501 ("not supported yet"). For
    one of our models, the version it serves is that model: the request goes on as its unversioned
    path (metadata, readiness, infer: kserve's handlers, metrics and errors as usual). Any other
    version is a 404 that names the version served. Other models' versioned paths go to `app` as they are.
    """

    def __init__(self, app: ASGIApp, repository: ModelRepository) -> None:
        self.app = app
        self.repository = repository

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        routed = routed_to_ours(self.repository, _VERSIONED, scope)
        if routed is None:
            await self.app(scope, receive, send)
            return
        match, model = routed
        if match["version"] != model.version:
            served = f"version {model.version}" if model.version else "an unpublished export (no version)"
            message = f"model {model.name} has no version {match['version']}: it serves {served}"
            await JSONResponse({"error": message}, status_code=404)(scope, receive, send)
            return
        root = scope["path"][: len(scope["path"]) - len(match.string)]  # the root path the route path is under, if any
        path = f"{root}/v2/models/{match['name']}{match['rest'] or ''}"
        await self.app({**scope, "path": path, "raw_path": path.encode()}, receive, send)
