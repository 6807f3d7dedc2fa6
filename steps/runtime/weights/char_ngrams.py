"""Hashed character-bigram embeddings added to ERNIE's token embeddings (`model.char_ngram_buckets`).

A character vocabulary gives the small local model one vector per character; the cheap baselines it is measured
against (DESIGN.md) win on the n-grams: the TF-IDF model reads character 1–3-grams, the NER CRF the bigrams
around each character. Here each token also gets the embedding of its left bigram (previous token, token) and its
right bigram (token, next token), hashed into `buckets` rows of one table, in the spirit of fastText's hashed
n-grams and the character-plus-bigram inputs of Chinese NER models. The bigrams are computed inside the model from
`input_ids`, so the export's inputs, the tokenizer and every engine variant stay as they are.

The layer replaces `ernie.embeddings.word_embeddings` and keeps its `weight` (a pretrained vocabulary loads into
it unchanged); the table is new, initialised to zero so a fine-tune starts from exactly the pretrained model.
"""

from __future__ import annotations

from typing import Any

import paddle
from paddle import nn

# Two primes: the bigram (a, b) hashes to (a * FIRST + b + SECOND) mod buckets. Token ids are below 2^20 and
# buckets below 2^31, so nothing overflows int64.
FIRST, SECOND = 7919, 1000003


class CharBigramEmbedding(nn.Embedding):
    """The token embedding plus the embeddings of the token's left and right bigrams (pad next to the edges)."""

    def __init__(self, word: nn.Embedding, buckets: int) -> None:
        vocab, hidden = word.weight.shape
        super().__init__(vocab, hidden, padding_idx=word._padding_idx)
        self.weight.set_value(word.weight)
        self.buckets = buckets
        zero = paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))
        self.bigrams = nn.Embedding(buckets, hidden, weight_attr=zero)

    def forward(self, input_ids: paddle.Tensor) -> paddle.Tensor:
        # The bigrams of the row padded on both sides, hashed and looked up once: position t's left bigram is pair
        # t, its right bigram pair t + 1.
        pad = paddle.full_like(input_ids[:, :1], self._padding_idx or 0)
        padded = paddle.concat([pad, input_ids, pad], axis=1)
        first, second = padded[:, :-1], padded[:, 1:]
        pairs = self.bigrams(paddle.remainder(first * FIRST + second + SECOND, paddle.full_like(first, self.buckets)))
        return super().forward(input_ids) + pairs[:, :-1] + pairs[:, 1:]


def add_char_bigrams(model: Any, buckets: int) -> Any:
    """`model` (a PaddleNLP ERNIE head) with CharBigramEmbedding in place of its word embeddings; unchanged when
    `buckets` is 0."""
    if buckets:
        embeddings = model.ernie.embeddings
        embeddings.word_embeddings = CharBigramEmbedding(embeddings.word_embeddings, buckets)
    return model
