"""The NER baseline: a linear-chain CRF (python-crfsuite, L-BFGS with L1 + L2 regularisation) over the BIO tags of
each character, on the characters of a ±2 window, the four character bigrams around it and the trigram centred on
it: the classic character CRF of Chinese NER."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steps.runtime.data.entities import Span, spans_to_tags, tags_to_spans

KIND = "crf"
DESCRIPTION = "linear-chain CRF on a ±2 character window with bigrams"
C1, C2 = 0.1, 0.01
BEGIN, END = "\x02", "\x03"


def features(text: str) -> list[list[str]]:
    """Per character: its window's characters, bigrams and centred trigram, as crfsuite attribute names."""
    padded = BEGIN * 2 + text + END * 2
    out = []
    for i in range(2, len(text) + 2):
        window = padded[i - 2 : i + 3]
        out.append([
            "bias", f"c0={window[2]}", f"c-1={window[1]}", f"c1={window[3]}", f"c-2={window[0]}", f"c2={window[4]}",
            f"b-2={window[0:2]}", f"b-1={window[1:3]}", f"b0={window[2:4]}", f"b1={window[3:5]}", f"t0={window[1:4]}",
        ])  # fmt: skip
    return out


def fit_predict(
    train: Sequence[dict[str, Any]],
    dev: Sequence[dict[str, Any]],
    test: Sequence[dict[str, Any]],
    labels: dict[int, str],
    iterations: int = 100,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Train on `train` (the dev split is not needed: the regularisation is fixed), tag `test`; the settings, and
    the fitted weights (`weights`)."""
    import pycrfsuite

    trainer = pycrfsuite.Trainer(algorithm="lbfgs", verbose=False)
    for row in train:
        spans = [Span(int(s), int(e), str(t)) for s, e, t in row["entities"]]
        trainer.append(features(row["text"]), spans_to_tags(len(row["text"]), spans))
    trainer.set_params({"c1": C1, "c2": C2, "max_iterations": iterations, "feature.possible_transitions": True})
    with tempfile.TemporaryDirectory(prefix="crf-") as tmp:
        path = str(Path(tmp) / "model.crfsuite")
        trainer.train(path)
        tagger = pycrfsuite.Tagger()
        tagger.open(path)
        answers = [{"entities": _entities(row["text"], tagger.tag(features(row["text"])))} for row in test]
        fitted = weights(tagger.info())
        tagger.close()
    return answers, {"algorithm": "lbfgs", "c1": C1, "c2": C2, "iterations": iterations}, fitted


def weights(info: Any) -> dict[str, Any]:
    """A fitted CRF's non-zero weights (crfsuite's `Tagger.info()`), as JSON can hold them: `state` attribute ->
    tag -> weight (a character's tag scores are the sum over its `features`), `transitions` tag -> next tag ->
    weight (steps/runtime/weights/baseline_product.py folds both into the trained model)."""
    state: dict[str, dict[str, float]] = {}
    for (attribute, tag), weight in info.state_features.items():
        state.setdefault(attribute, {})[tag] = weight
    transitions: dict[str, dict[str, float]] = {}
    for (before, after), weight in info.transitions.items():
        transitions.setdefault(before, {})[after] = weight
    return {"state": state, "transitions": transitions}


def _entities(text: str, tags: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"type": s.type, "text": text[s.start : s.end], "start": s.start, "end": s.end} for s in tags_to_spans(tags)
    ]
