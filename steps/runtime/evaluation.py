"""Scoring an exported model on a prepared test split: predictions, latency percentiles and the classification
report, as evaluate (train-deploy) and validate (rollout) both do it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops.config import PipelineConfig
from steps.runtime import data
from steps.runtime.runner import StepError
from steps.runtime.scoring import classification_report


def predict_timed(classifier: Any, texts: Sequence[str], batch_size: int) -> tuple[list[int], dict[str, float]]:
    """Predictions and latency percentiles (tokenisation + inference, as the server does it)."""
    predictions: list[int] = []
    batch_ms: list[float] = []
    example_ms: list[float] = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        t0 = time.perf_counter()
        logits = classifier.predict_batch_ids(*classifier.encode(chunk))
        elapsed = (time.perf_counter() - t0) * 1000
        predictions.extend(int(i) for i in logits.argmax(axis=-1))
        batch_ms.append(elapsed)
        example_ms.append(elapsed / len(chunk))
    latency = {
        "batch_size": batch_size,
        "batch_p50_ms": float(np.percentile(batch_ms, 50)),
        "batch_p99_ms": float(np.percentile(batch_ms, 99)),
        "example_p50_ms": float(np.percentile(example_ms, 50)),
        "example_p99_ms": float(np.percentile(example_ms, 99)),
    }
    return predictions, latency


def evaluate(cfg: PipelineConfig, model_dir: Path, data_dir: Path) -> tuple[dict[str, Any], str | None]:
    from steps.runtime.ernie import ExportedClassifier

    rows = data.read_split(data_dir / "test.jsonl")
    if not rows:
        raise StepError(f"{data_dir / 'test.jsonl'} is empty; rerun prepare-data with more data.")
    classifier = ExportedClassifier(model_dir, cpu_threads=cfg.serving.cpu_threads, use_gpu=cfg.serving.use_gpu)
    texts, labels = [t for t, _ in rows], [y for _, y in rows]
    unknown = sorted(set(labels) - set(classifier.labels))
    if unknown:
        raise StepError(
            f"test.jsonl has labels {unknown} the model does not know; data and model are from different runs."
        )
    predictions, latency = predict_timed(classifier, texts, cfg.serving.max_batch_size)
    metrics = classification_report(labels, predictions, classifier.labels)
    metrics |= {"examples": len(rows), "latency": latency}
    training_file = model_dir / "training.json"
    training = json.loads(training_file.read_text()) if training_file.is_file() else {}
    return metrics, training.get("mlflow_run_id")
