"""What a training run records in MLflow (rank 0 only): the run with its tags and flattened parameters,
its train/dev/test splits as dataset inputs, per-epoch metrics, and the best model's metrics, files and
learning curves. The experiment is marked as a model-training experiment (`mlflow.experimentKind`), so the
MLflow 3 UI opens it on runs and metrics, not on the GenAI traces overview."""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from paddle_mlops_core import contracts
from paddle_mlops_core.config import PipelineConfig
from steps.runtime import config_names
from steps.runtime.data import tag_transitions, tasks
from steps.runtime.runner import StepStopped

log = logging.getLogger("steps.train")

MODEL_INFO = "model-info"  # artifact folder for the exported model's small JSON files
# The experiment tag the MLflow 3 UI reads to pick its layout (ExperimentKind in mlflow/server/js):
# `custom_model_development` shows runs, metrics and models; an untagged experiment may open on traces.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
# Split file -> MLflow's dataset input context.
SPLITS = (("train", "training"), ("dev", "validation"), ("test", "testing"))


def run_name() -> str | None:
    """The MLflow run name: the workflow's run (contracts.workflow_run_name, the same the JSON logs carry); None
    outside a workflow, so MLflow picks one."""
    return contracts.workflow_run_name() or None


def flatten(prefix: str, value: Any) -> dict[str, Any]:
    """Nested mappings -> `a.b.c` keys (MLflow params are flat)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(f"{prefix}.{key}" if prefix else str(key), item))
        return out
    return {prefix: value}


@contextmanager
def start_run(
    cfg: PipelineConfig,
    git_sha: str,
    world: int,
    stats: dict[str, Any],
    data_dir: Path | None = None,
    data_uri: str | None = None,
    provenance: dict[str, Any] | None = None,
    resume_run_id: str | None = None,
    resumed_from: int = 0,
    parent_run_id: str | None = None,
) -> Iterator[str]:
    """An MLflow run with the configuration and data statistics as parameters and the splits in `data_dir`
    (published at `data_uri`) as dataset inputs; yields its run id. `provenance`: the pretrained weights trained
    from (name, staged digest, PaddleNLP version), logged as `pretrained.*` params. `resume_run_id`: the run a
    checkpoint was taken in (resumed at step `resumed_from`): continued, not started again, so its metrics go on at
    the right steps and there is no second run. A run stopped by SIGTERM ends KILLED; the attempt that resumes
    it sets it RUNNING again. `parent_run_id`: the finetune-batch run this task trains in (steps/batch_run.py): the
    run is its child, in its experiment (contracts.BATCH_EXPERIMENT), named `<workflow>-<task>`; without it, the
    run is the task's own, in the task's experiment (`mlflow.experiment`)."""
    import mlflow

    from steps.runtime.release import registry

    uri = registry.tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    resumed = _resumable(resume_run_id)
    if resumed is not None:
        # A resumed run goes on in the experiment it was started in (MLflow refuses another active experiment).
        mlflow.set_experiment(experiment_id=resumed.info.experiment_id)
    else:
        open_training_experiment(contracts.BATCH_EXPERIMENT if parent_run_id else config_names.experiment(cfg), uri)
    workflow = run_name() or _parent_workflow(parent_run_id)
    tags = {"git_sha": git_sha, "workflow": workflow, "world_size": str(world), "task": cfg.task,
            "task_type": cfg.model.task}  # fmt: skip
    # The context manager ends the run FINISHED, or FAILED when an exception escapes.
    with (
        mlflow.start_run(run_id=resumed.info.run_id, tags=tags)
        if resumed
        else mlflow.start_run(
            run_name=_child_name(cfg, workflow) if parent_run_id else run_name(),
            tags=tags,
            parent_run_id=parent_run_id or None,
        )
    ) as active:
        try:
            if resumed:
                # The exit handler closes the runs its workflow left RUNNING, by this tag: now this workflow's.
                mlflow.set_tags({"resumed_from_step": str(resumed_from), "workflow": workflow,
                                 **_adopted_by(resumed, parent_run_id)})  # fmt: skip
            else:
                _log_inputs(cfg, world, stats, data_dir, data_uri, provenance)
            yield active.info.run_id
        except StepStopped:
            mlflow.end_run("KILLED")
            raise


def _child_name(cfg: PipelineConfig, workflow: str) -> str:
    """A batch's child run is named by its workflow and task: its siblings share the workflow."""
    return f"{workflow}-{cfg.task}" if workflow else cfg.task


def _parent_workflow(parent_run_id: str | None) -> str:
    """The workflow the batch's parent run was opened by (its `workflow` tag, steps/batch_run.py), for a training
    process that does not know it: a TrainJob's pods are no Argo pods, and Argo 3.6/3.7 sets ARGO_WORKFLOW_NAME in
    its own init and wait containers only (argoproj/argo-workflows workflow/controller/workflowpod.go). The exit
    handler closes the runs a workflow left RUNNING by this tag (steps/close_run.py)."""
    if not parent_run_id:
        return ""
    import mlflow

    return str(mlflow.MlflowClient().get_run(parent_run_id).data.tags.get("workflow") or "")


def _adopted_by(resumed: Any, parent_run_id: str | None) -> dict[str, str]:
    """The parent tag a resumed run takes: the batch that now trains it, when the run is in that batch's experiment
    (a resumed child stays a child, of the batch that finishes it); none otherwise (MLflow nests within one
    experiment only, so a run a single-task workflow started stays where it is)."""
    if not parent_run_id:
        return {}
    import mlflow
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    parent = mlflow.MlflowClient().get_run(parent_run_id)
    if parent.info.experiment_id != resumed.info.experiment_id:
        log.warning("resumed MLflow run %s is not in the batch's experiment %s: it is not nested under run %s",
                    resumed.info.run_id, contracts.BATCH_EXPERIMENT, parent_run_id)  # fmt: skip
        return {}
    return {MLFLOW_PARENT_RUN_ID: parent_run_id}


def _resumable(run_id: str | None) -> Any:
    """The MLflow run `run_id` when the tracking server still has it, else None (and a warning: a new run starts)."""
    if not run_id:
        return None
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        return mlflow.MlflowClient().get_run(run_id)
    except MlflowException:
        log.warning("MLflow run %s of the checkpoint is gone from the tracking server; starting a new run", run_id)
        return None


def _log_inputs(
    cfg: PipelineConfig,
    world: int,
    stats: dict[str, Any],
    data_dir: Path | None,
    data_uri: str | None,
    provenance: dict[str, Any] | None,
) -> None:
    """A new run's parameters (configuration, data statistics, pretrained provenance) and dataset inputs."""
    import mlflow

    params = flatten("model", cfg.model.model_dump()) | flatten("training", cfg.training.model_dump(exclude={"job"}))
    params |= flatten("data", {k: v for k, v in stats.items() if k not in ("sha256", "labels", "pretrained")})
    params["world_size"] = world
    params |= {
        k.replace("pretrained_", "pretrained.", 1): v for k, v in (provenance or {}).items() if k != "pretrained"
    }
    params["pretrained.name"] = (provenance or {}).get("pretrained")
    mlflow.log_params({k: ("None" if v is None else v) for k, v in params.items()})
    if data_dir is not None:
        log_datasets(data_dir, data_uri or str(data_dir), stats, tasks.for_config(cfg))


def open_training_experiment(name: str, uri: str) -> Any:
    """`open_experiment`, marked as a model-training experiment (EXPERIMENT_KIND_TAG) when it is not yet."""
    import mlflow

    experiment = open_experiment(name, uri)
    if (experiment.tags or {}).get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
        mlflow.set_experiment_tag(EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    return experiment


def open_experiment(name: str, uri: str) -> Any:
    """The experiment `name`, made the active one; created first when missing, with its artifacts beside a local
    SQLite store (`contracts.artifact_root`) rather than under the working directory."""
    import mlflow
    from mlflow.exceptions import MlflowException

    root = contracts.artifact_root(uri)
    if root is not None and mlflow.get_experiment_by_name(name) is None:
        try:
            folder = re.sub(r"[^A-Za-z0-9._-]", "_", name)
            mlflow.create_experiment(name, artifact_location=(root / folder).as_uri())
        except MlflowException as exc:  # another process created it first: use theirs
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
    return mlflow.set_experiment(name)


# Rows of a split read to infer its dataset schema: the split itself is never read whole (it may hold millions).
SCHEMA_ROWS = 100


def log_datasets(data_dir: Path, data_uri: str, stats: dict[str, Any], task: Any = None) -> None:
    """Each split as an MLflow dataset input: name, digest (the file's sha256, as in stats.json), source
    (where the split is published), schema and row count, with MLflow's context tag. `task`: the task type
    (steps/runtime/data/tasks), which says what a row holds (default: text classification).

    Rank 0 logs them before its first step, so nothing here grows with the corpus: the schema is inferred from the
    first SCHEMA_ROWS rows, the row count and digest come from prepare-data's stats.json, and the input is MLflow's
    MetaDataset (a dataset by reference: source, digest, schema), not a frame of the rows."""
    import mlflow
    import pandas as pd
    from mlflow.data.pandas_dataset import from_pandas

    task = task or tasks.for_type("text-classification")
    digests = stats.get("sha256") or {}
    for split, context in SPLITS:
        path = data_dir / f"{split}.jsonl"
        if not path.is_file():
            continue
        # Nested values (a NER row's entity list) as JSON text: MLflow's schema has no list-of-lists column.
        head = [
            {k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v for k, v in row.items()}
            for row in _head_rows(path, SCHEMA_ROWS)
        ]
        total = ((stats.get("splits") or {}).get(split) or {}).get("total")
        rows = str(total) if total is not None else str(_count_lines(path))
        digest = str(digests.get(path.name) or "")
        with warnings.catch_warnings():  # mlflow's hints on integer columns and ambiguous local sources
            warnings.simplefilter("ignore")
            sample = from_pandas(pd.DataFrame(head, columns=list(task.row_keys)),
                                 source=f"{data_uri.rstrip('/')}/{path.name}", name=split)  # fmt: skip
            dataset = _split_dataset(sample.source, split, digest[:16] or None, sample.schema, int(rows))
            mlflow.log_input(dataset, context=context, tags={"rows": rows, "sha256": digest})


def _split_dataset(source: Any, name: str, digest: str | None, schema: Any, rows: int) -> Any:
    """MLflow's MetaDataset (a dataset by reference) with the split's row count as its profile, as a frame's has."""
    from mlflow.data.meta_dataset import MetaDataset

    class SplitDataset(MetaDataset):
        @property
        def profile(self) -> dict[str, int]:
            return {"num_rows": rows}

        def to_dict(self) -> dict[str, str]:
            return {**super().to_dict(), "profile": json.dumps(self.profile)}

    return SplitDataset(source, name=name, digest=digest, schema=schema)


def _head_rows(path: Path, limit: int) -> list[dict[str, Any]]:
    """The first `limit` rows of a split file (prepare-data wrote it: one JSON object a line)."""
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) >= limit:
                break
    return rows


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def log_epoch(record: dict[str, float], epoch: int) -> None:
    """One epoch's train and dev metrics, at step `epoch` (counted from 1)."""
    import mlflow

    mlflow.log_metrics(record, step=epoch)


def log_best(
    best: dict[str, Any], model_dir: Path, data_dir: Path, history: list[dict[str, float]], out_dir: Path
) -> None:
    """The best-on-dev metrics, the exported model's JSON files, the data statistics and the learning curves."""
    import mlflow

    mlflow.log_metrics({f"best_{k}": v for k, v in best.items() if k.startswith("dev_")})
    for name in ("label_map.json", "model_config.json", "training.json", tag_transitions.FILE):
        if (model_dir / name).is_file():  # tag_transitions.json: only where model.tag_transitions made one
            mlflow.log_artifact(str(model_dir / name), artifact_path=MODEL_INFO)
    if (data_dir / "stats.json").is_file():
        mlflow.log_artifact(str(data_dir / "stats.json"), artifact_path=MODEL_INFO)
    if history:
        from steps.runtime import plots  # matplotlib: loaded only when there are curves

        curves = plots.plot_curves(history, out_dir / plots.PLOTS_DIR / plots.CURVES_PNG)
        mlflow.log_artifact(str(curves), artifact_path=plots.PLOTS_DIR)
