"""BIO tags <-> spans (with conlleval's repair of stray I- tags) and entity-level scores against hand arithmetic."""

from __future__ import annotations

import pytest

from steps.runtime.data.entities import (
    ENTITY_TYPES,
    OUTSIDE,
    Span,
    bio_labels,
    entity_scores,
    spans_to_tags,
    tags_to_spans,
)


def test_bio_labels_default_order() -> None:
    assert bio_labels() == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    assert bio_labels(("X",)) == [OUTSIDE, "B-X", "I-X"]
    assert ENTITY_TYPES == ("PER", "LOC", "ORG")


@pytest.mark.parametrize(
    ("length", "spans"),
    [
        (0, []),
        (5, []),
        (1, [Span(0, 1, "PER")]),
        (9, [Span(0, 3, "PER"), Span(3, 5, "PER"), Span(7, 9, "ORG")]),  # adjacent same-type entities stay apart
        (6, [Span(2, 4, "LOC"), Span(0, 2, "ORG")]),  # order of input does not matter
    ],
)
def test_round_trip(length: int, spans: list[Span]) -> None:
    tags = spans_to_tags(length, spans)
    assert len(tags) == length
    assert tags_to_spans(tags) == sorted(spans)


def test_spans_to_tags_values() -> None:
    assert spans_to_tags(6, [Span(1, 3, "PER"), Span(3, 4, "LOC")]) == ["O", "B-PER", "I-PER", "B-LOC", "O", "O"]


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (["O", "I-PER", "I-PER", "O"], [Span(1, 3, "PER")]),  # I-PER after O starts an entity
        (["B-PER", "I-LOC", "I-LOC"], [Span(0, 1, "PER"), Span(1, 3, "LOC")]),  # I-LOC right after B-PER
        (["I-ORG", "I-ORG", "O", "B-LOC"], [Span(0, 2, "ORG"), Span(3, 4, "LOC")]),  # sequence starts with I-ORG
        (["B-PER", "B-PER", "I-PER"], [Span(0, 1, "PER"), Span(1, 3, "PER")]),  # B- always starts a new one
        (["B-LOC", "I-LOC"], [Span(0, 2, "LOC")]),  # an entity running to the end is closed
    ],
)
def test_tags_to_spans_repairs(tags: list[str], expected: list[Span]) -> None:
    assert tags_to_spans(tags) == expected


@pytest.mark.parametrize("tag", ["PER", "B-", "X-PER", "b-PER", "", "I"])
def test_invalid_tag(tag: str) -> None:
    with pytest.raises(ValueError, match="is not 'O', B-<type> or I-<type>"):
        tags_to_spans(["O", tag])


@pytest.mark.parametrize(
    "spans",
    [
        [Span(0, 3, "PER"), Span(2, 4, "LOC")],  # overlap
        [Span(1, 4, "PER"), Span(1, 4, "LOC")],  # same characters, two types
        [Span(2, 2, "PER")],  # empty
        [Span(3, 2, "PER")],  # reversed
        [Span(-1, 2, "PER")],  # before the text
        [Span(4, 6, "PER")],  # past the end of a 5-character text
        [Span(0, 1, "")],  # no type
    ],
)
def test_spans_to_tags_rejects(spans: list[Span]) -> None:
    with pytest.raises(ValueError):
        spans_to_tags(5, spans)


def test_entity_scores_hand_computed() -> None:
    gold = [
        [Span(0, 3, "PER"), Span(5, 7, "LOC")],
        [Span(0, 4, "ORG"), Span(6, 8, "PER")],
    ]
    predicted = [
        [Span(0, 3, "PER"), Span(5, 8, "LOC")],  # exact; wrong boundary
        [Span(0, 4, "ORG"), Span(6, 8, "LOC")],  # exact; wrong type
    ]
    scores = entity_scores(gold, predicted)
    # micro: 2 correct of 4 predicted and 4 gold -> P = 2/4, R = 2/4, F1 = 2*(1/2)*(1/2)/(1/2+1/2) = 1/2
    assert (scores["gold_entities"], scores["predicted_entities"], scores["correct_entities"]) == (4, 4, 2)
    assert scores["precision"] == pytest.approx(2 / 4)
    assert scores["recall"] == pytest.approx(2 / 4)
    assert scores["micro_f1"] == pytest.approx(1 / 2)
    per_type = scores["per_type"]
    # PER: gold 2, predicted 1, correct 1 -> P = 1/1, R = 1/2, F1 = 2*1*(1/2)/(1+1/2) = 2/3
    assert per_type["PER"] == pytest.approx(
        {"precision": 1.0, "recall": 1 / 2, "f1": 2 / 3, "support": 2, "predicted": 1}
    )
    # LOC: gold 1, predicted 2 (the wrong boundary and the wrong type), correct 0 -> P = 0/2, R = 0/1, F1 = 0
    assert per_type["LOC"] == pytest.approx({"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 2})
    # ORG: gold 1, predicted 1, correct 1 -> 1, 1, 1
    assert per_type["ORG"] == pytest.approx({"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1, "predicted": 1})
    # macro: (2/3 + 0 + 1) / 3 = 5/9
    assert scores["macro_f1"] == pytest.approx(5 / 9)
    assert isinstance(per_type["PER"]["support"], int) and isinstance(per_type["LOC"]["predicted"], int)


def test_entity_scores_other_types_count_in_micro_only() -> None:
    gold = [[Span(0, 2, "MISC"), Span(3, 5, "PER")]]
    predicted = [[Span(0, 2, "MISC")]]
    scores = entity_scores(gold, predicted)
    # micro: 1 correct of 1 predicted, 2 gold -> P = 1, R = 1/2, F1 = 2/3
    assert scores["precision"] == pytest.approx(1.0)
    assert scores["recall"] == pytest.approx(1 / 2)
    assert scores["micro_f1"] == pytest.approx(2 / 3)
    assert set(scores["per_type"]) == set(ENTITY_TYPES)
    # macro over PER, LOC, ORG only: PER has F1 0 (missed), LOC and ORG 0/0 -> 0
    assert scores["macro_f1"] == 0.0


def test_entity_scores_all_empty() -> None:
    for gold, predicted in (([], []), ([[], []], [[], []])):
        scores = entity_scores(gold, predicted)
        assert scores["precision"] == scores["recall"] == scores["micro_f1"] == scores["macro_f1"] == 0.0
        assert scores["gold_entities"] == scores["predicted_entities"] == scores["correct_entities"] == 0
        for entity_type in ENTITY_TYPES:
            assert scores["per_type"][entity_type] == {
                "precision": 0.0,
                "recall": 0.0,
                "f1": 0.0,
                "support": 0,
                "predicted": 0,
            }


def test_entity_scores_length_mismatch() -> None:
    with pytest.raises(ValueError, match="gold has 1 sentences but predicted has 2"):
        entity_scores([[]], [[], []])
