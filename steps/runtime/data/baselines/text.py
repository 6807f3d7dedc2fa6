"""The text-classification baseline: character 1–3-gram TF-IDF (sublinear term frequency) and logistic regression
(scikit-learn), its inverse regularisation C chosen on the dev split from a small grid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

KIND = "tfidf-logreg"
DESCRIPTION = "char 1-3-gram TF-IDF + logistic regression"
C_GRID = (1.0, 4.0, 16.0)
NGRAMS = (1, 3)


def vectorizer() -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(analyzer="char", ngram_range=NGRAMS, sublinear_tf=True, lowercase=True, dtype=np.float32)


def fit_on_dev(
    train_x: Any, train_y: Sequence[int] | np.ndarray, dev_x: Any, dev_y: Sequence[int]
) -> tuple[Any, float]:
    """The logistic regression of the grid's C that scores best on dev (accuracy; the smaller C on a tie) and C."""
    from sklearn.linear_model import LogisticRegression

    # liblinear is the fast solver for two classes; it fits no multinomial model, so more classes take lbfgs.
    solver = "liblinear" if len(set(train_y)) <= 2 else "lbfgs"
    best: tuple[float, float, Any] | None = None
    for c in C_GRID:
        model = LogisticRegression(C=c, solver=solver, max_iter=1000).fit(train_x, train_y)
        score = float(np.mean(model.predict(dev_x) == np.asarray(dev_y)))
        if best is None or score > best[0]:
            best = (score, c, model)
    assert best is not None
    return best[2], best[1]


def label_answers(probabilities: np.ndarray, classes: Sequence[int], labels: dict[int, str]) -> list[dict[str, Any]]:
    """Answers in the model's shape, `{"label", "probabilities"}`, from the classifier's class probabilities (a class
    absent from the train split has probability 0)."""
    out = []
    for row in probabilities:
        full = {labels[i]: 0.0 for i in sorted(labels)}
        for cls, p in zip(classes, row, strict=True):
            full[labels[int(cls)]] = float(p)
        out.append({"label": max(full.items(), key=lambda item: item[1])[0], "probabilities": full})
    return out


def fit_predict(
    train: Sequence[dict[str, Any]],
    dev: Sequence[dict[str, Any]],
    test: Sequence[dict[str, Any]],
    labels: dict[int, str],
) -> tuple[list[dict[str, Any]], dict[str, Any], None]:
    """Fit on `train` (C chosen on `dev`), answer `test`; the settings used, and no weights (the CRF's alone are
    folded into a model)."""
    vec = vectorizer()
    train_x = vec.fit_transform([r["text"] for r in train])
    model, c = fit_on_dev(train_x, [int(r["label"]) for r in train], vec.transform([r["text"] for r in dev]),
                          [int(r["label"]) for r in dev])  # fmt: skip
    probabilities = model.predict_proba(vec.transform([r["text"] for r in test]))
    settings = {"ngram_range": list(NGRAMS), "C": c, "features": int(train_x.shape[1])}
    return label_answers(probabilities, model.classes_, labels), settings, None
