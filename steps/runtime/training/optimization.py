"""One optimizer step of the ERNIE trainer: the AdamW recipe, mixed precision, and gradient accumulation over
micro-batches."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, Literal

import numpy as np

from paddle_mlops_core.config import PipelineConfig
from steps.runtime.data.tasks import IGNORE_INDEX

# The autocast dtypes (paddle.amp.auto_cast's `dtype`) of `training.amp`'s modes.
AmpDtype = Literal["float16", "bfloat16"]
AMP_DTYPES: dict[str, AmpDtype] = {"fp16": "float16", "bf16": "bfloat16"}

log = logging.getLogger("steps.train")


def make_optimizer(cfg: PipelineConfig, model: Any, total_steps: int) -> tuple[Any, Any]:
    """AdamW with linear warmup and decay over `total_steps`; (optimizer, LR scheduler)."""
    import paddle
    from paddlenlp.transformers import LinearDecayWithWarmup

    tcfg = cfg.training
    set_peak_rates(model, tcfg.learning_rate)
    scheduler = LinearDecayWithWarmup(tcfg.learning_rate, total_steps, tcfg.warmup_ratio)
    # Standard transformer recipe: no weight decay on biases and LayerNorm.
    decay = {p.name for n, p in model.named_parameters() if not any(k in n for k in ("bias", "norm"))}
    optimizer = paddle.optimizer.AdamW(
        learning_rate=scheduler,
        parameters=model.parameters(),
        weight_decay=tcfg.weight_decay,
        apply_decay_param_fun=lambda name: name in decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )
    return optimizer, scheduler


def set_peak_rates(model: Any, learning_rate: float) -> None:
    """The heads' parameters that learn at a peak rate of their own, whatever the encoder's (the CRF's transitions,
    the wide half's weights): each one's rate as a multiple of the schedule's, which the optimizer reads from the
    parameter, so that it peaks at the head's rate when the schedule peaks at `learning_rate`."""
    from steps.runtime.weights import crf_head, wide_scores

    for parameters, rate in (crf_head.own_rate(model), wide_scores.own_rate(model)):
        for parameter in parameters:
            parameter.optimize_attr["learning_rate"] = rate / learning_rate


def amp_dtype(mode: str, use_gpu: bool) -> AmpDtype | None:
    """The autocast dtype for `training.amp`, or None for float32 (always on CPU)."""
    if mode == "off":
        return None
    if not use_gpu:
        log.warning("training.amp=%s needs a GPU; training in float32 on CPU", mode)
        return None
    return AMP_DTYPES[mode]


def split(indices: Sequence[int], parts: int) -> list[list[int]]:
    """A step's examples as `parts` micro-batches (gradient accumulation); never an empty one."""
    return [chunk.tolist() for chunk in np.array_split(np.asarray(indices), parts) if len(chunk)]


def loss_of(logits: Any, targets: Any) -> Any:
    """Mean cross-entropy: over the examples (one label each), or over the tokens that have a target (per-token
    labels; IGNORE_INDEX marks [CLS], [SEP] and padding). Paddle's own `mean` with `ignore_index` divides by all
    tokens, ignored ones included, so the token mean is taken here."""
    import paddle.nn.functional as F

    if logits.ndim == 2 and targets.ndim == 2:  # a distribution per example (distillation's soft targets)
        return -(targets * F.log_softmax(logits, axis=-1)).sum(axis=-1).mean()
    if logits.ndim == 2:
        return F.cross_entropy(logits, targets).mean()
    flat = targets.reshape([-1])
    per_token = F.cross_entropy(
        logits.reshape([-1, logits.shape[-1]]), flat, ignore_index=IGNORE_INDEX, reduction="none"
    ).reshape([-1])
    valid = (flat != IGNORE_INDEX).astype(per_token.dtype)
    return (per_token * valid).sum() / valid.sum().clip(min=1.0)


def step_gradients(
    model: Any, batches: list[tuple[list[int], tuple[Any, Any, Any]]], total: int, amp: AmpDtype | None, scaler: Any
) -> Any:
    """Forward and backward over one step's micro-batches (indices, (input_ids, token_type_ids, targets)); the
    step's mean loss, still on the device."""
    import paddle

    from steps.runtime.weights import crf_head

    distributed = isinstance(model, paddle.DataParallel)
    with_loss = isinstance(model._layers if distributed else model, crf_head.WithLoss)  # it computes its own loss
    step_loss = None
    for i, (micro, (input_ids, token_type_ids, targets)) in enumerate(batches):
        # DataParallel all-reduces on backward; once per step (the last micro-batch) is enough.
        sync = model.no_sync() if distributed and i < len(batches) - 1 else nullcontext()
        with sync:
            with paddle.amp.auto_cast(dtype=amp) if amp else nullcontext():
                if with_loss:
                    loss = model(input_ids, token_type_ids, targets)
                else:
                    loss = loss_of(model(input_ids, token_type_ids=token_type_ids).astype("float32"), targets)
            # weighted by its share of the step's examples, so the step's gradient is the mean over all of them
            scaled = loss * (len(micro) / total)
            (scaler.scale(scaled) if scaler else scaled).backward()
        step_loss = scaled.detach() if step_loss is None else step_loss + scaled.detach()
    return step_loss


def apply_step(optimizer: Any, scheduler: Any, scaler: Any) -> None:
    """Update the parameters from the accumulated gradients, advance the LR schedule, clear the gradients."""
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()
    optimizer.clear_grad()
