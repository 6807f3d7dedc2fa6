"""train: train an ERNIE classifier data-parallel, keep the best on dev, export it, track it in MLflow.

Runs single-process, or under `python -m paddle.distributed.launch --nproc_per_node N steps/train.py`
(collective: gloo on CPU, NCCL on GPU). Reads `<workspace>/data`; writes the exported best-on-dev
model to `<workspace>/model` and resumable checkpoints to `<workspace>/checkpoints`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

if not __package__:  # run as a script path by paddle.distributed.launch: make `steps` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1:
    # N processes sharing the cores: one math thread each, or they oversubscribe and crawl.
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from paddle_mlops.config import PipelineConfig  # noqa: E402
from steps.runtime import data, s3, stepargs, workspace  # noqa: E402
from steps.runtime.batching import LengthGroupedBatchSampler  # noqa: E402
from steps.runtime.stepargs import StepError  # noqa: E402

log = logging.getLogger("steps.train")
KEEP_CHECKPOINTS = 2


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train", description=__doc__)
    stepargs.add_common_args(parser)
    parser.add_argument("--workspace", required=True, help="per-run workspace (local path or s3:// URI)")
    parser.add_argument(
        "--dump-params", type=Path, default=None, metavar="NPZ",
        help="also save the final (not best-on-dev) parameters to this .npz file (rank 0; for comparing runs)",
    )  # fmt: skip
    return stepargs.parse(parser, argv)


def run_name() -> str | None:
    return os.environ.get("PADDLE_MLOPS_RUN") or os.environ.get("ARGO_WORKFLOW_NAME") or None


def flatten(prefix: str, value: Any) -> dict[str, Any]:
    """Nested mappings -> `a.b.c` keys (MLflow params are flat)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(f"{prefix}.{key}" if prefix else str(key), item))
        return out
    return {prefix: value}


def classification_metrics(labels: Sequence[int], predictions: Sequence[int]) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(f1_score(labels, predictions, average="macro", zero_division=0)),
    }


class Checkpoints:
    """`checkpoints/step-N/` directories, each written under a temporary name and renamed into place
    only once complete (meta.json last), so a process killed mid-save leaves nothing that loads."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def complete(self) -> list[tuple[int, Path]]:
        """Finished checkpoints, oldest first: `step-N` with a meta.json (temporary dirs never match)."""
        found = []
        for path in self.directory.glob("step-*"):
            match = re.fullmatch(r"step-(\d+)", path.name)
            if match and path.is_dir() and (path / "meta.json").is_file():
                found.append((int(match.group(1)), path))
        return sorted(found)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1][1] if done else None

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> Path:
        import paddle

        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(".tmp-step-*"):  # left by a process killed while saving
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-step-{step}-", dir=self.directory))
        for name, obj in state.items():
            paddle.save(obj, str(tmp / f"{name}.pdparams"))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        final = self.directory / f"step-{step}"
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for _, old in self.complete()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    @staticmethod
    def load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        import paddle

        state = {p.stem: paddle.load(str(p)) for p in path.glob("*.pdparams")}
        return state, json.loads((path / "meta.json").read_text())


class Trainer:
    """One process of the data-parallel job; rank 0 evaluates, exports, logs and checkpoints."""

    def __init__(
        self, cfg: PipelineConfig, data_dir: Path, out_dir: Path, git_sha: str, dump_params: Path | None = None
    ) -> None:
        import paddle
        import paddle.distributed as dist

        from steps.runtime import ernie

        self.cfg, self.data_dir, self.out_dir, self.git_sha = cfg, data_dir, out_dir, git_sha
        self.dump_params = dump_params
        self.ernie = ernie
        self.world = dist.get_world_size()
        self.use_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
        paddle.set_device(f"gpu:{dist.ParallelEnv().device_id}" if self.use_gpu else "cpu")
        if self.world > 1:
            dist.init_parallel_env()
        self.rank = dist.get_rank()
        self.labels = data.read_label_map(data_dir / "label_map.json")
        self.stats = json.loads((data_dir / "stats.json").read_text()) if (data_dir / "stats.json").is_file() else {}
        self.checkpoints = Checkpoints(out_dir / "checkpoints")
        seed_everything(cfg.training.seed)
        self.tokenizer, self.model = self._build()

    def _build(self) -> tuple[Any, Any]:
        mcfg = self.cfg.model
        if mcfg.pretrained:
            directory = self.ernie.stage_pretrained(mcfg.pretrained, self.cfg.storage.endpoint_url)
            return self.ernie.load_tokenizer(directory), self.ernie.load_pretrained(directory, len(self.labels), mcfg.dropout)
        vocab = self.data_dir / "vocab.txt"
        if not vocab.is_file():
            raise StepError(f"{vocab} does not exist; prepare-data writes it when model.pretrained is null.")
        tokenizer = self.ernie.load_tokenizer(vocab)
        return tokenizer, self.ernie.build_model(mcfg, len(tokenizer.vocab), len(self.labels), tokenizer.pad_token_id)

    def _encode(self, split: str) -> tuple[list[list[int]], np.ndarray]:
        rows = data.read_split(self.data_dir / f"{split}.jsonl")
        if not rows:
            raise StepError(f"{self.data_dir / f'{split}.jsonl'} is empty; rerun prepare-data with more data.")
        bad = sorted({y for _, y in rows if y not in self.labels})
        if bad:
            raise StepError(f"{split}.jsonl has labels {bad} missing from label_map.json; rerun prepare-data.")
        ids = self.ernie.encode(self.tokenizer, [t for t, _ in rows], self.cfg.model.max_seq_len)
        return ids, np.array([y for _, y in rows], dtype="int64")

    def _batch(self, ids: list[list[int]], indices: Sequence[int]) -> tuple[Any, Any]:
        import paddle

        input_ids, token_type_ids = self.ernie.pad_batch([ids[i] for i in indices], self.tokenizer.pad_token_id)
        return paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids)

    def evaluate(self, model: Any, ids: list[list[int]], labels: np.ndarray, batch_size: int = 128) -> dict[str, float]:
        import paddle

        model.eval()
        predictions: list[int] = []
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths: less padding
        with paddle.no_grad():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                logits = model(*self._batch(ids, chunk))
                predictions.extend(zip(chunk, logits.argmax(axis=-1).numpy().tolist(), strict=True))
        model.train()
        ordered = [p for _, p in sorted(predictions)]
        return classification_metrics(labels.tolist(), ordered)

    def run(self) -> dict[str, Any]:
        if self.rank != 0:
            return self._train(None)
        import mlflow

        from steps.runtime import registry

        mlflow.set_tracking_uri(registry.tracking_uri(self.cfg))
        mlflow.set_experiment(self.cfg.mlflow.experiment)
        tags = {"git_sha": self.git_sha, "workflow": run_name() or "", "world_size": str(self.world)}
        # The context manager ends the run FINISHED, or FAILED when an exception escapes.
        with mlflow.start_run(run_name=run_name(), tags=tags) as active:
            params = flatten("model", self.cfg.model.model_dump()) | flatten(
                "training", self.cfg.training.model_dump(exclude={"paddlejob"})
            )
            params |= flatten("data", {k: v for k, v in self.stats.items() if k not in ("sha256", "labels")})
            params["world_size"] = self.world
            mlflow.log_params({k: ("None" if v is None else v) for k, v in params.items()})
            return self._train(active.info.run_id)

    def _optimizer(self, total_steps: int) -> tuple[Any, Any]:
        import paddle
        from paddlenlp.transformers import LinearDecayWithWarmup

        tcfg = self.cfg.training
        scheduler = LinearDecayWithWarmup(tcfg.learning_rate, total_steps, tcfg.warmup_ratio)
        # Standard transformer recipe: no weight decay on biases and LayerNorm.
        decay = {p.name for n, p in self.model.named_parameters() if not any(k in n for k in ("bias", "norm"))}
        optimizer = paddle.optimizer.AdamW(
            learning_rate=scheduler,
            parameters=self.model.parameters(),
            weight_decay=tcfg.weight_decay,
            apply_decay_param_fun=lambda name: name in decay,
            grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
        )
        return optimizer, scheduler

    def _train(self, run_id: str | None) -> dict[str, Any]:
        import paddle

        # Optimizer accumulators are named when first used; a fresh name scope makes the names in a
        # checkpoint match however many optimizers this process created before (tests, notebooks).
        with paddle.utils.unique_name.guard():
            return self._train_loop(run_id)

    def _train_loop(self, run_id: str | None) -> dict[str, Any]:
        import paddle

        tcfg = self.cfg.training
        accumulation = tcfg.grad_accumulation
        train_ids, train_labels = self._encode("train")
        dev_ids, dev_labels = self._encode("dev") if self.rank == 0 else ([], np.zeros(0))
        # One sampler batch is one optimizer step (all its micro-batches), so accumulating 2 × b
        # trains exactly the batches that 1 × 2b does.
        sampler = LengthGroupedBatchSampler(
            [len(ids) for ids in train_ids], tcfg.batch_size * accumulation,
            num_replicas=self.world, rank=self.rank, seed=tcfg.seed,
        )  # fmt: skip
        total_steps = max(1, tcfg.epochs * len(sampler))
        if tcfg.max_steps:
            total_steps = min(total_steps, tcfg.max_steps)
        optimizer, scheduler = self._optimizer(total_steps)
        model = paddle.DataParallel(self.model) if self.world > 1 else self.model
        amp = self._amp()
        scaler = paddle.amp.GradScaler() if amp == "float16" else None

        step, start_epoch, skip = 0, 0, 0
        best: dict[str, Any] = {"dev_accuracy": -1.0}
        best_state: dict[str, np.ndarray] | None = None
        latest = self.checkpoints.latest() if tcfg.checkpoint_every else None
        if latest is not None:
            state, meta = Checkpoints.load(latest)
            self._check_layout(latest, meta)
            self.model.set_state_dict(state["model"])
            optimizer.set_state_dict(state["optimizer"])
            best_state = state.get("best")
            step, start_epoch, skip, best = meta["step"], meta["epoch"], meta["batches_done"], meta["best"]
            random.setstate(_tuple_state(meta["python_rng"]))
            paddle.seed(tcfg.seed + step)  # dropout stream restarts deterministically from the step
            if self.rank == 0:
                log.info("resuming from checkpoint step %d (%s)", step, latest)
        resumed_from = step

        progress = _progress(self.rank == 0, total_steps, step)
        metrics_server = (
            _training_metrics(tcfg.metrics_port, self.use_gpu, self.out_dir / "metrics-port")
            if self.rank == 0
            else None
        )
        history: list[dict[str, float]] = []
        trained, loop_seconds = 0, 0.0
        started, cpu_started = time.time(), time.process_time()
        stop = step >= total_steps
        with progress:
            for epoch in range(start_epoch, tcfg.epochs):
                if stop:
                    break
                sampler.set_epoch(epoch)
                model.train()
                # Losses stay on the device until the epoch ends: a float() per step is a
                # host-device sync that stalls the GPU queue.
                losses: list[Any] = []
                seen, t0 = 0, time.time()
                step_started = time.perf_counter()
                for position, indices in enumerate(sampler):
                    if epoch == start_epoch and position < skip:
                        continue
                    wait_started = time.perf_counter()
                    batches = [(micro, self._batch(train_ids, micro)) for micro in _split(indices, accumulation)]
                    loader_wait = time.perf_counter() - wait_started
                    loss = self._step_gradients(model, batches, train_labels, len(indices), amp, scaler)
                    if scaler:
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        optimizer.step()
                    scheduler.step()
                    optimizer.clear_grad()
                    losses.append(loss)
                    seen += len(indices)
                    step += 1
                    if progress.task_ids:
                        progress.update(progress.task_ids[0], completed=step, description=f"epoch {epoch + 1}")
                    if metrics_server:
                        now = time.perf_counter()
                        metrics_server.update(step, epoch + 1, float(loss), len(indices) * self.world, now - step_started,
                                              wait=loader_wait)
                        step_started = now
                    if tcfg.checkpoint_every and step % tcfg.checkpoint_every == 0 and self.rank == 0:
                        self._checkpoint(step, epoch, position + 1, optimizer, best, best_state)
                    if step >= total_steps:
                        stop = True
                        break
                elapsed = time.time() - t0
                loop_seconds += elapsed
                trained += seen * self.world
                record: dict[str, float] = {}
                if seen:  # an epoch resumed at its very end trained nothing; it is only evaluated
                    record = {"train_loss": float(paddle.stack(losses).mean()),
                              "samples_per_second": seen * self.world / max(elapsed, 1e-9)}
                if self.rank == 0:
                    dev = self.evaluate(self.model, dev_ids, dev_labels)
                    record |= {"dev_accuracy": dev["accuracy"], "dev_macro_f1": dev["macro_f1"]}
                    history.append(record)
                    log.info(
                        "epoch %d: train_loss %.4f dev_accuracy %.4f dev_macro_f1 %.4f (%.0f samples/s, step %d)",
                        epoch + 1, record.get("train_loss", float("nan")), dev["accuracy"], dev["macro_f1"],
                        record.get("samples_per_second", 0.0), step,
                    )
                    if run_id:
                        import mlflow

                        mlflow.log_metrics(record, step=epoch + 1)
                    if dev["accuracy"] > best["dev_accuracy"]:
                        best = {"epoch": epoch + 1, "dev_accuracy": dev["accuracy"], "dev_macro_f1": dev["macro_f1"]}
                        best_state = {k: v.numpy().copy() for k, v in self.model.state_dict().items()}
        if self.dump_params and self.rank == 0:
            # the final (not best-on-dev) parameters, for comparing runs parameter by parameter
            np.savez(self.dump_params, **{k: v.numpy() for k, v in self.model.state_dict().items()})
        if self.rank == 0 and best_state is None:
            # resumed from a checkpoint taken at the very last step: nothing left to train, evaluate it
            dev = self.evaluate(self.model, dev_ids, dev_labels)
            best = {"epoch": start_epoch + 1, "dev_accuracy": dev["accuracy"], "dev_macro_f1": dev["macro_f1"]}
            best_state = {k: v.numpy().copy() for k, v in self.model.state_dict().items()}
        train_seconds = time.time() - started
        summary = {
            "world_size": self.world,
            "global_steps": step,
            # steps this run executed: global_steps - resumed_from_step
            "steps_run": step - resumed_from,
            "resumed_from_step": resumed_from,
            "train_seconds": round(train_seconds, 2),
            # CPU seconds of this process: wall time is meaningless on a shared, oversubscribed machine
            "train_cpu_seconds": round(time.process_time() - cpu_started, 2),
            # the optimisation loop alone (no dev evaluation, export or MLflow): benchmarks compare this
            "train_samples_per_second": round(trained / max(loop_seconds, 1e-9), 2),
        }
        if metrics_server:
            metrics_server.stop()
        if self.rank == 0:
            self._finish(run_id, best, best_state, summary, history)
        return {**summary, **best}

    def _step_gradients(
        self, model: Any, batches: list[tuple[list[int], Any]], labels: np.ndarray, total: int, amp: str | None, scaler: Any
    ) -> Any:
        """Forward and backward over one step's micro-batches; the step's mean loss, still on the device."""
        import paddle
        import paddle.nn.functional as F

        step_loss = None
        for i, (micro, (input_ids, token_type_ids)) in enumerate(batches):
            # DataParallel all-reduces on backward; once per step (the last micro-batch) is enough.
            sync = model.no_sync() if self.world > 1 and i < len(batches) - 1 else nullcontext()
            with sync:
                with paddle.amp.auto_cast(dtype=amp) if amp else nullcontext():
                    logits = model(input_ids, token_type_ids=token_type_ids)
                    loss = F.cross_entropy(logits, paddle.to_tensor(labels[micro])).mean()
                # weighted by its share of the step's examples, so the step's gradient is the mean over all of them
                scaled = loss * (len(micro) / total)
                (scaler.scale(scaled) if scaler else scaled).backward()
            step_loss = scaled.detach() if step_loss is None else step_loss + scaled.detach()
        return step_loss

    def _amp(self) -> str | None:
        mode = self.cfg.training.amp
        if mode == "off":
            return None
        if not self.use_gpu:
            log.warning("training.amp=%s needs a GPU; training in float32 on CPU", mode)
            return None
        return {"fp16": "float16", "bf16": "bfloat16"}[mode]

    def _layout(self) -> dict[str, int]:
        """What the data position (epoch, batches done) in a checkpoint means: a resume needs the same."""
        tcfg = self.cfg.training
        return {"world_size": self.world, "batch_size": tcfg.batch_size,
                "grad_accumulation": tcfg.grad_accumulation, "seed": tcfg.seed}

    def _check_layout(self, path: Path, meta: dict[str, Any]) -> None:
        # Checkpoints from before "layout" recorded only the world size, at the top level.
        saved = meta.get("layout", {"world_size": meta.get("world_size", self.world)})
        now = self._layout()
        changed = {key: (value, now[key]) for key, value in saved.items() if key in now and now[key] != value}
        if changed:
            what = ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changed.items())
            raise StepError(
                f"checkpoint {path} was written with a different batch layout ({what}): resuming would "
                "skip the wrong samples. Run with the checkpoint's settings, or delete "
                f"{path.parent} (and the checkpoint prefix in the object store) to start over."
            )

    def _checkpoint(self, step: int, epoch: int, batches_done: int, optimizer: Any, best: dict, best_state: Any) -> None:
        state: dict[str, Any] = {"model": self.model.state_dict(), "optimizer": optimizer.state_dict()}
        if best_state is not None:
            state["best"] = best_state
        meta = {"step": step, "epoch": epoch, "batches_done": batches_done, "best": best,
                "python_rng": random.getstate(), "layout": self._layout()}
        path = self.checkpoints.save(step, state, meta)
        log.info("checkpoint saved: %s", path)

    def _finish(
        self, run_id: str | None, best: dict, best_state: dict | None, summary: dict, history: list[dict[str, float]]
    ) -> None:
        self.model.set_state_dict(best_state)
        model_dir = self.out_dir / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)  # a rerun replaces the model, never mixes two
        self.ernie.export(self.model, self.tokenizer, self.labels, self.cfg.model, model_dir)
        training = {"mlflow_run_id": run_id, "best_epoch": best["epoch"], "dev_accuracy": best["dev_accuracy"],
                    "dev_macro_f1": best["dev_macro_f1"], "git_sha": self.git_sha, **summary}
        (model_dir / "training.json").write_text(json.dumps(training, indent=2))
        log.info("best dev accuracy %.4f at epoch %d; model exported to %s", best["dev_accuracy"], best["epoch"], model_dir)
        if run_id:
            import mlflow

            mlflow.log_metrics({"best_dev_accuracy": best["dev_accuracy"], "best_dev_macro_f1": best["dev_macro_f1"]})
            for name in ("label_map.json", "model_config.json", "training.json"):
                mlflow.log_artifact(str(model_dir / name), artifact_path="model-info")
            if (self.data_dir / "stats.json").is_file():
                mlflow.log_artifact(str(self.data_dir / "stats.json"), artifact_path="model-info")
            if history:
                from steps.runtime import plots

                curves = plots.plot_curves(history, self.out_dir / plots.PLOTS_DIR / plots.CURVES_PNG)
                mlflow.log_artifact(str(curves), artifact_path=plots.PLOTS_DIR)


def _split(indices: Sequence[int], parts: int) -> list[list[int]]:
    """A step's examples as `parts` micro-batches (gradient accumulation); never an empty one."""
    return [chunk.tolist() for chunk in np.array_split(np.asarray(indices), parts) if len(chunk)]


def _tuple_state(state: Any) -> Any:
    """`random.getstate()` after a JSON round trip (lists back to tuples)."""
    return tuple(tuple(s) if isinstance(s, list) else s for s in state)


def _progress(enabled: bool, total: int, done: int) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), disable=not enabled,
    )
    if enabled:
        progress.add_task("training", total=total, completed=done)
    return progress


def _training_metrics(port: int, use_gpu: bool, port_file: Path) -> Any:
    """Rank 0 serves Prometheus metrics when `training.metrics_port` is set (docs/observability.md)."""
    if not port:
        return None
    from steps.runtime.metrics import TrainingMetrics

    metrics = TrainingMetrics(gpu=use_gpu)
    bound = metrics.start(port, port_file=port_file)
    log.info("training metrics on port %d (/metrics)", bound)
    return metrics


def seed_everything(seed: int) -> None:
    import paddle

    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)

    def body() -> int:
        cfg = stepargs.config_from_args(args)
        ws = args.workspace
        data_uri = workspace.join(ws, "data")
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
            if s3.is_s3(ws) and (local / "model").is_dir():
                workspace.stage_out(local / "model", workspace.join(ws, "model"), cfg.storage.endpoint_url)
            return stepargs.EXIT_OK
        trainer = Trainer(cfg, data_dir, local, git_sha=args.git_sha, dump_params=args.dump_params)
        trainer.run()
        if trainer.rank == 0 and s3.is_s3(ws):
            workspace.stage_out(local / "model", workspace.join(ws, "model"), cfg.storage.endpoint_url)
            if (local / "checkpoints").is_dir():
                workspace.stage_out(local / "checkpoints", workspace.join(ws, "checkpoints"), cfg.storage.endpoint_url)
        return stepargs.EXIT_OK

    return stepargs.run_step("train", body)


if __name__ == "__main__":
    sys.exit(main())
