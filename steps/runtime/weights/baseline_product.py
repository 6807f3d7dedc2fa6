"""The NER baseline's CRF folded into the trained model (`model.baseline_product`): a product of the two.

The trained tagger and the cheap baseline (steps/runtime/data/baselines/crf.py) are both linear-chain CRFs over the
same tags, and their errors differ (on the People's Daily test split the model finds entities the CRF misses and
the other way round). A product of two CRFs is one CRF whose scores are their sum: with weight w, each character's
tag scores are the model's emissions plus w times the baseline's state-feature weights of its window, and the
transitions are the model's plus w times the baseline's. The model's wide half (steps/runtime/weights/
wide_scores.py) reads exactly the baseline's features from the ids: the characters at offsets −2 … +2, the four
bigrams and the centred trigram. So the product needs no new layer: `fold` adds w · the baseline's weight of each
feature to the row the wide half reads for it, w · its `bias` feature to the classifier's bias and w · its
transitions to the CRF head's. The export, every engine and every decode then run the product unchanged.

Where the two read a feature differently, the fold is what the model can hold:
- the baseline's marks before and after the text (crf.py BEGIN, END) are the model's [CLS] and [SEP] next to the
  text and the padding id beyond them (WindowScores pads the row so);
- a character the tokenizer reads as [UNK] has no row of its own (all such characters share one): its weights
  are left out, as are a bigram's or trigram's outside the n-gram table's vocabulary (row 0 is every unseen
  n-gram's) and the trigram's when the table has no trigrams (`model.char_ngram_trigrams` off);
- characters the tokenizer reads as one token (full- and half-width forms) share its row: it gets their mean.
The counts of what was folded and left out are returned (the train step logs them and writes them to
training.json).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from itertools import product
from typing import Any

import numpy as np
import paddle

from steps.runtime.data.baselines.crf import BEGIN, END
from steps.runtime.data.tasks.ner import char_ids
from steps.runtime.weights import char_ngrams, crf_head, wide_scores

# crfsuite attribute name -> (the kind of n-gram, the window offset of its first character)
FEATURES = {f"c{k}": ("unigram", k) for k in wide_scores.UNIGRAMS}
FEATURES |= {f"b{k}": ("bigram", k) for k in wide_scores.BIGRAMS}
FEATURES["t0"] = ("trigram", -1)


def _member_ids(value: str, first: int, token_id: dict[str, int], cls: int, sep: int, pad: int) -> Iterator[tuple]:
    """Every tuple of token ids the model reads where the baseline reads `value` (characters at window offsets
    `first`, `first + 1`, …): a mark next to the text (offset ±1, or beside a character of the value) is [CLS] or
    [SEP]; one beside another mark is the padding; one whose neighbour towards the text is outside `value` is
    either (c-2 = BEGIN is the padding for the first character, [CLS] for the second)."""
    options: list[tuple[int, ...]] = []
    for i, ch in enumerate(value):
        offset = first + i
        if ch in (BEGIN, END):
            inward = i + 1 if ch == BEGIN else i - 1  # the neighbour on the text's side
            edge = cls if ch == BEGIN else sep
            if offset in (-1, 1) or (0 <= inward < len(value) and value[inward] not in (BEGIN, END)):
                options.append((edge,))
            elif 0 <= inward < len(value):
                options.append((pad,))
            else:
                options.append((pad, edge))
        else:
            options.append((token_id[ch],))
    yield from product(*options)


def fold(model: Any, weights: dict[str, Any], weight: float, tokenizer: Any, labels: dict[int, str]) -> dict[str, int]:
    """Add `weight` × the baseline CRF's `weights` (crf.py `weights`: state features by attribute and label,
    transitions by label pair) to `model`'s wide half, classifier bias and CRF transitions, in place; the counts of
    the features folded and left out. `weight` −w undoes a fold of w."""
    inner = crf_head.unwrapped(model)
    wide, crf = getattr(inner, "wide", None), getattr(inner, "crf", None)
    ngrams = inner.ernie.embeddings.word_embeddings
    if not isinstance(wide, wide_scores.WindowScores) or crf is None or not ngrams.vocabulary:
        raise ValueError("the baseline's CRF folds into a tagger with wide_scores, crf_head and an n-gram vocabulary")
    index = {name: i for i, name in labels.items()}
    pad, cls, sep, unk = (int(ngrams._padding_idx or 0), tokenizer.cls_token_id, tokenizer.sep_token_id,
                          tokenizer.unk_token_id)  # fmt: skip
    chars = {ch for attr in weights["state"] for ch in attr.partition("=")[2]} - {BEGIN, END}
    token_id = {ch: char_ids(tokenizer, ch)[0] for ch in chars}
    tables = {("unigram", k): (table, None) for k, table in zip(wide_scores.UNIGRAMS, wide.unigrams, strict=True)}
    tables |= {("bigram", k): (table, ngrams.vocabulary[char_ngrams.BIGRAM])
               for k, table in zip(wide_scores.BIGRAMS, wide.bigrams, strict=True)}  # fmt: skip
    if wide.trigram is not None:
        tables[("trigram", -1)] = (wide.trigram, ngrams.vocabulary[char_ngrams.TRIGRAM])
    # (table, row) -> the summed weights of the features that land there, and how many did
    sums: dict[tuple[Any, int], np.ndarray] = defaultdict(lambda: np.zeros(len(labels)))
    seen: dict[tuple[Any, int], int] = defaultdict(int)
    counts = {"folded": 0, "unknown_character": 0, "outside_vocabulary": 0, "no_table": 0}
    bias = np.zeros(len(labels))
    for attr, by_label in weights["state"].items():
        scores = np.zeros(len(labels))
        for label, w in by_label.items():
            scores[index[label]] = w
        name, _, value = attr.partition("=")
        if name == "bias":
            bias += scores
            continue
        key = FEATURES[name]
        if key not in tables:
            counts["no_table"] += 1
            continue
        table, vocabulary = tables[key]
        grams = list(_member_ids(value, key[1], token_id, cls, sep, pad))
        if any(unk in gram for gram in grams):
            counts["unknown_character"] += 1
            continue
        rows = [gram[0] if vocabulary is None else vocabulary.get(gram, 0) for gram in grams]
        if 0 in rows and vocabulary is not None:
            counts["outside_vocabulary"] += 1
            continue
        counts["folded"] += 1
        for row in rows:
            sums[(key, row)] += scores
            seen[(key, row)] += 1
    with paddle.no_grad():
        for key, (table, _) in tables.items():
            rows = [row for k, row in sums if k == key]
            if not rows:
                continue
            update = np.stack([sums[(key, r)] / seen[(key, r)] for r in rows]) * weight
            current = table.weight.numpy()
            current[rows] += update.astype(current.dtype)
            table.weight.set_value(current)
        classifier_bias = inner.classifier.bias
        classifier_bias.set_value(classifier_bias.numpy() + (weight * bias).astype("float32"))
        transitions = np.zeros((len(labels), len(labels)))
        for before, row in weights["transitions"].items():
            for after, w in row.items():
                transitions[index[before], index[after]] = w
        crf.transitions.set_value(crf.transitions.numpy() + (weight * transitions).astype("float32"))
    return counts


def fold_if_better(
    model: Any,
    weights: dict[str, Any],
    weight: float,
    tokenizer: Any,
    labels: dict[int, str],
    before: float,
    dev_score: Callable[[], float],
) -> dict[str, Any]:
    """`fold`, kept only where `dev_score()` (the dev split's gate metric of the model as it is now) rises above
    `before` (the same metric of the model as it was: the train step has it from choosing the best epoch); what was
    done, for training.json."""
    counts = fold(model, weights, weight, tokenizer, labels)
    after = dev_score()
    kept = after > before
    if not kept:
        fold(model, weights, -weight, tokenizer, labels)
    return {"weight": weight, "kept": kept, "dev_before": round(before, 6), "dev_after": round(after, 6), **counts}
