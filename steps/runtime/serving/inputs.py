"""Input checks: the texts of a V1 or V2 inference request, within the configured safety limits.

Every check raises kserve's `InvalidInput` with a message saying what to send instead, which
kserve's error handler answers with 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kserve import errors as kerrors
from kserve.protocol.infer_type import InferRequest

from paddle_mlops.config.models import ServingConfig


@dataclass(frozen=True)
class Limits:
    """Input safety limits, from `serving.*` in the pipeline config."""

    max_request_bytes: int = 1_000_000
    max_instances: int = 64
    max_text_chars: int = 512

    @classmethod
    def from_config(cls, cfg: ServingConfig) -> Limits:
        return cls(cfg.max_request_bytes, cfg.max_instances, cfg.max_text_chars)


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
