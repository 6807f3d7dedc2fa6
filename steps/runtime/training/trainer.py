"""The ERNIE trainer behind `steps/train.py`: one process of the data-parallel job, from data to the exported
best-on-dev model, resumable from its checkpoints. What a row is, its target, its loss and its dev scores come
from the task type (steps/runtime/data/tasks/); the best epoch is the one with the best dev gate metric. The train
split is read and encoded a batch at a time (train_data.py); rank 0 scores on dev with dev_scoring.py."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from paddle_mlops_core.contracts import CHECKPOINTS, PRETRAINED_RECORD
from steps.runtime import config_names
from steps.runtime.data import labelled_text, tasks
from steps.runtime.runner import StepError, StepFailed, StepStopped
from steps.runtime.training import dygraph, graceful_stop, optimization, run_id
from steps.runtime.training import snapshot as train_snapshot
from steps.runtime.training import tracking as train_tracking
from steps.runtime.training.checkpoint_policy import Checkpointer
from steps.runtime.training.checkpoint_store import check_layout
from steps.runtime.training.dev_scoring import DevScoring
from steps.runtime.training.graceful_stop import Phase, ScoringInterrupted, StopDecision
from steps.runtime.training.progress import LiveProgress
from steps.runtime.training.sampler import LengthGroupedBatchSampler
from steps.runtime.training.state import Setup, TrainState, seed_everything, summary
from steps.runtime.training.trace import StepTrace
from steps.runtime.training.train_data import DevSplit, TrainData
from steps.runtime.weights import pretrained

log = logging.getLogger("steps.train")


class Trainer:
    """One process of the data-parallel job; rank 0 evaluates, exports, logs and checkpoints."""

    def __init__(
        self,
        cfg: PipelineConfig,
        data_dir: Path,
        out_dir: Path,
        git_sha: str,
        dump_params: Path | None = None,
        data_uri: str | None = None,
        checkpoint_root: str | None = None,
        explicit_run_id: str | None = None,
        parent_run_id: str = "",
    ) -> None:
        """`data_uri`: where `data_dir` was staged from (the workspace data/): the splits' source in MLflow.
        `checkpoint_root`: where runs keep their checkpoints (`<root>/<task>/<run id>/checkpoints/`; default
        `<out_dir>/train`); `explicit_run_id`: the `run-id` parameter (empty: the training inputs' digest);
        `parent_run_id`: finetune-batch's parent MLflow run, the training run's parent (tracking.start_run)."""
        import paddle
        import paddle.distributed as dist

        from steps.runtime.weights import ernie

        self.cfg, self.data_dir, self.out_dir, self.git_sha = cfg, data_dir, out_dir, git_sha
        self.dump_params, self.data_uri, self.parent_run_id = dump_params, data_uri, parent_run_id
        self.ernie = ernie
        self.task = tasks.for_config(cfg)
        self.world = dist.get_world_size()
        self.use_gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
        paddle.set_device(f"gpu:{dist.ParallelEnv().device_id}" if self.use_gpu else "cpu")
        if self.world > 1:
            dist.init_parallel_env()
        self.rank = dist.get_rank()
        self.labels = labelled_text.read_label_map(data_dir / "label_map.json")
        self.stats = json.loads((data_dir / "stats.json").read_text()) if (data_dir / "stats.json").is_file() else {}
        self.run_id = run_id.run_id(explicit_run_id, git_sha, cfg, data_dir, self._layout())
        root = (checkpoint_root or str(out_dir / "train")).rstrip("/")
        self.run_uri = f"{root}/{cfg.task}/{self.run_id}"  # the run's folder: its checkpoints, its workers' logs
        self.checkpointer = Checkpointer(cfg, f"{self.run_uri}/{CHECKPOINTS}", self.rank)
        self.stop = StopDecision(self.world, self.use_gpu)
        self.trace = StepTrace(self.rank)
        seed_everything(cfg.training.seed)
        self.tokenizer, self.model = self._build()
        self.scoring = DevScoring(cfg, self.task, self.tokenizer, self.labels, data_dir)
        graceful_stop.REQUEST.arm()  # after whatever building the model imported

    def _build(self) -> tuple[Any, Any]:
        """The tokenizer and model: the pretrained weights' own tokenizer and encoder with a new head, or the small
        from-scratch model on prepare-data's character vocabulary."""
        mcfg = self.cfg.model
        directory = self._pretrained_dir()
        if directory is not None:
            model = self.ernie.load_pretrained(directory, len(self.labels), mcfg)
            pretrained.check_length(self.cfg, str(mcfg.pretrained), model.config.max_position_embeddings)
            return self.ernie.load_tokenizer(directory), model
        vocab = self.data_dir / "vocab.txt"
        if not vocab.is_file():
            raise StepError(f"{vocab} does not exist; prepare-data writes it when model.pretrained is null.")
        tokenizer = self.ernie.load_tokenizer(vocab)
        return tokenizer, self.ernie.build_model(mcfg, len(tokenizer.vocab), len(self.labels), tokenizer.pad_token_id)

    def _pretrained_dir(self) -> Path | None:
        """Where the weights are (a name: the digest prepare-data resolved, fetched and verified); None from scratch.
        Sets `self.provenance`, what MLflow and the export record of them."""
        mcfg = self.cfg.model
        self.provenance: dict[str, Any] = {"pretrained": mcfg.pretrained}
        if mcfg.pretrained_name is None:
            if mcfg.pretrained is None:
                return None
            return self.ernie.stage_pretrained(mcfg.pretrained, self.cfg.storage.endpoint_url)
        record = pretrained.read_record(self.data_dir)
        if record is None or record.get("name") != mcfg.pretrained_name:
            raise StepError(
                f"{self.data_dir / PRETRAINED_RECORD} does not resolve model.pretrained {mcfg.pretrained_name!r}; "
                "rerun prepare-data with this configuration"
            )
        if record.get("from_scratch"):
            log.warning("training the small model from scratch: %s (model.scratch_if_unstaged)", record["from_scratch"])
            self.provenance = {"pretrained": None, "pretrained_unstaged": mcfg.pretrained_name}
            return None
        directory, self.provenance = pretrained.materialize(record, self.cfg)
        log.info("fine-tuning %s (digest %s)", mcfg.pretrained_name, self.provenance["pretrained_digest"][:12])
        return directory

    def _batch(self, setup: Setup, indices: Sequence[int], trained: list[list[int]]) -> tuple[Any, Any, Any]:
        """The train rows at `indices`, read and encoded now, as tensors; their model rows' ids added to `trained`."""
        import paddle

        input_ids, token_type_ids, targets, encoded = setup.train.batch(indices)
        trained.extend(encoded.input_ids)
        return paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids), paddle.to_tensor(targets)

    def run(self) -> dict[str, Any]:
        """Train (resuming from the run's newest complete checkpoint), export the best epoch; the summary.
        StepStopped when a SIGTERM stopped it (graceful_stop.py: at once in setup and while finishing, after a
        checkpoint while training)."""
        resume = self._fetch_resume()
        if self.rank != 0:
            return self._train(None, resume)
        mlflow_run = resume.meta.get("mlflow_run_id") if resume else None
        with train_tracking.start_run(
            self.cfg, self.git_sha, self.world, self.stats, self.data_dir, self.data_uri, self.provenance,
            resume_run_id=mlflow_run, resumed_from=resume.step if resume else 0, parent_run_id=self.parent_run_id,
        ) as tracked:  # fmt: skip
            return self._train(tracked, resume)

    def _fetch_resume(self) -> train_snapshot.Snapshot | None:
        """Every rank loads the same checkpoint, or none: a rank on another step would wait in a collective forever."""
        import paddle
        import paddle.distributed as dist

        resume = self.checkpointer.fetch()
        step = resume.step if resume else 0
        if self.world > 1:
            low, high = paddle.to_tensor([-step], dtype="int64"), paddle.to_tensor([step], dtype="int64")
            dist.all_reduce(low, op=dist.ReduceOp.MAX)
            dist.all_reduce(high, op=dist.ReduceOp.MAX)
            lowest, highest = -int(low.numpy().item()), int(high.numpy().item())
            if lowest != highest:
                raise StepFailed(f"the ranks found different checkpoints in {self.checkpointer.uri} "
                                 f"(steps {lowest}..{highest}); retry")  # fmt: skip
        if resume is not None:
            check_layout(f"{self.checkpointer.uri}/{resume.step}", resume.meta.get("layout"), self._layout())
        return resume

    def _train(self, run_id: str | None, resume: train_snapshot.Snapshot | None) -> dict[str, Any]:
        import paddle

        # Optimizer accumulators are named when first used; a fresh name scope makes the names in a
        # checkpoint match however many optimizers this process created before (tests, notebooks).
        with paddle.utils.unique_name.guard(), dygraph.dense_kernels_on_cpu(self.use_gpu):
            return self._train_loop(run_id, resume)

    def _train_loop(self, run_id: str | None, resume: train_snapshot.Snapshot | None) -> dict[str, Any]:
        setup = self._setup()
        state = self._resume(setup, resume)
        tcfg = self.cfg.training
        live = LiveProgress(self.rank == 0, setup.total_steps, state.step, self.world, tcfg.metrics_port,
                            self.use_gpu, self.out_dir / "metrics-port")  # fmt: skip
        started, cpu_started = time.time(), time.process_time()
        try:
            with live:
                self._epochs(setup, state, live, run_id)
        finally:
            live.stop()
        # Training is over and the end-of-training checkpoint is uploading: a SIGTERM from here on exits at once, and
        # the step waits for that upload (steps/train.py), so a resume only finishes again.
        graceful_stop.REQUEST.enter(Phase.FINISHING)
        if self.dump_params and self.rank == 0:
            # the final (not best-on-dev) parameters, for comparing runs parameter by parameter
            np.savez(self.dump_params, **{k: v.numpy() for k, v in self.model.state_dict().items()})
        if self.rank == 0 and state.best_state is None:
            # resumed from a checkpoint taken at the very last step: nothing left to train, evaluate it
            dev = self.scoring.evaluate(self.model, setup.dev.rows)
            state.keep_best(state.start_epoch + 1, dev, self.model)
        result = summary(self.world, state, started, cpu_started)
        if self.rank == 0:
            self._finish(run_id, state, result)
        return {**result, **state.best, "run_id": self.run_id}

    def _epochs(self, setup: Setup, state: TrainState, live: LiveProgress, run_id: str | None) -> None:
        """Train and score epoch after epoch; the end of training's checkpoint is left uploading."""
        last = self.cfg.training.epochs - 1
        graceful_stop.REQUEST.enter(Phase.TRAINING)
        for epoch in range(state.start_epoch, self.cfg.training.epochs):
            # A run resumed at its last step still scores the epoch it stopped in, as the uninterrupted run did.
            if state.step >= setup.total_steps and not (epoch == state.start_epoch and state.skip):
                break
            record, done = self._train_epoch(setup, state, epoch, live, run_id)
            if self.rank == 0 and not self._scored(setup, state, epoch, record, run_id):
                # SIGTERM during the scoring: the state after the epoch's last step, as a stop at that step boundary
                # saves it; the resume scores the epoch again.
                capture = partial(self._snapshot, setup, state, epoch, done, run_id)
            else:
                # After the dev evaluation, so the checkpoint holds this epoch's best; it resumes at the next epoch.
                capture = partial(self._snapshot, setup, state, epoch + 1, 0, run_id)
                final = epoch == last or state.step >= setup.total_steps
                self.checkpointer.at_epoch_end(state.step, final, capture)
            # Every rank, rank 0 once it scored (or was interrupted): the other ranks wait for it here.
            if self.stop.after_epoch():
                self._stop(state, capture)

    def _scored(
        self, setup: Setup, state: TrainState, epoch: int, record: dict[str, float], run_id: str | None
    ) -> bool:
        """Rank 0: `_score_epoch`, False when a SIGTERM interrupted it (then the state is as before it)."""
        try:
            self._score_epoch(setup, state, epoch, record, run_id)
        except ScoringInterrupted:
            log.warning("SIGTERM during the dev scoring of epoch %d: checkpointing its last step %d", epoch + 1,
                        state.step)  # fmt: skip
            return False
        return True

    def _stop(self, state: TrainState, capture: Callable[[], Any]) -> None:
        """Every rank, once they agreed to stop: rank 0 checkpoints this step, all wait until it is in the store."""
        graceful_stop.REQUEST.enter(Phase.STOPPING)
        self.checkpointer.final(state.step, capture)
        self.stop.barrier()
        raise StepStopped(f"SIGTERM: stopped after step {state.step}, checkpoint in {self.checkpointer.uri}")

    def _setup(self) -> Setup:
        import paddle

        from steps.runtime.weights import char_ngrams, crf_head

        tcfg = self.cfg.training
        # the train split by row number, encoded a batch at a time (train_data.py): nothing here reads all of it
        train = TrainData(self.cfg, self.task, self.tokenizer, self.data_dir, self.labels)
        vocabulary = char_ngrams.apply_table(self.model, self.data_dir)  # prepare-data counted the n-grams once
        if vocabulary and self.rank == 0:
            log.info("bigram table: %(rows)d rows for the %(frequent)d of %(distinct)d train bigrams seen at least "
                     "char_ngram_min_count times (%(slot_clashes)d lost to slot clashes)", vocabulary)  # fmt: skip
            if "trigram_rows" in vocabulary:
                log.info("trigram table: %(trigram_rows)d rows of %(trigrams_distinct)d train trigrams (%(trigram_"
                         "slot_clashes)d lost to slot clashes)", vocabulary)  # fmt: skip
        # One sampler batch is one optimizer step (all its micro-batches), so accumulating 2 × b
        # trains exactly the batches that 1 × 2b does.
        sampler = LengthGroupedBatchSampler(
            train.lengths(), tcfg.batch_size * tcfg.grad_accumulation,
            num_replicas=self.world, rank=self.rank, seed=tcfg.seed,
        )  # fmt: skip
        total_steps = max(1, tcfg.epochs * len(sampler))
        if tcfg.max_steps:
            total_steps = min(total_steps, tcfg.max_steps)
        optimizer, scheduler = optimization.make_optimizer(self.cfg, self.model, total_steps)
        trained = crf_head.training_module(self.model)
        model = paddle.DataParallel(trained) if self.world > 1 else trained
        amp = optimization.amp_dtype(tcfg.amp, self.use_gpu)
        scaler = paddle.amp.GradScaler() if amp == "float16" else None
        dev = DevSplit(self.task, self.data_dir, self.labels)  # read when rank 0 first scores it
        return Setup(train, dev, sampler, total_steps, optimizer, scheduler, model, amp, scaler)

    def _resume(self, setup: Setup, resume: train_snapshot.Snapshot | None) -> TrainState:
        """A fresh state, or the checkpoint's: parameters, optimizer and LR schedule, loss scaler, the generators'
        states and the data position restored, so the run continues exactly where the checkpoint was taken."""
        if resume is None:
            log.info("run %s: no checkpoint in %s, training from the start", self.run_id, self.checkpointer.uri)
            return TrainState()
        train_snapshot.restore(resume.arrays, self.model, setup.optimizer, setup.scaler, resume.meta)
        train_snapshot.set_rng_states(resume.rng, self.use_gpu)
        state = TrainState.resumed(resume.meta, resume.arrays.get("best"))
        self.checkpointer.resumed(state.step)
        if self.rank == 0:
            log.info("resuming from checkpoint step %d (%s/%d)", state.step, self.checkpointer.uri, state.step)
        return state

    def _snapshot(self, setup: Setup, state: TrainState, epoch: int, batches_done: int, run_id: str | None) -> Any:
        """Rank 0: the state after this step, copied off the training tensors (training goes on meanwhile)."""
        meta = {**state.position(epoch, batches_done), "layout": self._layout(), "run_id": self.run_id,
                "mlflow_run_id": run_id, "git_sha": self.git_sha}  # fmt: skip
        return train_snapshot.capture(state.step, self.model, setup.optimizer, setup.scaler, state.best_state, meta,
                                      self.use_gpu)  # fmt: skip

    def _after_step(self, setup: Setup, state: TrainState, epoch: int, done: int, run_id: str | None) -> None:
        """At a step boundary: stop if any rank was signalled (after a final checkpoint), else checkpoint if due."""
        capture = partial(self._snapshot, setup, state, epoch, done, run_id)
        if self.stop.after_step(state.step):
            self._stop(state, capture)
        self.checkpointer.after_step(state.step, capture)

    def _train_epoch(
        self, setup: Setup, state: TrainState, epoch: int, live: LiveProgress, run_id: str | None
    ) -> tuple[dict[str, float], int]:
        """One epoch, or what a resumed one has left; its train loss and throughput (empty when it trained nothing)
        and the batches of it done (the data position after its last step)."""
        import paddle

        tcfg = self.cfg.training
        setup.sampler.set_epoch(epoch)
        setup.model.train()
        # Losses stay on the device until the epoch ends: a float() per step is a
        # host-device sync that stalls the GPU queue.
        losses: list[Any] = []
        seen, t0 = 0, time.time()
        done = state.skip if epoch == state.start_epoch else 0
        live.start_epoch()
        for position, indices in enumerate(setup.sampler):
            if epoch == state.start_epoch and position < state.skip:
                continue
            if state.step >= setup.total_steps:
                break
            done = position + 1
            wait_started = time.perf_counter()
            micro, trained = optimization.split(indices, tcfg.grad_accumulation), list[list[int]]()
            batches = [(part, self._batch(setup, part, trained)) for part in micro]
            loader_wait = time.perf_counter() - wait_started
            loss = optimization.step_gradients(setup.model, batches, len(indices), setup.amp, setup.scaler)
            self.trace.record(state.step + 1, epoch, setup.optimizer.get_lr(), trained)
            optimization.apply_step(setup.optimizer, setup.scheduler, setup.scaler)
            losses.append(loss)
            seen += len(indices)
            state.step += 1
            live.step(state.step, epoch + 1, loss, len(indices), wait=loader_wait)
            # Checkpoint capture counts as training time: the benchmarks measure what checkpoints cost.
            self._after_step(setup, state, epoch, position + 1, run_id)
        elapsed = time.time() - t0
        state.loop_seconds += elapsed
        state.trained += seen * self.world
        if not seen:  # an epoch resumed at its very end trained nothing; it is only evaluated
            return {}, done
        return {"train_loss": float(paddle.stack(losses).mean()),
                "samples_per_second": seen * self.world / max(elapsed, 1e-9)}, done  # fmt: skip

    def _score_epoch(
        self, setup: Setup, state: TrainState, epoch: int, record: dict[str, float], run_id: str | None
    ) -> None:
        """Rank 0 after each epoch: dev scores into the history, the log and MLflow; keep the best parameters.
        ScoringInterrupted (SIGTERM) before any of that changed."""
        with graceful_stop.REQUEST.during(Phase.SCORING):
            self.trace.before_scoring(epoch)
            dev = self.scoring.evaluate(self.model, setup.dev.rows)
        record |= {f"dev_{k}": v for k, v in dev.items()}
        state.history.append(record)
        scores = " ".join(f"dev_{k} {v:.4f}" for k, v in dev.items())
        log.info(
            "epoch %d: train_loss %.4f %s (%.0f samples/s, step %d)", epoch + 1,
            record.get("train_loss", float("nan")), scores, record.get("samples_per_second", 0.0), state.step,
        )  # fmt: skip
        if run_id:
            train_tracking.log_epoch(record, epoch + 1)
        if state.improves(dev, config_names.gate_metric(self.cfg)):
            state.keep_best(epoch + 1, dev, self.model)

    def _layout(self) -> dict[str, int]:
        """What the data position (epoch, batches done) in a checkpoint means: a resume needs the same."""
        tcfg = self.cfg.training
        return {"world_size": self.world, "batch_size": tcfg.batch_size,
                "grad_accumulation": tcfg.grad_accumulation, "seed": tcfg.seed}  # fmt: skip

    def _finish(self, run_id: str | None, state: TrainState, result: dict[str, Any]) -> None:
        """Export the best-on-dev parameters with `training.json`, and record them in MLflow."""
        best = state.best
        self.model.set_state_dict(state.best_state)
        if self.cfg.model.baseline_product:
            result["baseline_product"] = self.scoring.fold_baseline(self.model, best)
        model_dir = self.out_dir / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)  # a rerun replaces the model, never mixes two
        self.ernie.export(self.model, self.tokenizer, self.labels, self.cfg.model, model_dir, self.provenance)
        if self.cfg.model.tag_transitions or self.cfg.model.crf_head:
            self.scoring.fit_transitions(self.model, model_dir, best)
        dev = {k: v for k, v in best.items() if k.startswith("dev_")}
        training = {"mlflow_run_id": run_id, "task": self.cfg.task, "task_type": self.cfg.model.task,
                    "best_epoch": best["epoch"], **dev, "git_sha": self.git_sha, "run_id": self.run_id,
                    **result}  # fmt: skip
        (model_dir / "training.json").write_text(json.dumps(training, indent=2))
        metric = f"dev_{self.cfg.gate.metric}"
        log.info("best %s %.4f at epoch %d; model exported to %s", metric, best[metric], best["epoch"], model_dir)
        if run_id:
            train_tracking.log_best(best, model_dir, self.data_dir, state.history, self.out_dir)
