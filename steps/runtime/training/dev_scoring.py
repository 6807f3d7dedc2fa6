"""Rank 0's scoring on the dev split: each epoch's scores, and after training the tag transitions weighed and the
NER baseline folded in by what scores best on dev. A scoring holds the dev split and its logits in memory while it
runs (the dev split is a fixed fraction of the data; steps/runtime/training/train_data.py reads it for each
scoring); the counted tag transitions read the train split one row at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from steps.runtime import config_names
from steps.runtime.data import split_index, tag_transitions, tasks
from steps.runtime.data.tasks import Task
from steps.runtime.data.tasks.ner import row_tags
from steps.runtime.runner import StepError
from steps.runtime.training.train_data import read_split

EVAL_BATCH_ROWS = 128

log = logging.getLogger("steps.train")


class DevScoring:
    """The task's metrics of a model on dev rows, answered as the exported model answers them."""

    def __init__(self, cfg: PipelineConfig, task: Task, tokenizer: Any, labels: dict[int, str], data_dir: Path):
        self.cfg, self.task, self.tokenizer, self.labels, self.data_dir = cfg, task, tokenizer, labels, data_dir

    def evaluate(self, model: Any, rows: list[dict[str, Any]]) -> dict[str, float]:
        """The task's metrics (`spec.metrics`) of `model` on `rows`, answered the way the exported model answers
        (with a CRF head: decoded with its transition scores as they are now)."""
        from steps.runtime.weights import crf_head

        return self.scorer(model, rows)(crf_head.transitions(model))

    def scorer(self, model: Any, rows: list[dict[str, Any]]) -> Callable[[np.ndarray | None], dict[str, float]]:
        """`model`'s logits of `rows`, computed once, and the task's metrics of the answers decoded from them with
        the tag-transition scores given (None: without)."""
        import paddle

        def forward(input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
            logits = model(paddle.to_tensor(input_ids), token_type_ids=paddle.to_tensor(token_type_ids))
            return logits.astype("float32").numpy()

        instances = [self.task.instance(r) for r in rows]
        encoded = self.task.encode(self.tokenizer, instances, self.cfg.model.max_seq_len)
        model.eval()
        with paddle.no_grad():
            logits = tasks.run_rows(forward, encoded, EVAL_BATCH_ROWS, self.tokenizer.pad_token_id)
        model.train()

        def metrics(transitions: np.ndarray | None) -> dict[str, float]:
            answers = self.task.results(instances, encoded, logits, self.labels, transitions)
            report = self.task.scores(rows, answers, self.labels)
            return {name: float(report[name]) for name in self.task.spec.metrics}

        return metrics

    def fit_transitions(self, model: Any, model_dir: Path, best: dict[str, Any]) -> None:
        """`model.tag_transitions`: count them on the train split (`model.crf_head`: the CRF's, learned), weigh them
        by what scores best on dev with the exported parameters, write tag_transitions.json beside the export; the
        dev score decoded so into `best`."""
        from steps.runtime.weights import crf_head

        names = [self.labels[i] for i in sorted(self.labels)]
        learned = crf_head.transitions(model)
        if learned is not None:
            log_probs, source = learned, "learned"
        else:
            train = split_index.SplitRows(self.data_dir / "train.jsonl", self.task.row_keys)
            log_probs, source = tag_transitions.counted((row_tags(r) for r in train), names), "counted"
        metric = config_names.gate_metric(self.cfg)
        score = self.scorer(model, read_split(self.task, self.data_dir, "dev", self.labels))
        weight, dev = tag_transitions.choose(log_probs, lambda t: score(t)[metric])
        tag_transitions.write(model_dir, names, log_probs, weight, dev, source)
        best[f"dev_{metric}_decoded"] = dev[str(weight)]
        log.info("tag transitions (%s): weight %g (dev %s by weight: %s)", source, weight, metric, dev)

    def fold_baseline(self, model: Any, best: dict[str, Any]) -> dict[str, Any]:
        """`model.baseline_product`: the NER baseline's CRF (the store's, or fitted now on the same splits, as
        evaluate would) folded into the best parameters where that scores better on dev than `best` (their epoch's
        record) did; what was done."""
        from steps.runtime.data import baselines
        from steps.runtime.weights import baseline_product

        try:
            fitted = baselines.fit(self.cfg, self.data_dir)
        except baselines.BaselineError as exc:
            raise StepError(f"{exc}; or set model.baseline_product: 0 to train without folding it in") from None
        if not fitted.weights:  # a guard: the store's key digests the baselines' code, so a stored CRF has them
            raise StepError(
                f"the stored {fitted.kind} baseline {fitted.key[:12]} has no weights to fold in; set "
                "model.baseline_product: 0, or remove it from the store's baselines/ to fit it again"
            )
        dev, metric = read_split(self.task, self.data_dir, "dev", self.labels), config_names.gate_metric(self.cfg)
        outcome = baseline_product.fold_if_better(
            model, fitted.weights, self.cfg.model.baseline_product, self.tokenizer, self.labels,
            best[f"dev_{metric}"], lambda: self.evaluate(model, dev)[metric],
        )  # fmt: skip
        log.info("baseline product (weight %(weight)g): dev %(dev_before).4f -> %(dev_after).4f, kept %(kept)s; "
                 "%(folded)d baseline features folded, left out: %(unknown_character)d of [UNK] characters, "
                 "%(outside_vocabulary)d n-grams outside the table's vocabulary, %(no_table)d without a table",
                 outcome)  # fmt: skip
        return outcome
