"""evaluate: score the exported model on the held-out test split and decide the promotion gate.

The gate passes only when the configured metric reaches `gate.threshold` AND is no worse than the
current champion (MLflow registered-model alias `champion`) by more than `gate.tolerance`.
A failed gate is a result, not an error: the step exits 0 and writes `false`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a script path: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from paddle_mlops.config import PipelineConfig  # noqa: E402
from paddle_mlops.contracts import CHAMPION  # noqa: E402
from steps.runtime import data, runner, s3, workspace  # noqa: E402
from steps.runtime.runner import StepError  # noqa: E402
from steps.runtime.scoring import classification_report  # noqa: E402

log = logging.getLogger("steps.evaluate")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (local path or s3:// URI)")


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


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    reason: str
    metric: str
    value: float
    threshold: float
    tolerance: float
    champion_version: str | None = None
    champion_value: float | None = None


def champion(client: Any, registered_model: str, metric: str) -> tuple[str, float] | None:
    """(version, test metric) of the model version aliased `champion`, or None when there is none."""
    from mlflow.exceptions import MlflowException

    try:
        version = client.get_model_version_by_alias(registered_model, CHAMPION)
    except MlflowException:
        return None  # no registered model yet, or no champion alias: the first model has nothing to beat
    key = f"test_{metric}"
    if key in (version.tags or {}):
        return str(version.version), float(version.tags[key])
    if version.run_id:
        value = client.get_run(version.run_id).data.metrics.get(key)
        if value is not None:
            return str(version.version), float(value)
    log.warning("champion v%s has no %s (tag or run metric); comparing with the threshold only", version.version, key)
    return None


def decide(
    value: float, metric: str, threshold: float, tolerance: float, champ: tuple[str, float] | None
) -> GateDecision:
    """Pass iff value >= threshold and value >= champion - tolerance."""
    ok_threshold = value >= threshold
    rel = "≥" if ok_threshold else "<"
    reason = f"{metric} {value:.4f} {rel} threshold {threshold:.4f}"
    ok_champion = True
    if champ is not None:
        version, champ_value = champ
        ok_champion = value >= champ_value - tolerance
        rel = "≥" if ok_champion else "<"
        reason += f" and {rel} champion v{version} {champ_value:.4f} − {tolerance:.4f}"
    else:
        reason += " (no champion to compare with)"
    return GateDecision(
        passed=ok_threshold and ok_champion,
        reason=reason,
        metric=metric,
        value=value,
        threshold=threshold,
        tolerance=tolerance,
        champion_version=champ[0] if champ else None,
        champion_value=champ[1] if champ else None,
    )


def log_to_mlflow(client: Any, run_id: str, metrics: dict[str, Any], gate: GateDecision, metrics_file: Path) -> None:
    """Test metrics and the gate decision go into the training run, so one run tells the whole story."""
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    values = {"test_accuracy": metrics["accuracy"], "test_macro_f1": metrics["macro_f1"]}
    values |= {f"test_latency_{k}": v for k, v in metrics["latency"].items() if k.endswith("_ms")}
    for name, scores in metrics["per_class"].items():
        values |= {f"test_{name}_{k}": v for k, v in scores.items() if k != "support"}
    tags = {
        "gate.passed": str(gate.passed).lower(),
        "gate.reason": gate.reason,
        "gate.champion_version": gate.champion_version or "",
    }
    client.log_batch(
        run_id,
        metrics=[Metric(_mlflow_key(k), float(v), now, 0) for k, v in values.items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    client.log_artifact(run_id, str(metrics_file), artifact_path="evaluation")
    from steps.runtime import plots

    folder = metrics_file.parent / plots.PLOTS_DIR
    labels = list(metrics["per_class"])
    for image in (
        plots.plot_confusion_matrix(metrics["confusion_matrix"], labels, folder / plots.CONFUSION_PNG),
        plots.plot_per_class(metrics["per_class"], folder / plots.PER_CLASS_PNG),
    ):
        client.log_artifact(run_id, str(image), artifact_path=plots.PLOTS_DIR)


def _mlflow_key(name: str) -> str:
    """Label names are user data; MLflow keys allow only a restricted character set."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)


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


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    ws = args.workspace
    try:
        model_dir = workspace.stage_in(workspace.join(ws, "model"), endpoint_url=cfg.storage.endpoint_url)
        data_dir = workspace.stage_in(workspace.join(ws, "data"), endpoint_url=cfg.storage.endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(f"{exc}; run prepare-data and train into workspace {ws} first.") from None
    metrics, run_id = evaluate(cfg, model_dir, data_dir)

    from mlflow import MlflowClient

    from steps.runtime import registry

    client = MlflowClient(registry.tracking_uri(cfg))
    metric = cfg.gate.metric
    champ = champion(client, cfg.mlflow.registered_model, metric)
    gate = decide(metrics[metric], metric, cfg.gate.threshold, cfg.gate.tolerance, champ)
    metrics |= {"gate": asdict(gate), "mlflow_run_id": run_id}

    eval_dir = Path(tempfile.mkdtemp(prefix="evaluate-")) if s3.is_s3(ws) else Path(ws) / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(metrics, ensure_ascii=False, indent=2)
    (eval_dir / "metrics.json").write_text(text, encoding="utf-8")
    workspace.stage_out(eval_dir, workspace.join(ws, "eval"), cfg.storage.endpoint_url)
    if run_id:
        log_to_mlflow(client, run_id, metrics, gate, eval_dir / "metrics.json")
    else:
        log.warning("%s has no mlflow_run_id; test metrics are not logged to MLflow", model_dir / "training.json")
    _log_summary(metrics)
    print(f"gate {'PASSED' if gate.passed else 'FAILED'}: {gate.reason}")
    return {"metrics": text, "gate-passed": "true" if gate.passed else "false", "mlflow-run-id": run_id or ""}


def _log_summary(metrics: dict[str, Any]) -> None:
    lat = metrics["latency"]
    log.info(
        "test: accuracy %.4f macro_f1 %.4f on %d examples; latency p50 %.1f ms / p99 %.1f ms per batch of %d",
        metrics["accuracy"],
        metrics["macro_f1"],
        metrics["examples"],
        lat["batch_p50_ms"],
        lat["batch_p99_ms"],
        lat["batch_size"],
    )


STEP = runner.Step(
    "evaluate",
    __doc__,
    run,
    _arguments,
    outputs=(
        runner.Output("metrics", "the test metrics and the gate decision, JSON"),
        runner.Output("gate-passed", "'true' or 'false'"),
        runner.Output("mlflow-run-id", "the training MLflow run id"),
    ),
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
