"""evaluate: choose the engine that will serve the exported model, score it on the held-out test split and decide
the promotion gate.

First every engine variant (Paddle fp32/bf16, ONNX Runtime fp32/int8, OpenVINO bf16/int8) is built beside the
export and measured on this host, in process and then served over loopback HTTP: the fastest served whose gate
metric is within `serving.max_metric_drop` of Paddle fp32 is the one that serves (`engine.json`, published with
the model, says which figure ranked them; steps/runtime/serving/engine_selection.py). Then the model is scored as that
variant answers, so the gate judges what clients will get. Beside it the cheap baseline of the task (TF-IDF +
logistic regression, pair features for matching, a CRF for NER; steps/runtime/data/baselines/) is fitted on the same
train split and scored on the same test split: both figures, the difference with its confidence interval and a
paired test go to metrics.json, MLflow (`baseline_*` metrics of the same run and of the model's LoggedModel:
steps/runtime/training/model_tracking.py) and the published manifest. The
gate: the configured metric must reach `gate.threshold`, beat the baseline by `gate.baseline_margin` (under
`gate.baseline: require`), AND be no worse than the current champion (MLflow registered-model alias `champion`) by
more than `gate.tolerance`. A failed gate is a result, not an error: the step exits 0 and writes `false`, and the
reason names the figures it failed on.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

if not __package__:  # run as a script path: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from paddle_mlops_core.config import PipelineConfig  # noqa: E402
from paddle_mlops_core.contracts import CACHE_OUTPUT, ENGINE_FILE, MLFLOW_MODEL_FILES  # noqa: E402
from steps.runtime import config_names, runner
from steps.runtime.caching import keys as cache_keys
from steps.runtime.caching import reuse
from steps.runtime.data import evaluation, tasks
from steps.runtime.release import gate as gate_rules  # noqa: E402
from steps.runtime.runner import StepError  # noqa: E402
from steps.runtime.serving import engine_selection
from steps.runtime.serving.engines.variants import PADDLE_MODEL, PADDLE_PARAMS, RECORD_FILE, SPECS  # noqa: E402
from steps.runtime.storage import s3, workspace  # noqa: E402
from steps.runtime.training import model_tracking

log = logging.getLogger("steps.evaluate")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (local path or s3:// URI)")


def _modified(directory: Path) -> dict[str, int]:
    """Every file under `directory` (relative path) -> its modification time in ns."""
    return {p.relative_to(directory).as_posix(): p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()}


# What the rollout does with a served model, which changes nothing evaluate measures: left out of its key.
ROLLOUT_ONLY = ("target", "model_name", "host", "port", "ready_timeout_seconds", "smoke_instances", "deployment_mode",
                "canary_percent", "canary_window_seconds", "max_error_rate", "regions", "max_request_bytes",
                "max_instances", "networking_layer", "gateway_namespaces", "canary_router", "canary_gateway",
                "canary_min_requests", "max_p99_latency_ms")  # fmt: skip
SCORES = "scores.json"  # the cached report (the test metrics, engine table, baseline), before the gate


def selection_files() -> set[str]:
    """The top-level names evaluate writes into `model/` (engine.json, the variants' record and converted files, the
    MLflow model files): what its key leaves out of the model train exported."""
    names = {ENGINE_FILE, RECORD_FILE, *MLFLOW_MODEL_FILES}
    for spec in SPECS.values():  # every variant's files but the Paddle export's own (ONNX fp32 is converted here too)
        names.update(path.split("/")[0] for path in spec.files if path not in (PADDLE_MODEL, PADDLE_PARAMS))
    return names


def cache_key(cfg: PipelineConfig, model_dir: Path, data_dir: Path) -> cache_keys.Key:
    """What the engine selection and the scores depend on (docs/caching.md): this step's code, the task, the gate
    metric, the baseline's settings and the serving settings it measures with, the exported model, the splits, this
    host (the speeds it ranks are this host's) and the locked libraries. Not the gate: it is decided on every run."""
    serving = {k: v for k, v in cfg.serving.model_dump(mode="json").items() if k not in ROLLOUT_ONLY}
    return cache_keys.Key(
        STEP.name,
        {
            "code": cache_keys.code_digest("steps.evaluate"),
            "config": cache_keys.digest_json(
                {
                    "serving": serving,
                    "settings": cache_keys.config_part(
                        cfg, "task", "model.task", "gate.metric", "gate.baseline", "baseline"
                    ),
                }  # fmt: skip
            ),
            "model": cache_keys.dir_digest(model_dir, exclude=selection_files()),
            "data": cache_keys.dir_digest(data_dir),
            "host": cache_keys.digest_json(cache_keys.host_part()),
            "libraries": cache_keys.lock_digest(),
        },
    )


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    ws = args.workspace
    try:
        model_dir = workspace.stage_in(workspace.join(ws, "model"), endpoint_url=cfg.storage.endpoint_url)
        data_dir = workspace.stage_in(workspace.join(ws, "data"), endpoint_url=cfg.storage.endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(f"{exc}; run prepare-data and train into workspace {ws} first.") from None
    key = cache_key(cfg, model_dir, data_dir)
    cached = reuse.begin(args, key, cfg.storage.endpoint_url)
    export = str(key.parts["model"])  # the LoggedModel's identity beside its run
    eval_dir = Path(tempfile.mkdtemp(prefix="evaluate-")) if s3.is_s3(ws) else Path(ws) / "eval"
    restored = cached.restore({"model": workspace.join(ws, "model"), "eval": workspace.join(ws, "eval")})
    if restored is not None:
        eval_dir = workspace.stage_in(workspace.join(ws, "eval"), endpoint_url=cfg.storage.endpoint_url)
        model_dir = workspace.stage_in(workspace.join(ws, "model"), endpoint_url=cfg.storage.endpoint_url)
        metrics = json.loads((eval_dir / SCORES).read_text(encoding="utf-8"))
        outputs = _decide(cfg, ws, eval_dir, metrics, _run_id(model_dir), export)
        return outputs | {CACHE_OUTPUT: restored[CACHE_OUTPUT]}
    metrics, run_id = _measure(cfg, ws, model_dir, data_dir)
    eval_dir.mkdir(parents=True, exist_ok=True)
    (eval_dir / SCORES).write_text(json.dumps(metrics, ensure_ascii=False, indent=2), encoding="utf-8")
    outputs = _decide(cfg, ws, eval_dir, metrics, run_id, export)
    return cached.record({"model": model_dir, "eval": _scores_only(eval_dir)}, {}) | outputs


def _measure(cfg: PipelineConfig, ws: str, model_dir: Path, data_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The engine selection (its files into the workspace's `model/`) and the test report with the baseline."""
    before = _modified(model_dir)
    selection = engine_selection.select(cfg, model_dir, data_dir)
    for line in engine_selection.table_lines(selection):
        log.info("%s", line)
    # The export becomes an MLflow model (its files beside it; the published version is that directory), with the
    # selected engine and an input example of real test rows.
    from steps.runtime.serving import mlflow_model  # paddlenlp and mlflow.pyfunc: seconds a reused evaluate saves

    task = tasks.for_config(cfg)
    examples = task.read_rows(data_dir / "test.jsonl", limit=mlflow_model.EXAMPLE_ROWS)
    mlflow_model.write(model_dir, [task.instance(row) for row in examples])
    # What the selection wrote (new or rebuilt variant files, engine.json) goes where upload publishes the model
    # from, and what it deleted (a variant that is not built any more: int8 after serving.quantization: false, one
    # whose conversion failed) goes from there; in place when the workspace is local.
    after = _modified(model_dir)
    written = sorted(name for name, stamp in after.items() if before.get(name) != stamp)
    workspace.stage_out(
        model_dir, workspace.join(ws, "model"), cfg.storage.endpoint_url, only=written, removed=set(before) - set(after)
    )
    scored = evaluation.with_baseline(cfg, evaluation.score(cfg, model_dir, data_dir), data_dir)
    metrics = scored.metrics
    metrics["engine"] |= {
        k: selection[k] for k in ("selected", "reason", "ranking", "ranked_by", "max_metric_drop", "variants")
    }
    return metrics, scored.run_id


def _decide(
    cfg: PipelineConfig, ws: str, eval_dir: Path, metrics: dict[str, Any], run_id: str | None, export: str
) -> dict[str, str]:
    """The gate against the current champion (taken on every run, a reused report included), `metrics.json`, the
    training run's MLflow record and its LoggedModel (`logged_model.json`); the step's outputs."""
    from mlflow import MlflowClient

    from steps.runtime.release import registry

    client = MlflowClient(registry.tracking_uri(cfg))
    gate = gate_rules.judge(cfg, metrics, client)
    metrics = metrics | {"gate": asdict(gate), "mlflow_run_id": run_id}
    text = json.dumps(metrics, ensure_ascii=False, indent=2)
    (eval_dir / "metrics.json").write_text(text, encoding="utf-8")
    if run_id:
        known = model_tracking.read_record(eval_dir)
        model_id = model_tracking.log_evaluation(
            client, run_id, metrics, gate, eval_dir / "metrics.json", name=config_names.registered_model(cfg),
            export_digest=export, known_model_id=known,
        )  # fmt: skip
        model_tracking.write_record(eval_dir, model_id)
    else:
        log.warning("the model has no mlflow_run_id in training.json; test metrics are not logged to MLflow")
    workspace.stage_out(eval_dir, workspace.join(ws, "eval"), cfg.storage.endpoint_url)
    _log_summary(metrics)
    print(f"gate {'PASSED' if gate.passed else 'FAILED'}: {gate.reason}")
    return {"metrics": text, "gate-passed": "true" if gate.passed else "false", "mlflow-run-id": run_id or ""}


def _run_id(model_dir: Path) -> str | None:
    """The training run the exported model names (training.json)."""
    try:
        return json.loads((model_dir / "training.json").read_text(encoding="utf-8")).get("mlflow_run_id") or None
    except (OSError, json.JSONDecodeError):
        return None


def _scores_only(eval_dir: Path) -> Path:
    """A folder holding just the report before the gate: what is cached of `eval/` (plots are drawn again)."""
    keep = Path(tempfile.mkdtemp(prefix="evaluate-scores-"))
    for name in (SCORES, model_tracking.RECORD):  # the LoggedModel's id: a restore reuses it while it exists
        if (eval_dir / name).is_file():
            (keep / name).write_bytes((eval_dir / name).read_bytes())
    return keep


def _log_summary(metrics: dict[str, Any]) -> None:
    from paddle_mlops_core.config.tasks import spec

    lat = metrics["latency"]
    scores = " ".join(f"{name} {metrics[name]:.4f}" for name in spec(metrics["task_type"]).metrics)
    log.info(
        "test: %s on %d examples; latency p50 %.1f ms / p99 %.1f ms per batch of %d",
        scores,
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
    cacheable=True,
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
