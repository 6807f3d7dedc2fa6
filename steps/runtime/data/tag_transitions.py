"""Tag-transition scores for token classification (`model.tag_transitions`).

The model scores each character's tags on their own; decoding (steps/runtime/data/tasks/ner.py `decode_tags`) finds
the best valid BIO sequence. With transitions it maximises Σ log p(tag_t | text) + w · Σ log P(tag_t | tag_t−1):
the second term is how often the train split's tag sequences go from one tag to the next (add-one smoothed), the
part of a linear-chain CRF's score a per-character softmax has no term for (a name two characters long is likely
to go on to a third; the model scores the third character without knowing that). The weight w is the one of
WEIGHTS (0 included: never worse on dev than decoding without) that scores best on the dev split with the trained
model's own probabilities, so the train step picks it after training and nothing in the graph changes: the export
and every engine stay as they are, and the export carries the chosen matrix in `tag_transitions.json`, which
evaluation, validation and the model server decode with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from steps.runtime.runner import StepError

FILE = "tag_transitions.json"
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def counted(tag_rows: Iterable[Sequence[str]], names: Sequence[str]) -> np.ndarray:
    """[from, to] log P(to | from) over the tag sequences `tag_rows`, add-one smoothed (finite everywhere)."""
    index = {name: i for i, name in enumerate(names)}
    counts = np.ones((len(names), len(names)))
    for tags in tag_rows:
        ids = [index[t] for t in tags]
        np.add.at(counts, (ids[:-1], ids[1:]), 1)
    return np.log(counts / counts.sum(axis=1, keepdims=True))


def choose(log_probs: np.ndarray, score: Callable[[np.ndarray | None], float]) -> tuple[float, dict[str, float]]:
    """The weight of WEIGHTS whose scaled `log_probs` `score` (the dev split's gate metric) rates best, the first
    of equals (so 0 where nothing beats decoding without), and every weight's score."""
    scores = {w: score(w * log_probs if w else None) for w in WEIGHTS}
    best = max(WEIGHTS, key=lambda w: (scores[w], -w))
    return best, {str(w): round(s, 6) for w, s in scores.items()}


def write(
    model_dir: Path,
    names: Sequence[str],
    log_probs: np.ndarray,
    weight: float,
    dev: dict[str, float],
    source: str = "counted",
) -> Path:
    """`tag_transitions.json` beside the export: the tags in label order, the [from, to] scores (`source` counted:
    log-probabilities from the train split; learned: a CRF head's, steps/runtime/weights/crf_head.py), the chosen
    weight and every weight's dev score."""
    path = Path(model_dir) / FILE
    record = {
        "labels": list(names),
        "log_probs": np.round(log_probs, 6).tolist(),
        "source": source,
        "weight": weight,
        "dev": dev,
    }
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def read(model_dir: Path, labels: dict[int, str]) -> np.ndarray | None:
    """The weighted [from, to] scores an export decodes with; None when it has none or its weight is 0. An export
    whose file names other tags than its label_map.json is refused (decoding with it would shift every tag)."""
    path = Path(model_dir) / FILE
    if not path.is_file():
        return None
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        names, weight = list(record["labels"]), float(record["weight"])
        matrix = np.asarray(record["log_probs"], dtype="float64")
    except (ValueError, KeyError, TypeError) as exc:
        raise StepError(f"{path} is not a tag-transition file ({exc}); re-export the model with the train step.") from (
            None
        )
    expected = [labels[i] for i in sorted(labels)]
    if names != expected or matrix.shape != (len(names), len(names)):
        raise StepError(
            f"{path} scores the tags {names} but label_map.json has {expected}; the two files are from different "
            "exports. Re-export the model with the train step."
        )
    return weight * matrix if weight else None
