"""train: train an ERNIE classifier data-parallel, keep the best on dev, export it, track it in MLflow.

Runs single-process, or under `python -m paddle.distributed.launch --nproc_per_node N steps/train.py`
(collective: gloo on CPU, NCCL on GPU). Reads `<workspace>/data`; writes the exported best-on-dev
model to `<workspace>/model` and resumable checkpoints to `<workspace>/checkpoints`.
"""

from __future__ import annotations

import argparse
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

from paddle_mlops.config import PipelineConfig  # noqa: E402
from steps.runtime import reuse, runner, s3, workspace  # noqa: E402
from steps.runtime.runner import StepError  # noqa: E402
from steps.runtime.trainer import Trainer  # noqa: E402


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", required=True, help="per-run workspace (local path or s3:// URI)")
    parser.add_argument("--data", default=None, help="the prepared data area (default: <workspace>/data)")
    parser.add_argument(
        "--canary-steps", type=int, default=0, metavar="N",
        help="the training image's canary run (pipelines/training_canary.py): N steps, one epoch at most, and "
        "nothing left in the workspace",
    )  # fmt: skip
    parser.add_argument(
        "--dump-params", type=Path, default=None, metavar="NPZ",
        help="also save the final (not best-on-dev) parameters to this .npz file (rank 0; for comparing runs)",
    )  # fmt: skip
    parser.add_argument(
        "--step-cache", default="", metavar="URI",
        help="step cache root: the exported model is recorded under the key train-cache left in the workspace",
    )  # fmt: skip
    parser.add_argument("--train-key", default="", help="the content key train-cache computed (docs/caching.md)")


def run(cfg: PipelineConfig, args: argparse.Namespace) -> None:
    if args.canary_steps:
        canary = {"max_steps": args.canary_steps, "epochs": 1}
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update=canary)})
    ws = args.workspace
    data_uri = args.data or workspace.join(ws, "data")
    try:
        data_dir = workspace.stage_in(data_uri, endpoint_url=cfg.storage.endpoint_url)
    except FileNotFoundError as exc:
        raise StepError(f"{exc}; run prepare-data with --output {data_uri} first.") from None
    local = Path(tempfile.mkdtemp(prefix="train-")) if s3.is_s3(ws) else Path(ws)
    if s3.is_s3(ws):
        try:  # a restarted pod resumes from the checkpoints the previous one uploaded
            workspace.stage_in(workspace.join(ws, "checkpoints"), local / "checkpoints", cfg.storage.endpoint_url)
        except FileNotFoundError:
            pass
    if cfg.training.topology == "ps":
        from steps.runtime import ps

        ps.run(cfg, data_dir, local)
        rank0 = True
    else:
        trainer = Trainer(cfg, data_dir, local, git_sha=args.git_sha, dump_params=args.dump_params, data_uri=data_uri)
        trainer.run()
        rank0 = trainer.rank == 0
    if rank0 and s3.is_s3(ws) and not args.canary_steps:
        for area in ("model", "checkpoints"):
            if (local / area).is_dir():
                workspace.stage_out(local / area, workspace.join(ws, area), cfg.storage.endpoint_url)
    if rank0 and args.step_cache and args.train_key:
        reuse.record_key_file(args.step_cache, ws, {"model": local / "model"}, cfg.storage.endpoint_url)


STEP = runner.Step("train", __doc__, run, _arguments)
main = STEP.main


if __name__ == "__main__":
    sys.exit(main())
