"""What evaluate records in MLflow about a trained model: its test metrics, engine table and gate decision in the
training run, and the model itself as an MLflow 3 LoggedModel linked to that run.

The LoggedModel is an external model (`mlflow.create_external_model`): its bytes are the published version, not
MLflow artifacts. It is named after the registered model, typed by the task, carries the model's main
hyper-parameters, and the test metrics and baseline comparison are logged against it (`model_id=`) and against
the test split's dataset input that training logged (`dataset_name`/`dataset_digest`), so
`mlflow.search_logged_models` and the UI's model page show them. One LoggedModel per training run and export: a
restored or retried evaluate finds it by `source_run_id` and the export's digest tag instead of creating another.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steps.runtime.release import gate as gate_rules

log = logging.getLogger("steps.evaluate")

# The LoggedModel tag holding the digest of the export train made (the model's files, engine choice left out):
# what makes "the same model" for a restored or retried evaluate.
EXPORT_DIGEST_TAG = "export_sha256"
# `<workspace>/eval/logged_model.json`: {"model_id": ...}, read by upload (manifest `mlflow_model_id`).
RECORD = "logged_model.json"
# The dataset input context training gives the test split (tracking.SPLITS).
TEST_CONTEXT = "testing"
# The training run's parameters that say what the model is: copied onto the LoggedModel.
MAIN_PARAMS = (
    "model.task", "model.pretrained", "model.hidden_size", "model.num_hidden_layers", "model.num_attention_heads",
    "model.intermediate_size", "model.max_seq_len", "model.dropout", "training.epochs", "training.batch_size",
    "training.learning_rate", "training.weight_decay", "training.warmup_ratio", "training.max_steps",
    "training.seed", "training.amp", "pretrained.name", "pretrained.digest",
)  # fmt: skip


def log_evaluation(
    client: Any,
    run_id: str,
    metrics: dict[str, Any],
    gate: gate_rules.GateDecision,
    metrics_file: Path,
    *,
    name: str,
    export_digest: str,
    known_model_id: str | None = None,
) -> str:
    """The test report into the training run and against its LoggedModel (found or created); the model's id."""
    from mlflow.entities import Metric, RunTag

    from paddle_mlops_core.config.tasks import spec

    run = client.get_run(run_id)
    model_id = ensure_logged_model(client, run, name, metrics["task_type"], export_digest, known_model_id)
    test = test_dataset(run)
    now = int(time.time() * 1000)
    values = {f"test_{metric}": metrics[metric] for metric in spec(metrics["task_type"]).metrics}
    for label, scores in metrics["per_class"].items():
        values |= {f"test_{label}_{k}": v for k, v in scores.items() if k != "support"}
    baseline_values, baseline_tags = baseline_to_mlflow(metrics.get("baseline"))
    values |= baseline_values
    # Scores of the model on the test split: the run's and the model's, linked to the split they were measured on.
    linked = {"model_id": model_id} | ({"dataset_name": test[0], "dataset_digest": test[1]} if test else {})
    batch = [Metric(_mlflow_key(k), float(v), now, 0, **linked) for k, v in values.items()]
    run_only = {f"test_latency_{k}": v for k, v in metrics["latency"].items() if k.endswith("_ms")}
    tags = {
        "gate.passed": str(gate.passed).lower(),
        "gate.reason": gate.reason,
        "gate.champion_version": gate.champion_version or "",
        "gate.baseline": gate.baseline_mode,
    } | baseline_tags
    engine = metrics.get("engine") or {}
    for variant, row in (engine.get("variants") or {}).items():
        for key in ("metric", "batch1_p50_ms", "batch_texts_per_s", "served_texts_per_s"):
            if row.get(key) is not None:
                run_only[f"engine_{variant}_{key}"] = row[key]
    tags |= {"engine.selected": engine.get("selected", ""), "engine.served": engine.get("served", ""),
             "engine.reason": engine.get("reason", ""), "engine.ranked_by": engine.get("ranked_by", "")}  # fmt: skip
    batch += [Metric(_mlflow_key(k), float(v), now, 0) for k, v in run_only.items()]
    client.log_batch(run_id, metrics=batch, tags=[RunTag(k, v) for k, v in tags.items()])
    if engine.get("selected"):
        client.set_logged_model_tags(model_id, {"engine": engine["selected"]})
    client.log_artifact(run_id, str(metrics_file), artifact_path="evaluation")
    _log_plots(client, run_id, metrics, metrics_file.parent)
    return model_id


def ensure_logged_model(
    client: Any, run: Any, name: str, task_type: str, export_digest: str, known_model_id: str | None = None
) -> str:
    """The LoggedModel of `run`'s export `export_digest`: the one `known_model_id` names (a restored evaluate's
    record) or one found by run and digest when it is still on this server, else a new external model."""
    import mlflow
    from mlflow.entities import LoggedModelOutput
    from mlflow.exceptions import MlflowException

    run_id = run.info.run_id
    if known_model_id:
        try:
            known = client.get_logged_model(known_model_id)
        except MlflowException:
            known = None
        if known is not None and known.source_run_id == run_id and known.tags.get(EXPORT_DIGEST_TAG) == export_digest:
            return str(known.model_id)
    found = client.search_logged_models(
        [run.info.experiment_id],
        filter_string=f"source_run_id = '{run_id}' AND tags.{EXPORT_DIGEST_TAG} = '{export_digest}'",
        max_results=1,
    )
    if found:
        return str(found[0].model_id)
    params = {k: str(v) for k, v in run.data.params.items() if k in MAIN_PARAMS and v != "None"}
    mlflow.set_tracking_uri(client.tracking_uri)  # create_external_model is fluent: the default client's server
    model = mlflow.create_external_model(
        name=name,
        source_run_id=run_id,
        tags={
            EXPORT_DIGEST_TAG: export_digest,
            "task": run.data.tags.get("task", ""),
            "git_sha": run.data.tags.get("git_sha", ""),
        },  # fmt: skip
        params=params,
        model_type=task_type,
        experiment_id=run.info.experiment_id,
    )
    # The run's page lists the models it produced from its outputs (what a flavour's log_model records).
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
    log.info("MLflow LoggedModel %s (%s) for run %s", model.model_id, name, run_id)
    return str(model.model_id)


def test_dataset(run: Any) -> tuple[str, str] | None:
    """(name, digest) of the dataset input training logged for the test split, None when it logged none."""
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    for item in run.inputs.dataset_inputs if run.inputs else []:
        if any(t.key == MLFLOW_DATASET_CONTEXT and t.value == TEST_CONTEXT for t in item.tags):
            return item.dataset.name, item.dataset.digest
    return None


def write_record(eval_dir: Path, model_id: str) -> Path:
    path = eval_dir / RECORD
    path.write_text(json.dumps({"model_id": model_id}), encoding="utf-8")
    return path


def read_record(eval_dir: Path) -> str | None:
    """The LoggedModel id a workspace's `eval/logged_model.json` names, None without one."""
    try:
        return str(json.loads((eval_dir / RECORD).read_text(encoding="utf-8"))["model_id"]) or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def baseline_to_mlflow(figures: dict[str, Any] | None) -> tuple[dict[str, float], dict[str, str]]:
    """The baseline in the model's own run, as `baseline_*` metrics beside `test_*` (one run tells the whole story,
    and MLflow's run comparison charts them side by side) and `baseline.*` tags."""
    if not figures:
        return {}, {}
    values = {f"baseline_test_{name}": v for name, v in figures["metrics"].items()}
    values |= {f"baseline_{key}": figures[key] for key in ("difference", "ci_low", "ci_high", "seconds")}
    values["baseline_p_value"] = figures["test"]["p_value"]
    tags = {"baseline.kind": figures["kind"], "baseline.description": figures["description"],
            "baseline.metric": figures["metric"], "baseline.test": figures["test"]["name"],
            "baseline.key": figures["key"]}  # fmt: skip
    return values, tags


def _log_plots(client: Any, run_id: str, metrics: dict[str, Any], eval_dir: Path) -> None:
    from steps.runtime import plots  # matplotlib: loaded only when there is something to plot

    folder = eval_dir / plots.PLOTS_DIR
    labels = list(metrics["per_class"])
    images = [plots.plot_per_class(metrics["per_class"], folder / plots.PER_CLASS_PNG)]
    if "confusion_matrix" in metrics:  # label tasks; entity scores have no confusion matrix
        images.append(plots.plot_confusion_matrix(metrics["confusion_matrix"], labels, folder / plots.CONFUSION_PNG))
    for image in images:
        client.log_artifact(run_id, str(image), artifact_path=plots.PLOTS_DIR)


def _mlflow_key(name: str) -> str:
    """Label names are user data; MLflow keys allow only a restricted character set."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)
