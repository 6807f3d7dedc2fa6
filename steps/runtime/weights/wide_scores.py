"""The wide half of a wide-and-deep model (`model.wide_scores`): per-label weights of character n-grams, read straight
from the ids and added to the encoder's scores, so the model holds the cheap baseline's linear model beside the
encoder, trained by one loss.

- Token classification (NER): each character's tags score its ±2 window, the features of the NER baseline
  (steps/runtime/data/baselines/crf.py): the characters at offsets −2 … +2, the four character bigrams of the window
  and the centred trigram. With the CRF head (`model.crf_head`) the model then holds the baseline's whole
  linear-chain CRF (state features and transitions) beside the encoder's emissions.
- Text classification (sentiment): the text's labels score its bag of characters, bigrams and trigrams, the
  n-grams of the TF-IDF baseline (steps/runtime/data/baselines/), summed and divided by the square root of the text's
  length (as the baseline's rows are scaled to unit length).

The bigram and trigram rows are the n-gram table's (steps/runtime/weights/char_ngrams.py: its vocabulary, a
zero-meaning row 0 for an n-gram never seen twice, and its hash, which every engine computes exactly), so the wide
half needs that table on. Every weight starts at 0: training starts from the model without them, and a pre-trained
encoder is fine-tuned as before.

The layer is a sublayer of the model (`model.wide`), so the optimizer, DataParallel, the checkpoints and a resumed
run carry it like any other parameter; the model's class becomes PaddleNLP's ERNIE head whose forward adds its
scores to the logits (`WindowTagger`, `BagClassifier`), so the exported graph's logits hold them and every engine
and decode reads them unchanged.
"""

from __future__ import annotations

from typing import Any

import paddle
from paddle import nn
from paddlenlp.transformers import ErnieForSequenceClassification, ErnieForTokenClassification

from steps.runtime.weights import char_ngrams, crf_head

# Offsets of the window's characters, and of the first character of each of its bigrams (crf.py: c-2 … c2, b-2 … b1).
UNIGRAMS = (-2, -1, 0, 1, 2)
BIGRAMS = (-2, -1, 0, 1)
# The window's weights learn at a peak rate of their own, whatever the encoder's, as the CRF's transitions do
# (crf_head.CRF_RATE): a feature most windows never hold is updated in a few steps only, and a fine-tune of ERNIE 3.0
# runs its encoder at 5e-5. docs/benchmarks.md has the rates measured.
WIDE_RATE = 0.03


def _table(rows: int, num_labels: int) -> nn.Embedding:
    """A weight per tag for each of `rows` features, 0 at first (row 0 of an n-gram table, the n-grams outside the
    vocabulary, learns a weight too: crfsuite has no such feature, but "a rare bigram here" is one)."""
    return nn.Embedding(rows, num_labels, weight_attr=paddle.ParamAttr(initializer=nn.initializer.Constant(0.0)))


class WindowScores(nn.Layer):
    """[batch, length, labels] scores: for each position the sum of its window's characters', bigrams' and trigram's
    weights (positions outside the row read the padding id, as crf.py's BEGIN and END marks)."""

    def __init__(self, vocab_size: int, ngrams: Any, num_labels: int) -> None:
        super().__init__()
        self.unigrams = nn.LayerList([_table(vocab_size, num_labels) for _ in UNIGRAMS])
        rows = ngrams.bigrams.weight.shape[0]
        self.bigrams = nn.LayerList([_table(rows, num_labels) for _ in BIGRAMS])
        self.trigram = _table(ngrams.trigrams.weight.shape[0], num_labels) if ngrams.trigrams is not None else None

    def forward(self, input_ids: paddle.Tensor, ngrams: Any) -> paddle.Tensor:
        """`ngrams` is the model's CharBigramEmbedding (passed, not held, so its weights are not a second time in the
        state dict): its rows for the bigrams and trigrams of the padded row."""
        length = paddle.shape(input_ids)[1]
        padded = ngrams.padded(input_ids, 2)  # position t is padded[t + 2]
        scores = [self.unigrams[i](padded[:, k + 2 : k + 2 + length]) for i, k in enumerate(UNIGRAMS)]
        pairs = ngrams.rows(padded[:, :-1], padded[:, 1:])  # pair j: (padded[j], padded[j + 1])
        scores += [self.bigrams[i](pairs[:, k + 2 : k + 2 + length]) for i, k in enumerate(BIGRAMS)]
        if self.trigram is not None:
            rows = ngrams.trigram_rows(padded[:, 1 : length + 1], padded[:, 2 : length + 2], padded[:, 3 : length + 3])
            scores.append(self.trigram(rows))
        total = scores[0]
        for score in scores[1:]:
            total = total + score
        return total


class WindowTagger(ErnieForTokenClassification):
    """PaddleNLP's ERNIE token classifier whose logits add its window's scores (`attach` makes a model one)."""

    def forward(self, input_ids: paddle.Tensor, token_type_ids: paddle.Tensor | None = None) -> paddle.Tensor:
        # ErnieForTokenClassification.forward's own lines (called through the sublayers: the export's dy2static does
        # not convert a base class's forward called as a function)
        sequence_output = self.ernie(input_ids, token_type_ids=token_type_ids)[0]
        logits = self.classifier(self.dropout(sequence_output))
        return logits + self.wide(input_ids, self.ernie.embeddings.word_embeddings)


class BagScores(nn.Layer):
    """[batch, labels] scores: the sum of the weights of the text's characters, bigrams and trigrams (those of its
    tokens, not of the padding), divided by the square root of its length in tokens."""

    def __init__(self, vocab_size: int, ngrams: Any, num_labels: int) -> None:
        super().__init__()
        self.unigrams = _table(vocab_size, num_labels)
        self.bigrams = _table(ngrams.bigrams.weight.shape[0], num_labels)
        self.trigrams = _table(ngrams.trigrams.weight.shape[0], num_labels) if ngrams.trigrams is not None else None

    def forward(self, input_ids: paddle.Tensor, ngrams: Any) -> paddle.Tensor:
        # an integer comparison, then float: the ids stay integers in every engine
        held = (input_ids != char_ngrams.const(int(ngrams._padding_idx or 0))).astype("float32")
        total = (self.unigrams(input_ids) * held.unsqueeze(-1)).sum(axis=1)
        pairs = held[:, :-1] * held[:, 1:]
        rows = ngrams.rows(input_ids[:, :-1], input_ids[:, 1:])
        total = total + (self.bigrams(rows) * pairs.unsqueeze(-1)).sum(axis=1)
        if self.trigrams is not None:
            rows = ngrams.trigram_rows(input_ids[:, :-2], input_ids[:, 1:-1], input_ids[:, 2:])
            total = total + (self.trigrams(rows) * (pairs[:, :-1] * held[:, 2:]).unsqueeze(-1)).sum(axis=1)
        return total / paddle.sqrt(held.sum(axis=1, keepdim=True))


class BagClassifier(ErnieForSequenceClassification):
    """PaddleNLP's ERNIE sequence classifier whose logits add its bag's scores (`attach` makes a model one)."""

    def forward(self, input_ids: paddle.Tensor, token_type_ids: paddle.Tensor | None = None) -> paddle.Tensor:
        # ErnieForSequenceClassification.forward's own lines, as WindowTagger's
        pooled_output = self.ernie(input_ids, token_type_ids=token_type_ids)[1]
        logits = self.classifier(self.dropout(pooled_output))
        return logits + self.wide(input_ids, self.ernie.embeddings.word_embeddings)


def attach(model: Any) -> Any:
    """`model` (an ERNIE token or sequence classifier with the n-gram table on) with a `wide` half of zero weights:
    a WindowTagger or a BagClassifier."""
    ngrams = model.ernie.embeddings.word_embeddings
    if isinstance(model, ErnieForTokenClassification):
        model.wide, model.__class__ = WindowScores(ngrams._num_embeddings, ngrams, model.num_labels), WindowTagger
    else:
        model.wide, model.__class__ = BagScores(ngrams._num_embeddings, ngrams, model.num_labels), BagClassifier
    return model


def own_rate(model: Any) -> tuple[list[Any], float]:
    """The parameters that learn at a peak rate of their own (the wide half's; none without one), and that rate
    (optimization.make_optimizer applies it)."""
    wide = getattr(crf_head.unwrapped(model), "wide", None)
    return (wide.parameters() if wide is not None else []), WIDE_RATE
