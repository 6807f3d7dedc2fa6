"""train-cache: look the training run up in the step cache before any training job is created.

The train step's content key (docs/caching.md) is the training code (the training image's digest on the cluster, the
project modules `steps.train` runs locally), the configuration that changes the trained parameters, the prepared
data (every file of the workspace `data/`, the staged pretrained weights' digest among them) and the locked
libraries. On a hit the cached `model/` is put into the workspace, checked file by file, and `reused` is `true`: the
DAG skips the training job (`when`), so a push that changes nothing the model depends on queues for no GPU. On a miss
(or `--rerun train`) `reused` is `false` and `key` goes to the training job, which records its model under it and
keys its checkpoints by it, so a preempted, retried or resubmitted run of the same inputs resumes its own work.
The key and its parts are also written to the workspace (`cache/train-key.json`) for the training job to record with.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # run as a script path: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import CACHE_OUTPUT, TRAIN_KEY_FILE, train_run_name, workflow_run_name
from steps.runtime import runner
from steps.runtime.caching import keys as cache_keys
from steps.runtime.caching import reuse
from steps.runtime.runner import StepError
from steps.runtime.storage import workspace

log = logging.getLogger("steps.train_cache")
MODEL = "model"
# The training settings that change the trained parameters. Left out: where and how the job runs (placement,
# backend, cluster resources but its world size, the metrics port), checkpoint settings (a resumed run ends with
# the parameters of an uninterrupted one), and the length of a new training image's canary run.
UNUSED_TRAINING = ("job", "placement", "backend", "metrics_port", "nproc", "checkpoint", "canary_steps")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (local path or s3:// URI)")
    parser.add_argument("--image-digest", default="", help="the training image's digest (build-image's output)")
    parser.add_argument("--run-id", default="", help="the `run-id` workflow parameter (empty: the content key)")


def world_size(cfg: PipelineConfig, on_cluster: bool) -> int:
    """How many processes train together: their count changes the sampler's batches and the all-reduce's sums."""
    job = cfg.training.job
    return job.workers * max(1, job.gpus_per_worker) if on_cluster else cfg.training.nproc


def training_settings(cfg: PipelineConfig) -> dict[str, Any]:
    dumped = cfg.training.model_dump(mode="json")
    return {k: v for k, v in dumped.items() if k not in UNUSED_TRAINING}


def train_key(cfg: PipelineConfig, data_dir: Path, image_digest: str) -> cache_keys.Key:
    """The train step's content key."""
    on_cluster = image_digest.startswith("sha256:")
    code = image_digest if on_cluster else cache_keys.code_digest("steps.train", "steps.runtime.training.launch")
    return cache_keys.Key(
        reuse.TRAIN_STEP,
        {
            "code": code,
            "config": cache_keys.digest_json(
                {
                    "task": cfg.task,
                    "model": cfg.model.model_dump(mode="json"),
                    "training": training_settings(cfg),
                    "world_size": world_size(cfg, on_cluster),
                    # the best epoch is the one with the best dev gate metric: another metric, another model
                    "gate.metric": cfg.gate.metric,
                }
            ),
            "data": cache_keys.dir_digest(data_dir),
            "libraries": cache_keys.lock_digest(),
        },
    )


def _link_mlflow_run(cfg: PipelineConfig, model_dir: Path, key: cache_keys.Key) -> str | None:
    """Tag the reused model's MLflow run with this workflow (`reused_by.<run>`): the run is reused, not copied."""
    try:
        run_id = json.loads((model_dir / "training.json").read_text(encoding="utf-8")).get("mlflow_run_id")
    except (OSError, json.JSONDecodeError):
        return None
    run = workflow_run_name()
    if run_id and run:
        from steps.runtime.release import registry  # mlflow: loaded only to link a run

        try:
            registry.connect(cfg).set_tag(run_id, f"reused_by.{run}", key.digest)
        except Exception as exc:  # noqa: BLE001 - a missing link must not fail a reuse
            log.warning("could not tag MLflow run %s as reused by %s: %s", run_id, run, exc)
    return run_id


def run(cfg: PipelineConfig, args: argparse.Namespace) -> dict[str, str]:
    ws = args.workspace
    try:
        data_dir = workspace.stage_in(workspace.join(ws, "data"), endpoint_url=cfg.storage.endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(f"{exc}; run prepare-data with --output {workspace.join(ws, 'data')} first.") from None
    key = train_key(cfg, data_dir, args.image_digest)
    scratch = Path(tempfile.mkdtemp(prefix="train-key-"))
    (scratch / Path(TRAIN_KEY_FILE).name).write_text(json.dumps({"digest": key.digest, "parts": dict(key.parts)}))
    workspace.stage_out(scratch, workspace.join(ws, str(Path(TRAIN_KEY_FILE).parent)), cfg.storage.endpoint_url)
    # The training run the job's checkpoints are kept under (steps/train.py: the run id, else the key): the train
    # step's mutex and its job's label.
    run = train_run_name(cfg.task, args.run_id or key.digest)
    runner.set_log_fields(run_id=args.run_id or key.digest)
    cached = reuse.begin(args, key, cfg.storage.endpoint_url)
    restored = cached.restore({MODEL: workspace.join(ws, MODEL)})
    if restored is None:
        return {"reused": "false", "key": key.digest, "run": run, CACHE_OUTPUT: cached.report(reused=False)}
    model_dir = workspace.stage_in(workspace.join(ws, MODEL), endpoint_url=cfg.storage.endpoint_url)
    run_id = _link_mlflow_run(cfg, model_dir, key)
    log.info("training reused: model of MLflow run %s; no training job is started", run_id or "?")
    return {**restored, "reused": "true", "key": key.digest, "run": run}


STEP = runner.Step(
    "train-cache",
    __doc__,
    run,
    _arguments,
    outputs=(
        runner.Output("reused", "true when the cached model was put into the workspace (the DAG skips training)"),
        runner.Output("key", "the train step's content key (its checkpoints and cache entry are kept under it)"),
        runner.Output("run", "the training run's name (the train step's mutex and its job's label)"),
    ),
    cacheable=True,
)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
