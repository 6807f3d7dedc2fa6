"""Masked-language-model pre-training of the small ERNIE on raw text: what `paddle-mlops weights pretrain` runs
once, so a local run fine-tunes pretrained weights the way production does (docs/benchmarks.md, "Quality").

BERT's recipe: 15 % of the characters are chosen, 80 % of those become [MASK], 10 % a random character, 10 % stay;
the loss is the cross-entropy of the chosen ones only (PaddleNLP's `ErnieForMaskedLM` head, evaluated at the chosen
positions). The result is saved with PaddleNLP's `save_pretrained` (model + tokenizer), the format `weights stage
--from DIR` takes.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from steps.runtime.training import dygraph

log = logging.getLogger("steps.mlm")

MASK_RATE = 0.15


@dataclass(frozen=True)
class PretrainSettings:
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 256
    max_seq_len: int = 128
    epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup_ratio: float = 0.05
    time_limit_seconds: float = 1800.0
    seed: int = 42


def mask_batch(
    ids: np.ndarray, special: np.ndarray, vocab_size: int, mask_id: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(masked input ids, flat positions chosen, their original ids): 15 % of the non-special tokens of each row
    (at least one), 80 % replaced by [MASK], 10 % by a random token, 10 % kept."""
    chosen = (rng.random(ids.shape) < MASK_RATE) & ~special
    for row in np.flatnonzero(~chosen.any(axis=1)):  # every row predicts at least one token
        candidates = np.flatnonzero(~special[row])
        if len(candidates):
            chosen[row, rng.choice(candidates)] = True
    positions = np.flatnonzero(chosen)
    targets = ids.reshape(-1)[positions].copy()
    masked = ids.copy().reshape(-1)
    roll = rng.random(len(positions))
    masked[positions[roll < 0.8]] = mask_id
    random_at = positions[(roll >= 0.8) & (roll < 0.9)]
    masked[random_at] = rng.integers(5, vocab_size, len(random_at))  # past the special tokens
    return masked.reshape(ids.shape), positions, targets


def pretrain(texts: Sequence[str], vocab_file: Path, out_dir: Path, settings: PretrainSettings) -> dict[str, float]:
    """Pre-train a small ERNIE on `texts` with the character vocabulary `vocab_file`; save it into `out_dir`
    (save_pretrained: model + tokenizer). Stops after `epochs` or `time_limit_seconds`, whichever comes first;
    returns the last epoch's loss, the epochs and the seconds it took."""
    import paddle
    from paddlenlp.transformers import ErnieConfig, ErnieForMaskedLM, ErnieTokenizer

    random.seed(settings.seed)
    paddle.seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    tokenizer = ErnieTokenizer(str(vocab_file))
    encoded = tokenizer(list(texts), max_length=settings.max_seq_len, truncation=True, return_token_type_ids=False)
    rows = [ids for ids in encoded["input_ids"] if len(ids) > 2]
    config = ErnieConfig(
        vocab_size=len(tokenizer.vocab), hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_hidden_layers, num_attention_heads=settings.num_attention_heads,
        intermediate_size=settings.intermediate_size, max_position_embeddings=settings.max_seq_len,
        type_vocab_size=2, pad_token_id=tokenizer.pad_token_id, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    with paddle.utils.unique_name.guard():
        model = ErnieForMaskedLM(config)
    steps_per_epoch = (len(rows) + settings.batch_size - 1) // settings.batch_size
    total = steps_per_epoch * settings.epochs
    schedule = paddle.optimizer.lr.LinearWarmup(
        paddle.optimizer.lr.PolynomialDecay(settings.learning_rate, total, 0.0),
        max(1, int(total * settings.warmup_ratio)), 0.0, settings.learning_rate,
    )  # fmt: skip
    optimizer = paddle.optimizer.AdamW(schedule, parameters=model.parameters(), weight_decay=0.01)
    started = time.time()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # batches of similar length: little padding
    batches = [order[s : s + settings.batch_size] for s in range(0, len(order), settings.batch_size)]
    model.train()
    with dygraph.dense_kernels_on_cpu(paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0):
        loss_value, epoch = _epochs(model, optimizer, schedule, batches, rows, tokenizer, rng, settings, started)
    out_dir.mkdir(parents=True, exist_ok=True)
    with paddle.utils.unique_name.guard():
        model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return {"loss": loss_value, "epochs": epoch, "seconds": round(time.time() - started, 1), "texts": len(rows)}


def _epochs(model, optimizer, schedule, batches, rows, tokenizer, rng, settings, started):  # type: ignore[no-untyped-def]
    import paddle

    special_ids = np.array([tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id])
    loss_value, epoch = float("nan"), 0
    for epoch in range(1, settings.epochs + 1):
        rng.shuffle(batches)
        losses = []
        for batch in batches:
            ids = _pad([rows[i] for i in batch], tokenizer.pad_token_id)
            masked, positions, targets = mask_batch(
                ids, np.isin(ids, special_ids), len(tokenizer.vocab), tokenizer.mask_token_id, rng
            )
            logits = model(paddle.to_tensor(masked), masked_positions=paddle.to_tensor(positions))
            loss = paddle.nn.functional.cross_entropy(logits, paddle.to_tensor(targets))
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.clear_grad()
            losses.append(float(loss))
        loss_value = float(np.mean(losses))
        log.info("MLM epoch %d: loss %.4f (%.0f s)", epoch, loss_value, time.time() - started)
        if time.time() - started > settings.time_limit_seconds:
            log.warning(
                "MLM pre-training stopped after epoch %d: time limit %.0f s", epoch, settings.time_limit_seconds
            )
            break
    return loss_value, epoch


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    out = np.full((len(rows), max(len(r) for r in rows)), pad_id, dtype="int64")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out
