"""The ERNIE-CRF head for token classification (`model.crf_head`): a linear-chain CRF on the model's per-character
scores, trained with them.

PaddleNLP's `LinearChainCrf` holds the [from, to] transition scores (no start and stop tags, so a sequence's score
is Σ emission + Σ transition, exactly what `decode_tags` in steps/runtime/data/tasks/ner.py maximises) and scores
the gold tag sequence (`gold_score`). The loss is its negative log-likelihood: the log of the sum over every tag
sequence (the normaliser, the forward algorithm below) minus the gold score. The normaliser is computed here, not by
`LinearChainCrf.forward`: in paddlenlp 2.8.1 (paddlenlp/layers/crf.py) that one adds `transitions[to, from]` where
`gold_score` and `ViterbiDecoder` read `transitions[from, to]` (PaddlePaddle/PaddleNLP#1401), so its
`LinearChainCrfLoss` is not a likelihood unless the matrix is symmetric (tests/test_crf_head.py shows both). The
layer is a sublayer of the model (`model.crf`), so the optimizer, DataParallel, the checkpoints and a
resumed run carry the transitions like any other parameter. The exported graph stays the encoder's: its logits are
the emissions, and the learned matrix goes into the export's tag_transitions.json (steps/runtime/data/
tag_transitions.py), which every decode reads.

A window is [CLS] + characters + [SEP] + padding with targets IGNORE_INDEX at [CLS], [SEP] and padding; the CRF sees
the characters only (positions 1 … n), so no transition is learned into or out of [CLS] and [SEP].
"""

from __future__ import annotations

from typing import Any

import numpy as np
import paddle
from paddle import nn

from steps.runtime.data.tasks.base import IGNORE_INDEX

# The transitions' peak learning rate, whatever the encoder's: 7 × 7 scores that every character of every window
# updates need a rate of their own, and a fine-tune of ERNIE 3.0 runs its encoder at 5e-5 (PaddleNLP's ERNIE-CRF
# example multiplies its 5e-5 by 100). 0.03 is 10 × the local tasks' 3e-3, the rate measured (docs/benchmarks.md).
CRF_RATE = 0.03


def attach(model: Any, num_labels: int) -> Any:
    """`model` with a CRF sublayer `crf` whose transition scores start at 0 (decoding starts as without)."""
    from paddlenlp.layers import LinearChainCrf

    crf = LinearChainCrf(num_labels, crf_lr=1.0, with_start_stop_tag=False)  # the rate: own_rate
    crf.transitions.set_value(paddle.zeros([num_labels, num_labels], dtype="float32"))
    model.crf = crf
    return model


def unwrapped(model: Any) -> Any:
    """The model inside DataParallel and WithLoss (the one the heads are attached to)."""
    inner = model._layers if isinstance(model, paddle.DataParallel) else model
    return inner.model if isinstance(inner, WithLoss) else inner


def of(model: Any) -> Any | None:
    """The CRF sublayer of `model` (through DataParallel and WithLoss), None when it has none."""
    return getattr(unwrapped(model), "crf", None)


def own_rate(model: Any) -> tuple[list[Any], float]:
    """The parameters that learn at a peak rate of their own (the transitions; none without a CRF), and that rate
    (optimization.make_optimizer applies it)."""
    crf = of(model)
    return ([crf.transitions] if crf is not None else []), CRF_RATE


class WithLoss(nn.Layer):
    """The module the train step runs (and DataParallel wraps): the model's forward and the CRF loss in one forward.
    DataParallel's reducer finds the parameters a step uses by walking back from what forward returns; transitions
    used only in a loss computed after it would be marked unused, and their gradient arriving in backward stops
    every rank ("parameter … has been ready before")."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, token_type_ids: Any, targets: Any) -> Any:
        logits = self.model(input_ids, token_type_ids=token_type_ids)
        return loss(self.model.crf, logits.astype("float32"), targets)


def training_module(model: Any) -> Any:
    """What the train step runs for `model`: WithLoss where it has a CRF head, else the model itself."""
    return WithLoss(model) if getattr(model, "crf", None) is not None else model


def loss(crf: Any, logits: Any, targets: Any) -> Any:
    """The gold sequences' negative log-likelihood per tagged character (so the scale, and the learning rate that
    suits it, stay those of the per-character cross-entropy): logits [batch, seq, tags] float32, targets [batch, seq]
    with IGNORE_INDEX outside the characters, whose tags run from position 1 without a gap."""
    valid = targets != IGNORE_INDEX
    lengths = valid.astype("int64").sum(axis=1)
    emissions = logits[:, 1:]
    labels = paddle.where(valid, targets, paddle.zeros_like(targets))[:, 1:]  # gathered before masking: in range
    keep = lengths > 0
    if not bool(keep.all()):  # a window without characters has nothing to score (and the CRF needs length >= 1)
        emissions, labels, lengths = emissions[keep], labels[keep], lengths[keep]
    nll = normaliser(crf.transitions, emissions, lengths) - crf.gold_score(emissions, labels, lengths)
    return nll.sum() / lengths.sum().astype("float32").clip(min=1.0)


def normaliser(transitions: Any, emissions: Any, lengths: Any) -> Any:
    """log Σ over every tag sequence of exp(Σ_t emissions[t, tag_t] + Σ_t transitions[tag_t−1, tag_t]), per
    sequence of `lengths[b]` (>= 1) positions (the forward algorithm): [batch]."""
    alpha = emissions[:, 0]  # [batch, to]
    for t in range(1, emissions.shape[1]):
        # [batch, from, 1] + [from, to] -> log-sum over from
        step = paddle.logsumexp(alpha.unsqueeze(2) + transitions, axis=1) + emissions[:, t]
        alpha = paddle.where((lengths > t).unsqueeze(1), step, alpha)  # a finished sequence keeps its last alpha
    return paddle.logsumexp(alpha, axis=1)


def transitions(model: Any) -> np.ndarray | None:
    """The learned [from, to] scores as float64, None when the model has no CRF head."""
    crf = of(model)
    return None if crf is None else crf.transitions.numpy().astype("float64")
