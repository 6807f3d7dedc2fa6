"""Scoring an exported model on a prepared test split: its answers, latency percentiles and the task's report, as
evaluate (train-deploy) and validate (rollout) both do it. The model answers the test instances the way the
server does (encoding, windows, decoding), so the score is the score of what clients get."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.data import baselines, tasks
from steps.runtime.data.baselines import comparison
from steps.runtime.runner import StepError

log = logging.getLogger("steps.evaluation")


def predict_timed(model: Any, instances: Sequence[Any], batch_size: int) -> tuple[list[dict], dict[str, float]]:
    """Answers and latency percentiles (encoding + inference + decoding, as the server does it)."""
    answers: list[dict] = []
    batch_ms: list[float] = []
    example_ms: list[float] = []
    for start in range(0, len(instances), batch_size):
        chunk = instances[start : start + batch_size]
        t0 = time.perf_counter()
        answers.extend(model.predict(chunk))
        elapsed = (time.perf_counter() - t0) * 1000
        batch_ms.append(elapsed)
        example_ms.append(elapsed / len(chunk))
    latency = {
        "batch_size": batch_size,
        "batch_p50_ms": float(np.percentile(batch_ms, 50)),
        "batch_p99_ms": float(np.percentile(batch_ms, 99)),
        "example_p50_ms": float(np.percentile(example_ms, 50)),
        "example_p99_ms": float(np.percentile(example_ms, 99)),
    }
    return answers, latency


def _check_task(cfg: PipelineConfig, model: Any, rows: list[dict[str, Any]]) -> None:
    if model.task_type != cfg.model.task:
        raise StepError(
            f"the model in {model.model_dir} is a {model.task_type} model; task '{cfg.task}' is {cfg.model.task}. "
            "Data and model are from different tasks."
        )
    if "label" in model.task.row_keys:
        unknown = sorted({int(r["label"]) for r in rows} - set(model.labels))
        if unknown:
            raise StepError(
                f"test.jsonl has labels {unknown} the model does not know; data and model are from different runs."
            )


@dataclass
class Scored:
    """A model's test report, its answers to the test rows (what the baseline comparison pairs) and its MLflow run."""

    metrics: dict[str, Any]
    run_id: str | None
    rows: list[dict[str, Any]]
    answers: list[dict[str, Any]]
    labels: dict[int, str]


def evaluate(cfg: PipelineConfig, model_dir: Path, data_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The test report (the task's metrics, per-class or per-type scores, latency) and the model's MLflow run."""
    scored = score(cfg, model_dir, data_dir)
    return scored.metrics, scored.run_id


def with_baseline(cfg: PipelineConfig, scored: Scored, data_dir: Path) -> Scored:
    """`metrics["baseline"]`: the cheap baseline on the same splits beside the model, with the difference, its
    interval and the paired test (steps/runtime/data/baselines/); nothing under `gate.baseline: off`."""
    if cfg.gate.baseline == "off":
        return scored
    fitted = baselines.fit(cfg, data_dir)
    figures = comparison.compare(cfg, scored.rows, scored.answers, fitted, scored.labels)
    log.info("%s", comparison.summary_line(figures))
    scored.metrics["baseline"] = figures
    return scored


def score(cfg: PipelineConfig, model_dir: Path, data_dir: Path) -> Scored:
    """`evaluate`'s report with the answers it was computed from."""
    from steps.runtime.weights.ernie import ExportedModel  # paddle: loaded only when a model is opened

    task = tasks.for_config(cfg)
    rows = task.read_rows(data_dir / "test.jsonl")
    if not rows:
        raise StepError(f"{data_dir / 'test.jsonl'} is empty; rerun prepare-data with more data.")
    model = ExportedModel(model_dir, cpu_threads=cfg.serving.cpu_threads, use_gpu=cfg.serving.use_gpu)
    _check_task(cfg, model, rows)
    answers, latency = predict_timed(model, [task.instance(r) for r in rows], cfg.serving.max_batch_size)
    metrics = task.scores(rows, answers, model.labels)
    metrics |= {"task": cfg.task, "task_type": cfg.model.task, "examples": len(rows), "latency": latency}
    metrics["engine"] = {"served": model.engine_name, "fallback": model.fallback}
    training_file = model_dir / "training.json"
    training = json.loads(training_file.read_text()) if training_file.is_file() else {}
    return Scored(metrics, training.get("mlflow_run_id"), rows, answers, model.labels)
