"""The predictor: `ErnieModel`, a `kserve.Model` over Paddle Inference with dynamic batching.

It speaks Open Inference Protocol v1 (`{"instances": [...]}`) and v2 in its task's shapes (shapes.py: texts, or
text pairs; labels with probabilities, or entities), checks its inputs against `serving.*` limits and hands the
instances to its `DynamicBatcher`. Its V2 metadata (`GET /v2/models/{name}`) declares those tensors, so a
generic OIP client can discover what to send, and the published version it serves.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import kserve
from kserve import errors as kerrors
from kserve.model_repository import ModelRepository
from kserve.protocol.infer_type import InferRequest, InferResponse
from starlette.routing import get_route_path
from starlette.types import Scope

from paddle_mlops_core.config.serving import ServingConfig
from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION
from steps.runtime.serving import openmp
from steps.runtime.serving.model_server.batcher import DynamicBatcher
from steps.runtime.serving.model_server.inputs import Limits
from steps.runtime.serving.model_server.metrics import ENGINE
from steps.runtime.serving.model_server.shapes import SHAPES, Shape
from steps.runtime.storage import objectstore

log = logging.getLogger("steps.serving")


# OIP's `platform` names framework and format; Paddle Inference over a `jit.save` export.
PLATFORM = "paddle_inference"


class Classifier(Protocol):
    """What the predictor runs: answers for instances (ernie.ExportedModel; tests pass fakes). Its `task_type`
    (default text-classification) picks the request and answer shapes."""

    def predict(self, instances: list[Any]) -> list[dict[str, Any]]: ...


def published_version(model_uri: str | None) -> str | None:
    """The version segment of a published model URI (`<store>/<model>/<version>`), None for anything else."""
    if not model_uri:
        return None
    parts = model_uri.rstrip("/").rsplit("/", 2)
    return parts[2] if len(parts) == 3 and all(parts) and not parts[0].endswith(":") else None


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
    return Path(objectstore.fetch(model_uri, Path(tempfile.mkdtemp(prefix="model-")), endpoint_url=endpoint_url))


def default_classifier(model_dir: Path, cfg: ServingConfig) -> Classifier:
    from steps.runtime.weights.ernie import ExportedModel  # paddle: loaded only when a model is opened

    return ExportedModel(model_dir, cpu_threads=cfg.cpu_threads, use_gpu=cfg.use_gpu)


class ErnieModel(kserve.Model):
    """An exported ERNIE model of any task type over Paddle Inference, speaking Open Inference Protocol v1 and v2."""

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
        self.version = published_version(model_uri)
        self.platform = PLATFORM
        self.cfg = cfg
        self.limits = Limits.from_config(cfg)
        self.model_uri = model_uri
        self.model_dir = model_dir
        self.endpoint_url = endpoint_url
        self._factory = classifier_factory
        self.classifier: Classifier | None = None
        self.shape: Shape = SHAPES[TEXT_CLASSIFICATION]  # the loaded model's task decides
        self.batcher = DynamicBatcher(
            self._run_batch, cfg.max_batch_size, cfg.max_wait_ms, cfg.inline_lone_requests, self._pin_openmp_spin
        )

    def load(self) -> bool:
        directory = resolve_model_dir(self.model_uri, self.model_dir, self.endpoint_url)
        self.classifier = self._factory(directory, self.cfg)
        self.shape = SHAPES[getattr(self.classifier, "task_type", TEXT_CLASSIFICATION)]
        engine = getattr(self.classifier, "engine_name", None)
        if engine:
            self.platform = self.classifier.platform  # type: ignore[attr-defined]
            precision = self.classifier.precision  # type: ignore[attr-defined]
            fallback = "true" if getattr(self.classifier, "fallback", "") else "false"
            ENGINE.labels(model=self.name, engine=engine, precision=precision, fallback=fallback).set(1)
        self.ready = True
        return self.ready

    def get_input_types(self) -> list[dict[str, Any]]:
        """OIP metadata of the inputs: one string per row (`[n]`; `[n, 1]` is accepted too), or two for pairs."""
        return self.shape.input_types()

    def get_output_types(self) -> list[dict[str, Any]]:
        """OIP metadata of the outputs: label and probabilities `[n, number of labels]`, or entities."""
        return self.shape.output_types(getattr(self.classifier, "labels", None))

    def _pin_openmp_spin(self) -> None:
        # Intel OpenMP drops its spin-wait to 0 once the process has more OpenMP threads than
        # CPUs (the loop thread's and the model thread's teams do, on a small node), and then every
        # parallel region inside an inference wakes its workers afresh, which slows batches
        # (docs/benchmarks.md, serving item 8). Set explicitly, the setting holds.
        if self.cfg.openmp_spin_ms is not None:
            openmp.set_blocktime(self.cfg.openmp_spin_ms)

    def _run_batch(self, instances: list[Any]) -> list[dict[str, Any]]:
        assert self.classifier is not None, "load() must run before predictions"
        return self.classifier.predict(instances)

    async def preprocess(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        if isinstance(payload, InferRequest):
            return payload
        if isinstance(payload, (bytes, str)):
            raise kerrors.InvalidInput("request body must be JSON; send it with Content-Type: application/json")
        return self.shape.v1_instances(payload, self.limits)

    async def predict(self, payload: Any, headers: dict[str, str] | None = None) -> Any:
        if isinstance(payload, InferRequest):
            results = await self._predict(self.shape.v2_instances(payload, self.limits))
            return InferResponse(
                response_id=payload.id or "", model_name=self.name, infer_outputs=self.shape.v2_outputs(results)
            )
        results = await self._predict(payload)
        return {"predictions": results}

    async def _predict(self, instances: list[Any]) -> list[dict[str, Any]]:
        try:
            return await self.batcher.submit(instances)
        except kerrors.InvalidInput:
            raise
        except Exception as exc:
            log.exception("inference failed")
            raise kerrors.InferenceError(f"inference failed: {type(exc).__name__}: {exc}") from exc


def routed_to_ours(
    repository: ModelRepository, path: re.Pattern[str], scope: Scope
) -> tuple[re.Match[str], ErnieModel] | None:
    """The match of `path` (a pattern with a `name` group) on an HTTP request's route path, and the model of ours it
    names; None for another request, path or model (kserve's own models included)."""
    match = path.fullmatch(get_route_path(scope)) if scope["type"] == "http" else None
    model = repository.get_model(match["name"]) if match else None
    return (match, model) if match and isinstance(model, ErnieModel) else None
