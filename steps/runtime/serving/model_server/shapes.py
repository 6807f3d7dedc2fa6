"""What a request and an answer look like for each task type, over Open Inference Protocol v1 and v2.

- text-classification: V1 `{"instances": ["text", …]}`; V2 one BYTES input `text` [n]; out `label` BYTES [n] and
  `probabilities` FP32 [n, labels] (label order in the `labels` parameter).
- text-matching: V1 `{"instances": [{"text_a": …, "text_b": …}, …]}`; V2 two BYTES inputs `text_a`, `text_b` [n];
  out as for classification.
- token-classification: V1 texts; V2 input `text`; out `entities` BYTES [n], each the JSON list of that text's
  entities (`type`, `text`, `start`, `end`, `score`; character offsets into the text sent).

The V2 metadata (`GET /v2/models/{name}`) declares the same tensors, so a generic client can discover them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from kserve.protocol.infer_type import InferOutput, InferRequest

from paddle_mlops_core.config.tasks import TEXT_CLASSIFICATION, TEXT_MATCHING, TOKEN_CLASSIFICATION
from steps.runtime.serving.model_server.inputs import PAIR_KEYS, Limits, v1_pairs, v1_texts, v2_pairs, v2_texts

TEXT_TENSOR = "text"
LABEL_TENSOR = "label"
PROBABILITIES_TENSOR = "probabilities"
ENTITIES_TENSOR = "entities"


def _bytes(name: str) -> dict[str, Any]:
    return {"name": name, "datatype": "BYTES", "shape": [-1]}


@dataclass(frozen=True)
class Shape:
    """One task type's request and answer shapes."""

    task_type: str

    def v1_instances(self, body: Any, limits: Limits) -> list[Any]:
        return v1_pairs(body, limits) if self.task_type == TEXT_MATCHING else v1_texts(body, limits)

    def v2_instances(self, request: InferRequest, limits: Limits) -> list[Any]:
        return v2_pairs(request, limits) if self.task_type == TEXT_MATCHING else v2_texts(request, limits)

    def input_types(self) -> list[dict[str, Any]]:
        return [_bytes(k) for k in PAIR_KEYS] if self.task_type == TEXT_MATCHING else [_bytes(TEXT_TENSOR)]

    def output_types(self, labels: dict[int, str] | None) -> list[dict[str, Any]]:
        if self.task_type == TOKEN_CLASSIFICATION:
            return [_bytes(ENTITIES_TENSOR)]
        width = len(labels) if labels else -1
        return [_bytes(LABEL_TENSOR), {"name": PROBABILITIES_TENSOR, "datatype": "FP32", "shape": [-1, width]}]

    def v2_outputs(self, results: list[dict[str, Any]]) -> list[InferOutput]:
        if self.task_type == TOKEN_CLASSIFICATION:
            rows = [json.dumps(r["entities"], ensure_ascii=False) for r in results]
            out = InferOutput(ENTITIES_TENSOR, [len(rows)], "BYTES", rows)
            out.parameters = {"content_type": "application/json"}
            return [out]
        labels = list(results[0]["probabilities"]) if results else []
        probs = np.array([[r["probabilities"][lab] for lab in labels] for r in results], dtype=np.float32)
        label_out = InferOutput(LABEL_TENSOR, [len(results)], "BYTES", [r["label"] for r in results])
        prob_out = InferOutput(PROBABILITIES_TENSOR, list(probs.shape), "FP32", probs.flatten().tolist())
        prob_out.parameters = {"labels": json.dumps(labels, ensure_ascii=False)}
        return [label_out, prob_out]


SHAPES = {t: Shape(t) for t in (TEXT_CLASSIFICATION, TEXT_MATCHING, TOKEN_CLASSIFICATION)}
