"""The predictor: `ErnieModel`, a `kserve.Model` over Paddle Inference with dynamic batching.

It speaks Open Inference Protocol v1 (`{"instances": [...]}`) and v2 (one BYTES tensor), checks
its inputs against `serving.*` limits and hands the texts to its `DynamicBatcher`. Its V2 metadata
(`GET /v2/models/{name}`) declares that input and the two outputs, so a generic OIP client can discover
what to send, and the published version it serves.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import kserve
import numpy as np
from kserve import errors as kerrors
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

from paddle_mlops.config.models import ServingConfig
from steps.runtime import openmp
from steps.runtime.serving.batcher import DynamicBatcher
from steps.runtime.serving.inputs import Limits, v1_texts, v2_texts

log = logging.getLogger("steps.serving")


# The V2 tensors (Open Inference Protocol model metadata): one BYTES text per row in, a label and the
# probability of every label (in label-id order, named by the `labels` parameter of the response) out.
INPUT_TENSOR = "text"
LABEL_TENSOR = "label"
PROBABILITIES_TENSOR = "probabilities"
# OIP's `platform` names framework and format; Paddle Inference over a `jit.save` export.
PLATFORM = "paddle_inference"


class Classifier(Protocol):
    def predict(self, texts: list[str]) -> list[dict[str, Any]]: ...


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
        self.version = published_version(model_uri)
        self.platform = PLATFORM
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

    def get_input_types(self) -> list[dict[str, Any]]:
        """OIP metadata of the input: strings, one per row (`[n]`; `[n, 1]` is accepted too)."""
        return [{"name": INPUT_TENSOR, "datatype": "BYTES", "shape": [-1]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        """OIP metadata of the outputs: the label per row and the probabilities `[n, number of labels]`."""
        labels = getattr(self.classifier, "labels", None)  # the export's label map, once loaded
        return [
            {"name": LABEL_TENSOR, "datatype": "BYTES", "shape": [-1]},
            {"name": PROBABILITIES_TENSOR, "datatype": "FP32", "shape": [-1, len(labels) if labels else -1]},
        ]

    def _pin_openmp_spin(self) -> None:
        # Intel OpenMP drops its spin-wait to 0 once the process has more OpenMP threads than
        # CPUs (the loop thread's and the model thread's teams do, on a small node), and then every
        # parallel region inside an inference wakes its workers afresh, which slows batches
        # (docs/benchmarks.md, serving item 8). Set explicitly, the setting holds.
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
        label_out = InferOutput(LABEL_TENSOR, [len(results)], "BYTES", [r["label"] for r in results])
        prob_out = InferOutput(PROBABILITIES_TENSOR, list(probs.shape), "FP32", probs.flatten().tolist())
        prob_out.parameters = {"labels": json.dumps(labels, ensure_ascii=False)}
        return InferResponse(
            response_id=request.id or "",
            model_name=self.name,
            infer_outputs=[label_out, prob_out],
        )
