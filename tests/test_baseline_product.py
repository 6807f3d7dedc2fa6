"""The NER baseline's CRF folded into the trained tagger (`model.baseline_product`,
steps/runtime/weights/baseline_product.py): the wide half, the classifier's bias and the CRF head's transitions
receive the baseline's weights, so the model's scores are the sum of its own and the baseline's, a product of the two
CRFs that the export and every engine compute unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pytest
from pydantic import ValidationError

from paddle_mlops_core.config.inputs import ModelConfig
from steps.runtime.data import labelled_text, tasks
from steps.runtime.data.baselines import crf
from steps.runtime.data.tasks.ner import decode_tags, row_tags
from steps.runtime.weights import baseline_product, char_ngrams, ernie

LABELS = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
NAMES = [("李鹏", "PER"), ("上海", "LOC"), ("国务院", "ORG"), ("江泽民", "PER"), ("北京", "LOC")]


def rows() -> list[dict[str, Any]]:
    out = []
    for i, (a, ta) in enumerate(NAMES):
        b, tb = NAMES[(i + 1) % len(NAMES)]
        out.append({"text": f"{a}昨天去了{b}", "entities": [[0, len(a), ta], [len(a) + 4, len(a) + 4 + len(b), tb]]})
    return [*out, {"text": "好", "entities": []}]


@pytest.fixture(scope="module")
def fitted() -> dict[str, Any]:
    """The baseline CRF's weights on the rows (their answers are checked in test_baselines.py)."""
    _, _, weights = crf.fit_predict(rows() * 4, [], rows(), LABELS, iterations=30)
    return weights


def tagger(tmp_path: Path, trigrams: bool = True) -> tuple[Any, Any]:
    """A tiny tagger with the wide half and the CRF head whose own scores are all 0 (the classifier's weights too),
    its n-gram vocabulary fitted on the rows' windows, and its tokenizer."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(labelled_text.build_vocab([r["text"] for r in rows()], 1, 100)) + "\n", "utf-8")
    tokenizer = ernie.load_tokenizer(vocab)
    cfg = ModelConfig(
        task="token-classification", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_seq_len=32, char_ngram_buckets=1000, char_ngram_min_count=1,
        char_ngram_trigrams=trigrams, wide_scores=True, crf_head=True, baseline_product=1.0,
    )  # fmt: skip
    paddle.seed(0)
    model = ernie.build_model(cfg, len(tokenizer.vocab), len(LABELS), tokenizer.pad_token_id)
    encoded = tasks.for_type("token-classification").encode(tokenizer, [r["text"] for r in rows()], 32)
    char_ngrams.fit_vocabulary(model, encoded.input_ids)
    for weight in (model.classifier.weight, model.classifier.bias):
        weight.set_value(np.zeros(weight.shape, dtype="float32"))
    model.eval()
    return model, tokenizer


def model_scores(model: Any, tokenizer: Any, text: str) -> np.ndarray:
    """[characters, tags] logits of one text (its [CLS] and [SEP] left out)."""
    encoded = tasks.for_type("token-classification").encode(tokenizer, [text], 32)
    ids = paddle.to_tensor(np.array(encoded.input_ids, dtype="int64"))
    return model(ids).numpy()[0, 1:-1]


def crf_scores(weights: dict[str, Any], text: str) -> np.ndarray:
    """[characters, tags] the baseline's state scores: the sum of each character's features' weights."""
    index = {name: i for i, name in LABELS.items()}
    out = np.zeros((len(text), len(LABELS)))
    for t, attributes in enumerate(crf.features(text)):
        for attribute in attributes:
            for tag, w in weights["state"].get(attribute, {}).items():
                out[t, index[tag]] += w
    return out


def crf_transitions(weights: dict[str, Any]) -> np.ndarray:
    index = {name: i for i, name in LABELS.items()}
    out = np.zeros((len(LABELS), len(LABELS)))
    for before, row in weights["transitions"].items():
        for after, w in row.items():
            out[index[before], index[after]] = w
    return out


def test_the_folded_model_scores_every_character_as_the_baseline_does(tmp_path: Path, fitted: dict) -> None:
    """Every feature of these texts is in the model's vocabulary, so with its own scores at 0 the model's logits are
    exactly the baseline's state scores (the marks before and after the text included: the first characters' and
    the last characters' windows) and its transitions the baseline's; it tags as the baseline does."""
    model, tokenizer = tagger(tmp_path)
    counts = baseline_product.fold(model, fitted, 1.0, tokenizer, LABELS)
    assert counts["folded"] == sum(len(v) > 0 for k, v in fitted["state"].items() if k != "bias")
    assert counts["unknown_character"] == counts["outside_vocabulary"] == counts["no_table"] == 0
    assert np.allclose(model.crf.transitions.numpy(), crf_transitions(fitted), atol=1e-5)
    for row in rows():
        got, want = model_scores(model, tokenizer, row["text"]), crf_scores(fitted, row["text"])
        assert got.shape == want.shape and np.allclose(got, want, atol=1e-4), row["text"]
        names = list(LABELS.values())
        probs = np.exp(got - got.max(axis=1, keepdims=True))
        tags = decode_tags(probs / probs.sum(axis=1, keepdims=True), names, crf_transitions(fitted))
        assert [names[t] for t in tags] == row_tags(row)


def test_a_weight_scales_the_baseline_and_its_negative_undoes_the_fold(tmp_path: Path, fitted: dict) -> None:
    model, tokenizer = tagger(tmp_path)
    text = rows()[0]["text"]
    baseline_product.fold(model, fitted, 0.5, tokenizer, LABELS)
    assert np.allclose(model_scores(model, tokenizer, text), 0.5 * crf_scores(fitted, text), atol=1e-4)
    baseline_product.fold(model, fitted, -0.5, tokenizer, LABELS)
    assert np.allclose(model_scores(model, tokenizer, text), 0.0, atol=1e-5)
    assert np.allclose(model.crf.transitions.numpy(), 0.0, atol=1e-6)


def test_what_the_model_cannot_hold_is_left_out_and_counted(tmp_path: Path) -> None:
    """A character the tokenizer reads as [UNK], a bigram outside the table's vocabulary and, without the trigram
    table, every trigram: counted, and nothing written for them."""
    model, tokenizer = tagger(tmp_path, trigrams=False)
    weights = {
        "state": {"c0=鹏": {"B-PER": 1.0}, "c0=龘": {"B-PER": 5.0}, "b0=鹏李": {"O": 5.0}, "t0=李鹏昨": {"O": 5.0}},
        "transitions": {},
    }
    counts = baseline_product.fold(model, weights, 1.0, tokenizer, LABELS)
    assert counts == {"folded": 1, "unknown_character": 1, "outside_vocabulary": 1, "no_table": 1}
    scores = model_scores(model, tokenizer, "李鹏")
    assert scores[1].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0] and not scores[0].any()


def test_fold_if_better_keeps_the_fold_only_where_dev_rises(tmp_path: Path, fitted: dict) -> None:
    model, tokenizer = tagger(tmp_path)
    text = rows()[0]["text"]
    outcome = baseline_product.fold_if_better(model, fitted, 1.0, tokenizer, LABELS, 0.5, lambda: 0.4)  # worse
    assert not outcome["kept"] and outcome["dev_before"] == 0.5 and outcome["dev_after"] == 0.4
    assert np.allclose(model_scores(model, tokenizer, text), 0.0, atol=1e-5)
    outcome = baseline_product.fold_if_better(model, fitted, 1.0, tokenizer, LABELS, 0.5, lambda: 0.6)
    assert outcome["kept"] and outcome["folded"] > 0
    assert np.allclose(model_scores(model, tokenizer, text), crf_scores(fitted, text), atol=1e-4)


@pytest.mark.parametrize(
    "settings",
    [
        {"task": "text-classification"},
        {"task": "token-classification", "crf_head": True, "char_ngram_buckets": 1000, "char_ngram_min_count": 2},
        {"task": "token-classification", "wide_scores": True, "crf_head": True, "char_ngram_buckets": 1000},
    ],
)
def test_the_product_needs_a_tagger_with_the_wide_half_the_crf_head_and_a_vocabulary(settings: dict) -> None:
    with pytest.raises(ValidationError, match="baseline_product folds the NER baseline's CRF"):
        ModelConfig(baseline_product=1.0, **settings)
