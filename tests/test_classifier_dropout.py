"""`model.classifier_dropout`: the dropout before the task's classifier, apart from the encoder's. A small ERNIE from
scratch takes `model.dropout` for its hidden and attention dropouts; a pre-trained encoder keeps those of its
config.json (the NER default fine-tunes one whose are 0), so there `model.dropout` only ever reached the classifier.
The NER default sets the classifier's alone, so the from-scratch fallback keeps an encoder without dropout."""

from __future__ import annotations

from pathlib import Path

import paddle
import pytest
from pydantic import ValidationError
from test_char_ngrams import TINY

from paddle_mlops_core.config.inputs import ModelConfig
from steps.runtime.weights import ernie

NER = {"task": "token-classification", **TINY}


def dropouts(m: ernie.ErnieHead) -> tuple[float, float]:
    """(the classifier's, the encoder's first layer's) dropout probabilities."""
    return m.dropout.p, m.ernie.encoder.layers[0].dropout1.p


@pytest.mark.parametrize(
    ("settings", "want"),
    [({"dropout": 0.0, "classifier_dropout": 0.1}, (0.1, 0.0)), ({"dropout": 0.2}, (0.2, 0.2))],
    ids=["classifier-alone", "null-follows-dropout"],
)
def test_a_model_from_scratch_takes_the_classifier_s_dropout_apart(settings: dict, want: tuple) -> None:
    cfg = ModelConfig(**{**NER, **settings})
    assert dropouts(ernie.build_model(cfg, 30, 3)) == pytest.approx(want)


def test_a_pretrained_encoder_keeps_its_own_dropout_and_takes_the_classifier_s(tmp_path: Path) -> None:
    paddle.seed(0)
    ernie.build_model(ModelConfig(**{**NER, "dropout": 0.0}), 30, 3).save_pretrained(str(tmp_path))
    cfg = ModelConfig(**{**NER, "dropout": 0.3, "classifier_dropout": 0.1})
    assert dropouts(ernie.load_pretrained(tmp_path, 3, cfg)) == pytest.approx((0.1, 0.0))
    # null: the classifier takes `model.dropout`, and the encoder still its own
    cfg = ModelConfig(**{**NER, "dropout": 0.3})
    assert dropouts(ernie.load_pretrained(tmp_path, 3, cfg)) == pytest.approx((0.3, 0.0))


def test_a_classifier_dropout_outside_0_to_1_is_refused() -> None:
    with pytest.raises(ValidationError, match="classifier_dropout"):
        ModelConfig(**{**NER, "classifier_dropout": 1.0})
