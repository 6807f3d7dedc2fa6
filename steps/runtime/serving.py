"""The ERNIE model server: a `kserve.Model` predictor with dynamic batching, input checks and metrics.

The REST surface is KServe's own (Open Inference Protocol v1 and v2 endpoints, health, `/metrics`),
assembled with kserve's public building blocks (`register_v1_endpoints`, `register_v2_endpoints`,
its error handlers, `DataPlane`). We build the FastAPI app ourselves rather than via
`kserve.ModelServer` because kserve 0.21 hard-codes `host="0.0.0.0"` in `RESTServer` and shares one
process-global app: a local server must bind loopback only, and tests need a fresh app each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

# kserve.model_server parses sys.argv when it is imported (parse_known_args at module level), and
# argparse's prefix matching reads our `--config FILE` as its `--configure_logging`: hide ours.
_argv, sys.argv = sys.argv, sys.argv[:1]
try:
    import kserve
    import numpy as np
    import orjson
    import uvicorn
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, ORJSONResponse
    from kserve import errors as kerrors
    from kserve.metrics import POST_HIST_TIME, PRE_HIST_TIME, PREDICT_HIST_TIME, get_labels
    from kserve.model_repository import ModelRepository
    from kserve.protocol.dataplane import DataPlane
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
    from kserve.protocol.model_repository_extension import ModelRepositoryExtension
    from kserve.protocol.rest.server import metrics_handler
    from kserve.protocol.rest.v1_endpoints import V1Endpoints, register_v1_endpoints
    from kserve.protocol.rest.v2_endpoints import register_v2_endpoints
    from kserve.utils.utils import is_structured_cloudevent
    from prometheus_client import Counter, Histogram
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from paddle_mlops.config.models import ServingConfig
    from paddle_mlops.contracts import (
        SERVING_BATCH_SIZE,
        SERVING_ERRORS_TOTAL,
        SERVING_REQUEST_LATENCY_SECONDS,
        SERVING_REQUESTS_TOTAL,
    )
    from steps.runtime import openmp
finally:
    sys.argv = _argv

log = logging.getLogger("steps.serving")
T = TypeVar("T")

# Module-level: prometheus_client's default registry is what kserve's `/metrics` handler exports,
# and a collector may be registered there only once per process.
REQUESTS = Counter(SERVING_REQUESTS_TOTAL, "Inference requests answered", ["protocol", "code"])
LATENCY = Histogram(
    SERVING_REQUEST_LATENCY_SECONDS,
    "Inference request latency, receive to response",
    ["protocol"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
BATCH_SIZE = Histogram(
    SERVING_BATCH_SIZE,
    "Texts per model call after dynamic batching",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
ERRORS = Counter(SERVING_ERRORS_TOTAL, "Requests that failed, by reason", ["reason"])


class Classifier(Protocol):
    def predict(self, texts: list[str]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Limits:
    """Input safety limits, from `serving.*` in the pipeline config."""

    max_request_bytes: int = 1_000_000
    max_instances: int = 64
    max_text_chars: int = 512

    @classmethod
    def from_config(cls, cfg: ServingConfig) -> Limits:
        return cls(cfg.max_request_bytes, cfg.max_instances, cfg.max_text_chars)


# --------------------------------------------------------------------------- input checks


def check_texts(texts: Any, limits: Limits, where: str) -> list[str]:
    """Return `texts` if it is a non-empty list of strings within the limits; else InvalidInput."""
    if not isinstance(texts, list):
        raise kerrors.InvalidInput(f"{where} must be a list of strings, got {type(texts).__name__}")
    if not texts:
        raise kerrors.InvalidInput(f"{where} is empty; send at least one text")
    if len(texts) > limits.max_instances:
        raise kerrors.InvalidInput(
            f"{where} has {len(texts)} items; at most {limits.max_instances} per request (split the request)"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise kerrors.InvalidInput(f"{where}[{i}] must be a string, got {type(text).__name__}")
        if len(text) > limits.max_text_chars:
            raise kerrors.InvalidInput(
                f"{where}[{i}] has {len(text)} characters; at most {limits.max_text_chars} allowed"
            )
    return texts


def v1_texts(body: Any, limits: Limits) -> list[str]:
    """`{"instances": ["text", ...]}` -> the texts."""
    if not isinstance(body, dict):
        raise kerrors.InvalidInput(
            'request body must be a JSON object {"instances": ["text", ...]} with Content-Type: application/json'
        )
    if "instances" not in body:
        raise kerrors.InvalidInput('request body has no "instances" key; send {"instances": ["text", ...]}')
    return check_texts(body["instances"], limits, "instances")


def v2_texts(request: InferRequest, limits: Limits) -> list[str]:
    """One BYTES input tensor of shape [n] or [n, 1] holding strings -> the texts."""
    if len(request.inputs) != 1:
        raise kerrors.InvalidInput(f"expected exactly one input tensor (BYTES, shape [n]), got {len(request.inputs)}")
    tensor = request.inputs[0]
    if tensor.datatype != "BYTES":
        raise kerrors.InvalidInput(f"input '{tensor.name}' must have datatype BYTES, got {tensor.datatype}")
    data = tensor.data
    if not isinstance(data, list):
        raise kerrors.InvalidInput(f"input '{tensor.name}' data must be a JSON list of strings")
    shape = list(tensor.shape or [])
    if shape not in ([len(data)], [len(data), 1]):
        raise kerrors.InvalidInput(f"input '{tensor.name}' shape {shape} does not match {len(data)} strings; use [n]")
    return check_texts(data, limits, f"inputs['{tensor.name}'].data")


# --------------------------------------------------------------------------- dynamic batching


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
    an idle server (`inline_lone`) runs on the loop thread, which is quicker by two thread wake-ups.
    Only the worker task calls the model, so the predictor never sees two calls at once.
    """

    def __init__(
        self,
        run_batch: Callable[[list[str]], list[dict[str, Any]]],
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
        self._queue: asyncio.Queue[tuple[list[str], asyncio.Future[list[dict[str, Any]]]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expected = 1  # texts in the previous batch: how many to wait for
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

    def _ensure_worker(self) -> asyncio.Queue[tuple[list[str], asyncio.Future[list[dict[str, Any]]]]]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            if self._loop is not loop and self._inline_lone and self._thread_initializer is not None:
                self._thread_initializer()
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._work(self._queue))
        assert self._queue is not None
        return self._queue

    async def submit(self, texts: list[str]) -> list[dict[str, Any]]:
        future: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        await self._ensure_worker().put((texts, future))
        return await future

    async def _work(self, queue: asyncio.Queue[tuple[list[str], asyncio.Future[list[dict[str, Any]]]]]) -> None:
        carry: tuple[list[str], asyncio.Future[list[dict[str, Any]]]] | None = None
        loop = asyncio.get_running_loop()
        while True:
            first = carry or await queue.get()
            carry = None
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
                    item = queue.get_nowait() if remaining <= 0 or not queue.empty() else await asyncio.wait_for(queue.get(), remaining)
                except (TimeoutError, asyncio.QueueEmpty):
                    break
                if size + len(item[0]) > self._max_batch:
                    carry = item
                    break
                batch.append(item)
                size += len(item[0])
                deadline = min(loop.time() + self._max_wait, cap)
            # A lone request on an idle server runs on the loop thread itself: two thread wake-ups
            # fewer, which measured ~1.5 ms (3 %) of batch-1 latency on 2 CPUs while Paddle's
            # OpenMP workers spin. Anything batched runs on the model thread (loop stays free).
            inline = self._inline_lone and size == 1 and target == 1 and queue.empty()
            self._expected = size
            await self._run(batch, size, inline)

    async def _run(self, batch: list[tuple[list[str], asyncio.Future[list[dict[str, Any]]]]], size: int, inline: bool) -> None:
        texts = [t for item, _ in batch for t in item]
        BATCH_SIZE.observe(size)
        try:
            if inline:
                results = self._run_batch(texts)
            else:
                results = await asyncio.get_running_loop().run_in_executor(self._executor, self._run_batch, texts)
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


# --------------------------------------------------------------------------- the predictor


def resolve_model_dir(model_uri: str | None, model_dir: str | None, endpoint_url: str | None) -> Path:
    """A local export directory for the model: `model_dir` as is, or `model_uri` fetched and verified.

    A local `model_uri` without `manifest.json` (a dev export, not a published version) is used in
    place; anything else goes through `objectstore.fetch`, which checks every file against the manifest.
    """
    if model_dir:
        return Path(model_dir)
    if not model_uri:
        raise ValueError("either a model URI or a model directory is required")
    local = Path(model_uri)
    if "://" not in model_uri and local.is_dir() and not (local / "manifest.json").exists():
        return local
    from steps.runtime import objectstore

    return Path(objectstore.fetch(model_uri, Path(tempfile.mkdtemp(prefix="model-")), endpoint_url=endpoint_url))


def default_classifier(model_dir: Path, cfg: ServingConfig) -> Classifier:
    from steps.runtime.ernie import ExportedClassifier

    return ExportedClassifier(model_dir, cpu_threads=cfg.cpu_threads, use_gpu=cfg.use_gpu)


class ErnieModel(kserve.Model):
    """ERNIE sentiment classifier over Paddle Inference, speaking Open Inference Protocol v1 and v2."""

    def __init__(
        self,
        name: str,
        cfg: ServingConfig,
        model_uri: str | None = None,
        model_dir: str | None = None,
        endpoint_url: str | None = None,
        classifier_factory: Callable[[Path, ServingConfig], Classifier] = default_classifier,
    ):
        super().__init__(name)
        self.cfg = cfg
        self.limits = Limits.from_config(cfg)
        self.model_uri = model_uri
        self.model_dir = model_dir
        self.endpoint_url = endpoint_url
        self._factory = classifier_factory
        self.classifier: Classifier | None = None
        self.batcher = DynamicBatcher(
            self._run_batch, cfg.max_batch_size, cfg.max_wait_ms, cfg.inline_lone_requests, self._pin_openmp_spin
        )

    def load(self) -> bool:
        directory = resolve_model_dir(self.model_uri, self.model_dir, self.endpoint_url)
        self.classifier = self._factory(directory, self.cfg)
        self.ready = True
        return self.ready

    def _pin_openmp_spin(self) -> None:
        # Intel OpenMP drops its spin-wait to 0 once the process has more OpenMP threads than
        # CPUs (the loop thread's and the model thread's teams do, on a small node), and then every
        # parallel region inside an inference wakes its workers afresh: batches of 16 ran 5 %
        # slower at 0 than at the default 200 ms. Set explicitly, the setting holds.
        if self.cfg.openmp_spin_ms is not None:
            openmp.set_blocktime(self.cfg.openmp_spin_ms)

    def _run_batch(self, texts: list[str]) -> list[dict[str, Any]]:
        assert self.classifier is not None, "load() must run before predictions"
        return self.classifier.predict(texts)

    async def preprocess(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        if isinstance(payload, InferRequest):
            return payload
        if isinstance(payload, (bytes, str)):
            raise kerrors.InvalidInput("request body must be JSON; send it with Content-Type: application/json")
        return v1_texts(payload, self.limits)

    async def predict(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        if isinstance(payload, InferRequest):
            texts = v2_texts(payload, self.limits)
            results = await self._predict_texts(texts)
            return self._v2_response(payload, results)
        results = await self._predict_texts(payload)
        return {"predictions": results}

    async def _predict_texts(self, texts: list[str]) -> list[dict[str, Any]]:
        try:
            return await self.batcher.submit(texts)
        except kerrors.InvalidInput:
            raise
        except Exception as exc:
            log.exception("inference failed")
            raise kerrors.InferenceError(f"inference failed: {type(exc).__name__}: {exc}") from exc

    def _v2_response(self, request: InferRequest, results: list[dict[str, Any]]) -> InferResponse:
        labels = list(results[0]["probabilities"]) if results else []
        probs = np.array([[r["probabilities"][lab] for lab in labels] for r in results], dtype=np.float32)
        label_out = InferOutput("label", [len(results)], "BYTES", [r["label"] for r in results])
        prob_out = InferOutput("probabilities", list(probs.shape), "FP32", probs.flatten().tolist())
        prob_out.parameters = {"labels": json.dumps(labels, ensure_ascii=False)}
        return InferResponse(
            response_id=request.id or "",
            model_name=self.name,
            infer_outputs=[label_out, prob_out],
        )


# --------------------------------------------------------------------------- the app


class V1Predict:
    """`POST /v1/models/{name}:predict` for our models, on the shortest path through them.

    kserve's V1 handler runs every request through its generic DataPlane (decode with CloudEvent
    detection, model lookup, `Model.__call__` with its stage timers, encode). For an `ErnieModel`
    and a plain JSON body this handler makes the same calls itself — `preprocess`, `predict`,
    `postprocess`, each timed into kserve's own `request_{pre,post}process_seconds` /
    `request_predict_seconds` histograms, kserve's error types for kserve's handlers to answer —
    and nothing else: 75 instead of 120-160 us per request on a warm CPU, and 0.67 instead of
    0.87 ms on a CPU whose caches the model has just flushed. `application/json` with a charset
    parameter is JSON here (kserve's handler compares the whole header and refuses it). Anything
    else (unknown or other models, CloudEvents, other content types) goes to kserve's handler.
    """

    def __init__(self, repository: ModelRepository, fallback: V1Endpoints) -> None:
        self.repository = repository
        self.fallback = fallback
        self._timers: dict[str, tuple[Any, Any, Any]] = {}

    def _stage_timers(self, name: str) -> tuple[Any, Any, Any]:
        if name not in self._timers:
            labels = get_labels(name)
            self._timers[name] = (PRE_HIST_TIME.labels(**labels), PREDICT_HIST_TIME.labels(**labels), POST_HIST_TIME.labels(**labels))
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


def _protocol_of(path: str) -> str | None:
    if path.startswith("/v1/models/") and path.endswith(":predict"):
        return "v1"
    if path.startswith("/v2/models/") and path.endswith("/infer"):
        return "v2"
    return None


_REASONS = {400: "invalid_input", 404: "model_not_found", 413: "body_too_large", 422: "invalid_input", 503: "not_ready"}


class GuardMiddleware:
    """Reject oversized bodies before anything parses them, and count every inference request.

    Both the declared Content-Length and the bytes actually received are checked, so a chunked or
    lying client cannot push more than `max_request_bytes` into the JSON parser.
    """

    def __init__(self, app: Any, max_request_bytes: int):
        self.app = app
        self.max_bytes = max_request_bytes

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        protocol = _protocol_of(scope.get("path", ""))
        start = time.perf_counter()
        status: dict[str, int] = {}

        async def send_and_record(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        body = await self._read_body(scope, receive)
        if body is None:
            await _json_response(send_and_record, 413, f"request body exceeds {self.max_bytes} bytes; send fewer or shorter texts")
        else:
            await self.app(scope, _replay(body, receive), send_and_record)
        if protocol is not None:
            code = status.get("code", 500)
            REQUESTS.labels(protocol=protocol, code=str(code)).inc()
            LATENCY.labels(protocol=protocol).observe(time.perf_counter() - start)
            if code >= 400:
                ERRORS.labels(reason=_REASONS.get(code, "inference_error" if code >= 500 else "bad_request")).inc()

    async def _read_body(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]]) -> bytes | None:
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    if int(value) > self.max_bytes:
                        return None
                except ValueError:
                    return None
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Callable[[], Awaitable[dict[str, Any]]]) -> Callable[[], Awaitable[dict[str, Any]]]:
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _json_response(send: Any, status: int, message: str) -> None:
    payload = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _validation_error(_request: Any, exc: RequestValidationError) -> JSONResponse:
    # FastAPI's default answer is {"detail": [...]}; keep one error shape, {"error": "..."}, for clients.
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err.get('loc', ()) if p != 'body') or 'body'}: {err.get('msg', '')}"
        for err in exc.errors()[:5]
    )
    return JSONResponse(status_code=422, content={"error": f"invalid inference request: {problems}"})


async def _http_error(_request: Any, exc: HTTPException) -> JSONResponse:
    return JSONResponse(status_code=exc.status_code, content={"error": str(exc.detail)}, headers=exc.headers)


def create_app(models: Sequence[kserve.Model], max_request_bytes: int) -> FastAPI:
    """KServe's REST endpoints for `models` (already loaded) behind the body-size/metrics guard."""
    repository = ModelRepository()
    for model in models:
        repository.update(model)
    dataplane = DataPlane(model_registry=repository)
    extension = ModelRepositoryExtension(model_registry=repository)
    app = FastAPI(title="paddle-mlops model server", docs_url=None, redoc_url=None, default_response_class=ORJSONResponse)
    app.add_api_route("/", dataplane.live)
    app.add_api_route("/metrics", metrics_handler, methods=["GET"])
    register_v1_endpoints(app, dataplane, extension)
    register_v2_endpoints(app, dataplane, extension)
    # The hot path first, as a plain Starlette route: routing stops at the first route and
    # FastAPI's per-request dependency solving is skipped. kserve's route behind it is never
    # reached for POST; V1Predict hands everything but our models' JSON requests to its handler.
    v1_predict = V1Predict(repository, V1Endpoints(dataplane, extension))
    app.router.routes.insert(0, Route("/v1/models/{model_name}:predict", v1_predict.handle, methods=["POST"]))
    for exc_type, handler in (
        (kerrors.InvalidInput, kerrors.invalid_input_handler),
        (kerrors.InferenceError, kerrors.inference_error_handler),
        (kerrors.ModelNotFound, kerrors.model_not_found_handler),
        (kerrors.ModelNotReady, kerrors.model_not_ready_handler),
        (NotImplementedError, kerrors.not_implemented_error_handler),
        (kerrors.ServerNotLive, kerrors.server_not_live_handler),
        (kerrors.ServerNotReady, kerrors.server_not_ready_handler),
        (RequestValidationError, _validation_error),
        (HTTPException, _http_error),
        (Exception, kerrors.generic_exception_handler),
    ):
        app.add_exception_handler(exc_type, handler)
    app.add_middleware(GuardMiddleware, max_request_bytes=max_request_bytes)
    return app


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


def uvicorn_server(app: FastAPI) -> uvicorn.Server:
    """One worker (one predictor, one batcher); httptools and uvloop when installed ("auto")."""
    config = uvicorn.Config(app, log_config=None, timeout_graceful_shutdown=10, access_log=False, http="auto", loop="auto")
    return uvicorn.Server(config)


async def run_server(server: uvicorn.Server, sock: socket.socket, on_started: Callable[[], None] | None = None) -> None:
    """Serve on the running event loop until the server exits; `on_started` once it listens."""
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started and on_started is not None:
        on_started()
    await task


def serve(
    app: FastAPI, sock: socket.socket, on_started: Callable[[], None] | None = None
) -> None:
    """Run `app` under uvicorn on an already bound socket until SIGTERM/SIGINT."""
    server = uvicorn_server(app)
    # uvicorn picks the loop only when it runs the loop itself; we run it, so ask for its choice.
    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(run_server(server, sock, on_started))
