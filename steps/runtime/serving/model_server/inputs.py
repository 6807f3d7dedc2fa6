"""Input checks: the texts (or text pairs) of a V1 or V2 inference request, within the configured safety limits.

Every check raises kserve's `InvalidInput` with a message saying what to send instead, which
kserve's error handler answers with 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kserve import errors as kerrors
from kserve.protocol.infer_type import InferRequest

from paddle_mlops_core.config.serving import ServingConfig


@dataclass(frozen=True)
class Limits:
    """Input safety limits, from `serving.*` in the pipeline config."""

    max_request_bytes: int = 1_000_000
    max_instances: int = 64
    max_text_chars: int = 512

    @classmethod
    def from_config(cls, cfg: ServingConfig) -> Limits:
        return cls(cfg.max_request_bytes, cfg.max_instances, cfg.max_text_chars)


def _check_list(items: Any, limits: Limits, where: str, what: str) -> list[Any]:
    """`items` if it is a non-empty list of at most `max_instances`; else InvalidInput saying what to send."""
    if not isinstance(items, list):
        raise kerrors.InvalidInput(f"{where} must be a list of {what}, got {type(items).__name__}")
    if not items:
        raise kerrors.InvalidInput(f"{where} is empty; send at least one")
    if len(items) > limits.max_instances:
        raise kerrors.InvalidInput(
            f"{where} has {len(items)} items; at most {limits.max_instances} per request (split the request)"
        )
    return items


def check_texts(texts: Any, limits: Limits, where: str) -> list[str]:
    """Return `texts` if it is a non-empty list of strings within the limits; else InvalidInput."""
    for i, text in enumerate(_check_list(texts, limits, where, "strings")):
        check_text(text, limits, f"{where}[{i}]")
    return texts


def check_text(text: Any, limits: Limits, where: str) -> str:
    """`text` if it is a string within `max_text_chars`; else InvalidInput naming `where`."""
    if not isinstance(text, str):
        raise kerrors.InvalidInput(f"{where} must be a string, got {type(text).__name__}")
    if len(text) > limits.max_text_chars:
        raise kerrors.InvalidInput(f"{where} has {len(text)} characters; at most {limits.max_text_chars} allowed")
    return text


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


PAIR_KEYS = ("text_a", "text_b")


def check_pairs(pairs: Any, limits: Limits, where: str) -> list[dict[str, str]]:
    """Return `pairs` if it is a non-empty list of {"text_a", "text_b"} string objects within the limits."""
    for i, pair in enumerate(_check_list(pairs, limits, where, '{"text_a": …, "text_b": …} objects')):
        if not isinstance(pair, dict) or set(pair) != set(PAIR_KEYS):
            raise kerrors.InvalidInput(
                f'{where}[{i}] must be an object with exactly "text_a" and "text_b", got {_shown(pair)}'
            )
        for key in PAIR_KEYS:
            check_text(pair[key], limits, f"{where}[{i}].{key}")
    return pairs


def _shown(value: Any) -> str:
    return type(value).__name__ if not isinstance(value, dict) else "keys " + ", ".join(sorted(map(str, value)))


def v1_pairs(body: Any, limits: Limits) -> list[dict[str, str]]:
    """`{"instances": [{"text_a": …, "text_b": …}, ...]}` -> the pairs."""
    if not isinstance(body, dict) or "instances" not in body:
        raise kerrors.InvalidInput(
            'request body must be a JSON object {"instances": [{"text_a": "…", "text_b": "…"}, ...]}'
        )
    return check_pairs(body["instances"], limits, "instances")


def v2_pairs(request: InferRequest, limits: Limits) -> list[dict[str, str]]:
    """Two BYTES input tensors `text_a` and `text_b`, each of shape [n] (or [n, 1]) -> the pairs."""
    tensors = {t.name: t for t in request.inputs}
    if sorted(tensors) != sorted(PAIR_KEYS) or len(request.inputs) != 2:
        raise kerrors.InvalidInput(
            f"expected two input tensors named text_a and text_b (BYTES, shape [n]), got {sorted(tensors)}"
        )
    columns = {}
    for key in PAIR_KEYS:
        tensor = tensors[key]
        if tensor.datatype != "BYTES" or not isinstance(tensor.data, list):
            raise kerrors.InvalidInput(f"input '{key}' must be BYTES with a JSON list of strings")
        if list(tensor.shape or []) not in ([len(tensor.data)], [len(tensor.data), 1]):
            raise kerrors.InvalidInput(f"input '{key}' shape {tensor.shape} does not match {len(tensor.data)} strings")
        columns[key] = check_texts(tensor.data, limits, f"inputs['{key}'].data")
    count_a, count_b = len(columns["text_a"]), len(columns["text_b"])
    if count_a != count_b:
        raise kerrors.InvalidInput(f"text_a has {count_a} strings and text_b {count_b}; send one of each per pair")
    return [{"text_a": a, "text_b": b} for a, b in zip(columns["text_a"], columns["text_b"], strict=True)]
