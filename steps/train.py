"""train: train an ERNIE classifier data-parallel, keep the best on dev, export it, track it in MLflow.

Runs single-process, or under `python -m paddle.distributed.launch --nproc_per_node N steps/train.py`
(collective: gloo on CPU, NCCL on GPU). Reads `<workspace>/data`; writes the exported best-on-dev
model to `<workspace>/model`. While it trains, rank 0 checkpoints to the run's store
(`<checkpoint root>/<task>/<run id>/checkpoints/<step>/`), and a step started again (a restarted pod, a retried or
resubmitted workflow) resumes from the newest complete checkpoint there. SIGTERM at any moment exits 143 within
`training.checkpoint.grace_seconds`: while training after a checkpoint of the step the ranks stop at, in setup at once,
while scoring or exporting once the checkpoint that protects the work is in the store
(steps/runtime/training/graceful_stop.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a script path by paddle.distributed.launch: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1:
    # N processes sharing the cores: one math thread each, or they oversubscribe and crawl.
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

from paddle_mlops_core.config import PipelineConfig  # noqa: E402
from paddle_mlops_core.contracts import TRAIN_RUNS  # noqa: E402
from steps.runtime import runner
from steps.runtime.caching import reuse
from steps.runtime.runner import StepError  # noqa: E402
from steps.runtime.storage import s3, workspace  # noqa: E402
from steps.runtime.training import graceful_stop, ps, worker_logs
from steps.runtime.training.trainer import Trainer  # noqa: E402

log = logging.getLogger("steps.train")


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (local path or s3:// URI)")
    parser.add_argument("--data", default=None, help="the prepared data area (default: <workspace>/data)")
    parser.add_argument(
        "--canary-steps", type=int, default=0, metavar="N",
        help="the training image's canary run (pipelines/training_canary.py): N steps, one epoch at most, and "
        "nothing left in the workspace",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoint-root", default=None, metavar="URI",
        help="where training runs keep their checkpoints, outside the per-workflow workspace so that a resubmitted "
        "workflow finds them (default: <workspace>/train)",
    )  # fmt: skip
    parser.add_argument(
        "--run-id", default="",
        help="the training run the checkpoints belong to (the `run-id` workflow parameter); empty: the train step's "
        "content key (--train-key), else a digest of the commit, task, model and training configuration, data "
        "digests and batch layout",
    )  # fmt: skip
    parser.add_argument(
        "--step-cache", default="", metavar="URI",
        help="step cache root: the exported model is recorded under the key train-cache left in the workspace",
    )  # fmt: skip
    parser.add_argument("--train-key", default="", help="the content key train-cache computed (docs/caching.md)")
    parser.add_argument(
        "--parent-run-id", default="",
        help="finetune-batch's parent MLflow run (steps/batch_run.py): the training run starts as its child, in its "
        "experiment; empty: the task's own run in the task's experiment",
    )  # fmt: skip
    parser.add_argument(
        "--dump-params", type=Path, default=None, metavar="NPZ",
        help="also save the final (not best-on-dev) parameters to this .npz file (rank 0; for comparing runs)",
    )  # fmt: skip


def run(cfg: PipelineConfig, args: argparse.Namespace) -> None:
    with graceful_stop.REQUEST.installed(int(os.environ.get("PADDLE_TRAINER_ID", "0"))):
        _train(cfg, args)


def _train(cfg: PipelineConfig, args: argparse.Namespace) -> None:
    root = args.checkpoint_root
    if args.canary_steps:
        # A canary neither reads nor writes the runs' checkpoints: its own, in a scratch folder, none taken.
        off = cfg.training.checkpoint.model_copy(update={"every_steps": 0, "every_seconds": 0, "epoch_end": False})
        canary = {"max_steps": args.canary_steps, "epochs": 1, "checkpoint": off}
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update=canary)})
        root, args.run_id = tempfile.mkdtemp(prefix="canary-checkpoints-"), ""
    ws = args.workspace
    data_uri = args.data or workspace.join(ws, "data")
    try:
        data_dir = workspace.stage_in(data_uri, endpoint_url=cfg.storage.endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(f"{exc}; run prepare-data with --output {data_uri} first.") from None
    local = Path(tempfile.mkdtemp(prefix="train-")) if s3.is_s3(ws) else Path(ws)
    if cfg.training.topology == "ps":
        ps.run(cfg, data_dir, local)
        _stage_out(cfg, local, ws, args.canary_steps)
        return
    # The run id a restart finds its checkpoints by: the one the workflow was given, else the train step's content
    # key, so every restart, retry and resubmission of the same inputs resumes the same run (docs/caching.md).
    run_id = args.run_id or args.train_key
    trainer = Trainer(cfg, data_dir, local, git_sha=args.git_sha, dump_params=args.dump_params, data_uri=data_uri,
                      checkpoint_root=root or workspace.join(ws, TRAIN_RUNS), explicit_run_id=run_id,
                      parent_run_id=args.parent_run_id if not args.canary_steps else "")  # fmt: skip
    runner.set_log_fields(run_id=trainer.run_id)
    if not args.canary_steps:
        _keep_worker_logs(cfg, trainer, ws)
    try:
        trainer.run()
        if trainer.rank == 0:
            _stage_out(cfg, local, ws, args.canary_steps)
            # The model is in the workspace: a rerun of this run id would only export it again.
            trainer.checkpointer.discard()
            if args.step_cache and args.train_key and not args.canary_steps:
                reuse.record_key_file(args.step_cache, ws, {"model": local / "model"}, cfg.storage.endpoint_url)
    finally:
        # However it ends (a SIGTERM while exporting included): not before the checkpoint upload in flight, which
        # would die with the process, is in the store, within the grace period.
        graceful_stop.REQUEST.enter(graceful_stop.Phase.STOPPING)
        trainer.checkpointer.close(graceful_stop.REQUEST.seconds_left(cfg.training.checkpoint.grace_seconds))


def _keep_worker_logs(cfg: PipelineConfig, trainer: Trainer, ws: str) -> None:
    """The node's launch supervisor copies its worker logs into the run's folder; rank 0 says in the workspace which
    run this workflow trained (steps/runtime/training/worker_logs.py)."""
    worker_logs.announce(trainer.run_uri)
    if trainer.rank != 0:
        return
    try:
        worker_logs.record_run(ws, trainer.run_id, trainer.run_uri, cfg.storage.endpoint_url)
    except Exception as exc:  # noqa: BLE001 - a missing pointer to the logs must not fail the training
        log.warning("could not record the training run in %s: %s", ws, exc)


def _stage_out(cfg: PipelineConfig, local: Path, ws: str, canary: int) -> None:
    if s3.is_s3(ws) and (local / "model").is_dir() and not canary:
        workspace.stage_out(local / "model", workspace.join(ws, "model"), cfg.storage.endpoint_url)


STEP = runner.Step("train", __doc__, run, _arguments)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
