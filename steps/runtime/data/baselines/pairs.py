"""The text-matching baseline: the text-classification baseline's TF-IDF vectors of both texts turned into pair
features (their element-wise product and absolute difference, plus cosine similarity, character Jaccard overlap and
length ratio) and logistic regression on them, C chosen on the dev split."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from steps.runtime.data.baselines import text

KIND = "pair-tfidf-logreg"
DESCRIPTION = "char 1-3-gram TF-IDF pair features + logistic regression"


def pair_features(vec: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """Sparse [rows, 2 * vocabulary + 3] pair features (TF-IDF rows are L2-normalised, so a · b is the cosine)."""
    from scipy import sparse

    a = vec.transform([r["text_a"] for r in rows])
    b = vec.transform([r["text_b"] for r in rows])
    product = a.multiply(b).tocsr()
    difference = abs(a - b).tocsr()
    scalars = np.array([_scalars(r["text_a"], r["text_b"]) for r in rows], dtype=np.float32)
    cosine = np.asarray(product.sum(axis=1), dtype=np.float32)
    return sparse.hstack([product, difference, sparse.csr_matrix(np.hstack([cosine, scalars]))]).tocsr()


def _scalars(a: str, b: str) -> tuple[float, float]:
    sa, sb = set(a), set(b)
    jaccard = len(sa & sb) / len(sa | sb) if sa | sb else 1.0
    return jaccard, min(len(a), len(b)) / max(len(a), len(b), 1)


def fit_predict(
    train: Sequence[dict[str, Any]],
    dev: Sequence[dict[str, Any]],
    test: Sequence[dict[str, Any]],
    labels: dict[int, str],
) -> tuple[list[dict[str, Any]], dict[str, Any], None]:
    """Fit on `train` (C chosen on `dev`), answer `test`; the settings used, and no weights (the CRF's alone are
    folded into a model)."""
    vec = text.vectorizer().fit([r[k] for r in train for k in ("text_a", "text_b")])
    train_x = pair_features(vec, train)
    model, c = text.fit_on_dev(train_x, [int(r["label"]) for r in train], pair_features(vec, dev),
                               [int(r["label"]) for r in dev])  # fmt: skip
    probabilities = model.predict_proba(pair_features(vec, test))
    settings = {"ngram_range": list(text.NGRAMS), "C": c, "features": int(train_x.shape[1])}
    return text.label_answers(probabilities, model.classes_, labels), settings, None
