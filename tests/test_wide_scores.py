"""The wide half of a wide-and-deep model (`model.wide_scores`, steps/runtime/weights/wide_scores.py): for NER each
character's tags score the per-tag weights of its ±2 window's characters, bigrams and centred trigram (the CRF
baseline's features), for text classification the text's labels its bag of characters, bigrams and trigrams (the
TF-IDF baseline's), on top of the encoder's scores. The weights start at 0 (the model is the one without them), learn
at their own rate, travel in the state dict, and every engine (the export, its ONNX graph, OpenVINO f32 and bf16)
computes them from `input_ids` alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from fixtures_ernie import CONFIG
from pydantic import ValidationError
from test_char_ngrams import IDS, LARGE_IDS, TINY, TRAIN_IDS, assert_every_engine_gives, logits

from paddle_mlops_core.config import load_config
from paddle_mlops_core.config.inputs import ModelConfig
from steps.runtime.training import optimization
from steps.runtime.weights import crf_head, ernie, wide_scores

LABELS = {0: "O", 1: "B-PER", 2: "I-PER"}


TASKS = ["token-classification", "text-classification"]


def config(
    window: bool = True, trigrams: bool = True, task: str = "token-classification", **extra: object
) -> ModelConfig:
    return ModelConfig(
        task=task, char_ngram_buckets=1000, char_ngram_min_count=1, char_ngram_trigrams=trigrams,  # type: ignore[arg-type]
        wide_scores=window, **TINY, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def build(cfg: ModelConfig, vocab: int = 20, seed: int = 3) -> ernie.ErnieHead:
    paddle.seed(seed)
    return ernie.build_model(cfg, vocab, len(LABELS))


def randomise(m: ernie.ErnieHead, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for weights in m.wide.parameters():
        weights.set_value(rng.normal(size=weights.shape).astype("float32"))


def wide_logits(cfg: ModelConfig) -> tuple[ernie.ErnieHead, Any, np.ndarray]:
    """A model with the n-gram table's vocabulary fitted on TRAIN_IDS, random wide weights, the n-gram table layer and
    what the wide half adds to the logits of IDS."""
    m = build(cfg)
    layer = m.ernie.embeddings.word_embeddings
    layer.fit_vocabulary(TRAIN_IDS)
    plain = logits(m)
    randomise(m)
    return m, layer, logits(m) - plain


@pytest.mark.parametrize("task", TASKS)
def test_the_weights_start_at_zero_so_the_model_is_the_one_without_them(task: str) -> None:
    with_window, without = build(config(task=task)), build(config(window=False, task=task))
    kind = wide_scores.WindowTagger if task == "token-classification" else wide_scores.BagClassifier
    assert type(with_window) is kind and not hasattr(without, "wide")
    assert np.array_equal(logits(with_window), logits(without))
    randomise(with_window)
    assert not np.allclose(logits(with_window), logits(without), atol=1e-3)


@pytest.mark.parametrize("trigrams", [True, False])
def test_each_character_scores_its_window_s_characters_bigrams_and_trigram(trigrams: bool) -> None:
    """The score a character adds to tag y is the sum of the five characters' weights at their offsets, the four
    bigrams' (b-2 … b1: the bigram starting at that offset) and the centred trigram's, read from the n-gram
    table's rows (outside the row: the padding id, as the CRF baseline's BEGIN and END marks)."""
    m, layer, got = wide_logits(config(trigrams=trigrams))
    window = m.wide
    assert (window.trigram is not None) == trigrams

    def row(*chars: int) -> int:
        ids = [paddle.to_tensor([[c]]) for c in chars]
        rows = layer.rows(*ids) if len(chars) == 2 else layer.trigram_rows(*ids)
        return int(rows.numpy()[0, 0])

    unigrams = [t.weight.numpy() for t in window.unigrams]
    bigrams = [t.weight.numpy() for t in window.bigrams]
    for b, ids in enumerate(IDS):
        padded = [0, 0, *ids.tolist(), 0, 0]
        for t in range(len(ids)):
            c = t + 2  # the character's place in the padded row
            want = sum(unigrams[i][padded[c + k]] for i, k in enumerate(wide_scores.UNIGRAMS))
            want += sum(bigrams[i][row(padded[c + k], padded[c + k + 1])] for i, k in enumerate(wide_scores.BIGRAMS))
            if trigrams:
                want += window.trigram.weight.numpy()[row(padded[c - 1], padded[c], padded[c + 1])]
            np.testing.assert_allclose(got[b, t], want, atol=1e-5)
    # (7, 8) has a row of its own; (9, 8) was never seen: row 0, which holds a weight too
    assert row(7, 8) > 0 and row(9, 8) == 0


@pytest.mark.parametrize("trigrams", [True, False])
def test_a_text_scores_its_bag_of_characters_bigrams_and_trigrams(trigrams: bool) -> None:
    """The score a text adds to label y: its characters', bigrams' and trigrams' weights summed (the padding's
    not), divided by the square root of its length in tokens ([CLS] and [SEP] count, as the baseline's begin and
    end)."""
    m, layer, got = wide_logits(config(trigrams=trigrams, task="text-classification"))
    bag = m.wide

    def rows(*columns: np.ndarray) -> np.ndarray:
        ids = [paddle.to_tensor(c[None]) for c in columns]
        return (layer.rows(*ids) if len(columns) == 2 else layer.trigram_rows(*ids)).numpy()[0]

    for b, ids in enumerate(IDS):
        text = ids[ids > 0]
        want = bag.unigrams.weight.numpy()[text].sum(axis=0)
        want += bag.bigrams.weight.numpy()[rows(text[:-1], text[1:])].sum(axis=0)
        if trigrams:
            want += bag.trigrams.weight.numpy()[rows(text[:-2], text[1:-1], text[2:])].sum(axis=0)
        np.testing.assert_allclose(got[b], want / np.sqrt(len(text)), atol=1e-5)
    assert (bag.trigrams is not None) == trigrams


def test_the_wide_half_is_for_one_text_s_labels_and_needs_the_n_gram_table() -> None:
    with pytest.raises(ValidationError, match="wide_scores scores one text's n-grams"):
        ModelConfig(task="text-matching", wide_scores=True, char_ngram_buckets=1000)
    with pytest.raises(ValidationError, match="set char_ngram_buckets"):
        ModelConfig(task="token-classification", wide_scores=True, char_ngram_buckets=0)
    assert config().wide_scores and config(task="text-classification").wide_scores


@pytest.mark.parametrize("encoder_rate", [3e-3, 5e-5])
def test_the_window_learns_at_its_own_rate_whatever_the_encoder_s(encoder_rate: float) -> None:
    """AdamW's first step moves a parameter by its learning rate: the window's weights by WIDE_RATE (through
    the CRF head's loss wrapper, as the trainer sets it up), the encoder's by the schedule's."""
    m = build(config(crf_head=True, tag_transitions=False))
    optimization.set_peak_rates(crf_head.training_module(m), encoder_rate)
    optimizer = paddle.optimizer.AdamW(learning_rate=encoder_rate, parameters=m.parameters(), weight_decay=0.0)
    before = m.wide.unigrams[2].weight.numpy().copy(), m.classifier.weight.numpy().copy()
    m.train()
    x = paddle.to_tensor(IDS)
    targets = paddle.to_tensor(np.where(IDS > 0, IDS % 3, -100))
    loss = paddle.nn.functional.cross_entropy(m(x, token_type_ids=paddle.zeros_like(x)), targets[..., None])
    loss.backward()
    optimizer.step()
    moved = np.abs(m.wide.unigrams[2].weight.numpy() - before[0]), np.abs(m.classifier.weight.numpy() - before[1])
    assert moved[0].max() == pytest.approx(wide_scores.WIDE_RATE, rel=1e-3)
    assert moved[0][10:].max() == 0  # ids 10 … 19, which no text holds: no gradient, no step
    assert moved[1].max() == pytest.approx(encoder_rate, rel=1e-3)


def test_the_window_is_part_of_the_state_a_checkpoint_restores() -> None:
    trained = build(config())
    trained.ernie.embeddings.word_embeddings.fit_vocabulary(TRAIN_IDS)
    randomise(trained)
    state = trained.state_dict()
    assert "wide.unigrams.0.weight" in state and "wide.trigram.weight" in state
    fresh = build(config(), seed=3)
    fresh.set_state_dict(state)
    assert np.array_equal(logits(fresh), logits(trained))


@pytest.mark.parametrize("task", TASKS)
def test_every_engine_computes_the_wide_half_from_large_token_ids(tmp_path: Path, task: str) -> None:
    """Token ids up to 40,000 (ERNIE 3.0's vocabulary), NER with the CRF head: the export (what training writes), its
    ONNX graph (every engine variant is built from it) and OpenVINO's IR at f32 and at bf16 (the openvino-bf16
    variant, served on CPUs that have bf16; elsewhere the plugin runs f32) give the trained model's logits. The
    lookups are integer gathers of the n-gram rows: a float island there (the second and third defects in
    docs/benchmarks.md) would read other rows and move the logits by about their own size."""
    heads = {"crf_head": True, "tag_transitions": False} if task == "token-classification" else {}
    cfg = config(task=task, **heads).model_copy(update={"char_ngram_buckets": 65_536})
    m = build(cfg, vocab=40_000)
    m.ernie.embeddings.word_embeddings.fit_vocabulary([LARGE_IDS[0].tolist(), LARGE_IDS[0, ::-1].tolist()])
    randomise(m)
    ids = np.concatenate([LARGE_IDS, np.where(np.arange(LARGE_IDS.shape[1]) < 4, LARGE_IDS, 0)])  # one padded
    assert_every_engine_gives(tmp_path, m, cfg, ids)
    assert ernie.ExportedModel(tmp_path / "export").model_config["wide_scores"] is True


def test_the_optimizer_the_trainer_makes_gives_each_head_its_own_peak_rate() -> None:
    """optimization.make_optimizer (the train step's) sets the window's and the transitions' rates as multiples of the
    schedule's, so that they peak at WIDE_RATE and CRF_RATE; the encoder keeps the schedule's."""
    cfg = load_config(CONFIG, "local", ["training.learning_rate=0.0005"], task="ner")
    m = build(config(crf_head=True, tag_transitions=False))
    optimization.make_optimizer(cfg, m, total_steps=10)
    assert {p.optimize_attr["learning_rate"] for p in m.wide.parameters()} == {wide_scores.WIDE_RATE / 0.0005}
    assert m.crf.transitions.optimize_attr["learning_rate"] == crf_head.CRF_RATE / 0.0005
    assert m.classifier.weight.optimize_attr["learning_rate"] == 1.0
