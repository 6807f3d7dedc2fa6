"""Tag-transition scores (`model.tag_transitions`, steps/runtime/data/tag_transitions.py): counted on the train
split's tags, weighted by what dev prefers, carried by the export and used wherever it decodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from paddle_mlops_core.config.inputs import ModelConfig
from steps.runtime.data import tag_transitions
from steps.runtime.data.tasks.ner import decode_tags, row_tags
from steps.runtime.runner import StepError

NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
LABELS = dict(enumerate(NAMES))


def test_counted_log_probabilities_follow_the_train_tags() -> None:
    rows = [
        {"text": "江泽民会见安南", "entities": [[0, 3, "PER"], [5, 7, "PER"]]},
        {"text": "李鹏说", "entities": [[0, 2, "PER"]]},
    ]
    assert row_tags(rows[1]) == ["B-PER", "I-PER", "O"]
    log_probs = tag_transitions.counted([row_tags(r) for r in rows], NAMES)
    probs = np.exp(log_probs)
    assert np.allclose(probs.sum(axis=1), 1.0) and np.isfinite(log_probs).all()  # add-one smoothed
    b, i, o = NAMES.index("B-PER"), NAMES.index("I-PER"), NAMES.index("O")
    # B-PER -> I-PER 3 times (+1) of 3 + 7; I-PER -> I-PER once, -> O twice
    assert probs[b, i] == pytest.approx(4 / 10)
    assert probs[i, o] == pytest.approx(3 / 10) and probs[i, i] == pytest.approx(2 / 10)
    assert probs[b, i] > probs[b, o]


def test_transitions_lengthen_a_name_the_characters_alone_cut_short() -> None:
    """The error they fix: the third character of a name, scored alone, looks like O."""
    probs = np.array(
        [
            [0.05, 0.9, 0.01, 0.01, 0.01, 0.01, 0.01],  # 陈 B-PER
            [0.05, 0.01, 0.9, 0.01, 0.01, 0.01, 0.01],  # 焕 I-PER
            [0.55, 0.01, 0.4, 0.01, 0.01, 0.01, 0.01],  # 新 O by a little
        ]
    )
    assert [NAMES[t] for t in decode_tags(probs, NAMES)] == ["B-PER", "I-PER", "O"]
    log_probs = np.log(np.full((7, 7), 0.01))
    log_probs[NAMES.index("I-PER"), NAMES.index("I-PER")] = np.log(0.6)  # names go on more often than they stop
    log_probs[NAMES.index("I-PER"), NAMES.index("O")] = np.log(0.3)
    assert [NAMES[t] for t in decode_tags(probs, NAMES, log_probs)] == ["B-PER", "I-PER", "I-PER"]
    # BIO stays enforced whatever the scores say
    log_probs[NAMES.index("O"), NAMES.index("I-PER")] = 0.0
    o_then_i = np.array([[0.9, 0.02, 0.02, 0.02, 0.02, 0.01, 0.01], [0.02, 0.02, 0.9, 0.02, 0.02, 0.01, 0.01]])
    assert [NAMES[t] for t in decode_tags(o_then_i, NAMES, log_probs)] != ["O", "I-PER"]


def test_the_weight_is_the_one_dev_scores_best_and_zero_wins_ties() -> None:
    log_probs = -np.ones((7, 7))
    seen: list[float] = []

    def score(t: np.ndarray | None) -> float:
        weight = 0.0 if t is None else float(-t[0, 0])
        seen.append(weight)
        return {0.0: 0.80, 0.25: 0.82, 0.5: 0.85, 0.75: 0.84, 1.0: 0.81}[weight]

    weight, dev = tag_transitions.choose(log_probs, score)
    assert weight == 0.5 and seen == list(tag_transitions.WEIGHTS)
    assert dev == {"0.0": 0.8, "0.25": 0.82, "0.5": 0.85, "0.75": 0.84, "1.0": 0.81}
    assert tag_transitions.choose(log_probs, lambda t: 0.9)[0] == 0.0  # nothing beats decoding without


def test_the_file_round_trips_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    log_probs = tag_transitions.counted([["B-PER", "I-PER", "O"]], NAMES)
    tag_transitions.write(tmp_path, NAMES, log_probs, 0.5, {"0.0": 0.8, "0.5": 0.85})
    assert np.allclose(tag_transitions.read(tmp_path, LABELS), 0.5 * log_probs, atol=1e-5)
    assert tag_transitions.read(tmp_path / "elsewhere", LABELS) is None  # no file: decode without
    tag_transitions.write(tmp_path, NAMES, log_probs, 0.0, {"0.0": 0.8})
    assert tag_transitions.read(tmp_path, LABELS) is None  # weight 0: decode without

    tag_transitions.write(tmp_path, NAMES, log_probs, 0.5, {})
    with pytest.raises(StepError, match="different exports"):
        tag_transitions.read(tmp_path, dict(enumerate(reversed(NAMES))))
    (tmp_path / tag_transitions.FILE).write_text(json.dumps({"labels": NAMES}))
    with pytest.raises(StepError, match="not a tag-transition file"):
        tag_transitions.read(tmp_path, LABELS)


def test_only_token_classification_decodes_tag_sequences() -> None:
    assert ModelConfig(task="token-classification", tag_transitions=True).tag_transitions
    with pytest.raises(ValidationError, match="tag_transitions decodes tag sequences"):
        ModelConfig(task="text-classification", tag_transitions=True)


def test_the_exported_model_decodes_with_the_file_beside_it(tmp_path: Path) -> None:
    """ExportedModel (evaluation, validation, engine selection and the model server all answer through it) reads
    tag_transitions.json: scores that forbid staying outside a name make the whole text one."""
    from steps.runtime.weights import ernie
    from tests.fixtures_ernie import make_exported_model

    directory = make_exported_model(tmp_path / "ner", labels=tuple(NAMES), task="token-classification")
    text = "国务院总理李鹏昨天抵达上海"
    assert ernie.ExportedModel(directory).transitions is None
    log_probs = np.full((7, 7), -1000.0)
    for a, b in [("O", "B-PER"), ("B-PER", "I-PER"), ("I-PER", "I-PER")]:
        log_probs[NAMES.index(a), NAMES.index(b)] = 0.0
    tag_transitions.write(directory, NAMES, log_probs, 1.0, {})
    model = ernie.ExportedModel(directory)
    assert model.transitions is not None
    (answer,) = model.predict([text])
    spans = [(e["type"], e["start"], e["end"]) for e in answer["entities"]]
    assert spans in ([("PER", 0, len(text))], [("PER", 1, len(text))])
