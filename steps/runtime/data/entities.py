"""Named entities as character spans: BIO tags both ways and exact-match entity-level scores.

Pure Python so prepare-data and evaluation share one definition of what an entity is and how it is scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ENTITY_TYPES: tuple[str, ...] = ("PER", "LOC", "ORG")
OUTSIDE = "O"


@dataclass(frozen=True, order=True)
class Span:
    """An entity: characters [start, end) of a text, of one type."""

    start: int  # character offset, inclusive
    end: int  # character offset, exclusive
    type: str


def bio_labels(types: Sequence[str] = ENTITY_TYPES) -> list[str]:
    """The label list of a tagger: "O" first, then B-<type>, I-<type> for each type in order."""
    return [OUTSIDE] + [f"{prefix}-{t}" for t in types for prefix in ("B", "I")]


def spans_to_tags(length: int, spans: Iterable[Span]) -> list[str]:
    """Character-level BIO tags of a text of `length` characters; ValueError on empty, overlapping or outside spans."""
    tags = [OUTSIDE] * length
    previous: Span | None = None
    for span in sorted(spans):
        if not 0 <= span.start < span.end <= length:
            raise ValueError(f"span {span} is empty or outside the text [0, {length})")
        if not span.type:
            raise ValueError(f"span {span} has no type")
        if previous is not None and span.start < previous.end:
            raise ValueError(f"spans {previous} and {span} overlap")
        tags[span.start] = f"B-{span.type}"
        for i in range(span.start + 1, span.end):
            tags[i] = f"I-{span.type}"
        previous = span
    return tags


def _parse_tag(tag: str) -> tuple[str, str]:
    """("B" | "I", type) of an entity tag; ValueError if it is not B-<type> or I-<type>."""
    prefix, dash, entity_type = tag.partition("-")
    if prefix not in ("B", "I") or not dash or not entity_type:
        raise ValueError(f"tag {tag!r} is not {OUTSIDE!r}, B-<type> or I-<type>")
    return prefix, entity_type


def tags_to_spans(tags: Sequence[str]) -> list[Span]:
    """Decode BIO tags conlleval-style: an I-X after O, at the start or after another type starts a new entity."""
    spans: list[Span] = []
    current: str | None = None
    start = 0
    for i, tag in enumerate(tags):
        if tag == OUTSIDE:
            if current is not None:
                spans.append(Span(start, i, current))
            current = None
            continue
        prefix, entity_type = _parse_tag(tag)
        if prefix == "B" or entity_type != current:
            if current is not None:
                spans.append(Span(start, i, current))
            current, start = entity_type, i
    if current is not None:
        spans.append(Span(start, len(tags), current))
    return spans


def _ratio(numerator: float, denominator: int) -> float:
    """numerator / denominator, 0.0 when the denominator is 0 (zero_division=0)."""
    return numerator / denominator if denominator else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def entity_scores(
    gold: Sequence[Sequence[Span]], predicted: Sequence[Sequence[Span]], types: Sequence[str] = ENTITY_TYPES
) -> dict:
    """Exact-match (start, end, type) precision/recall/F1, micro over all spans and per type; 0/0 counts as 0.0.

    gold[i] and predicted[i] are the spans of sentence i (ValueError if the lengths differ); a span repeated within
    one sentence counts once. Spans of types outside `types` count in the micro totals only; macro_f1 is the mean
    per-type F1 over `types`.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"gold has {len(gold)} sentences but predicted has {len(predicted)}")
    counts = {t: {"gold": 0, "predicted": 0, "correct": 0} for t in types}
    total = {"gold": 0, "predicted": 0, "correct": 0}
    for gold_spans, predicted_spans in zip(gold, predicted, strict=True):
        g, p = set(gold_spans), set(predicted_spans)
        for key, spans in (("gold", g), ("predicted", p), ("correct", g & p)):
            total[key] += len(spans)
            for span in spans:
                if span.type in counts:
                    counts[span.type][key] += 1
    per_type = {}
    for t, c in counts.items():
        precision, recall = _ratio(c["correct"], c["predicted"]), _ratio(c["correct"], c["gold"])
        per_type[t] = {
            "precision": precision,
            "recall": recall,
            "f1": _f1(precision, recall),
            "support": c["gold"],
            "predicted": c["predicted"],
        }
    precision, recall = _ratio(total["correct"], total["predicted"]), _ratio(total["correct"], total["gold"])
    return {
        "precision": precision,
        "recall": recall,
        "micro_f1": _f1(precision, recall),
        "macro_f1": _ratio(sum(s["f1"] for s in per_type.values()), len(per_type)),
        "per_type": per_type,
        "gold_entities": total["gold"],
        "predicted_entities": total["predicted"],
        "correct_entities": total["correct"],
    }
