"""Hashed character-bigram embeddings added to ERNIE's token embeddings (`model.char_ngram_buckets`).

A character vocabulary gives the small local model one vector per character; the cheap baselines it is measured
against (DESIGN.md) win on the n-grams: the TF-IDF model reads character 1–3-grams, the NER CRF the bigrams
around each character. Here each token also gets the embedding of its left bigram (previous token, token) and its
right bigram (token, next token), hashed into `buckets` rows of one table, in the spirit of fastText's hashed
n-grams and the character-plus-bigram inputs of Chinese NER models. The bigrams are computed inside the model from
`input_ids`, so the export's inputs, the tokenizer and every engine variant stay as they are.

The layer replaces `ernie.embeddings.word_embeddings` and keeps its `weight` (a pretrained vocabulary loads into
it unchanged); the table is new, initialised to zero so a fine-tune starts from exactly the pretrained model.

`dim` (`model.char_ngram_dim`) narrower than the hidden size keeps the table's rows that wide and projects their sum
to the hidden size (no bias, so a zero table still adds nothing). The table is dense: AdamW updates and the data-
parallel all-reduce move every row at every step, which is most of its cost on CPU (262,144 × 128 rows: ~0.19 s a
step on 2 cores; 65,536 × 32: ~0.01 s; docs/benchmarks.md, "Quality").
"""

from __future__ import annotations

from typing import Any

import paddle
from paddle import nn

# Two primes: the bigram (a, b) hashes to (a * FIRST + b + SECOND) mod buckets. Token ids are below 2^20 and
# buckets below 2^31, so nothing overflows int64; OpenVINO's CPU plugin runs int64 as int32, which holds the sum
# for token ids below 2^18 (every ERNIE vocabulary: 40,000 ids for ERNIE 3.0).
FIRST, SECOND = 7919, 1000003


class CharBigramEmbedding(nn.Embedding):
    """The token embedding plus the embeddings of the token's left and right bigrams (pad next to the edges)."""

    def __init__(self, word: nn.Embedding, buckets: int, dim: int = 0) -> None:
        vocab, hidden = word.weight.shape
        super().__init__(vocab, hidden, padding_idx=word._padding_idx)
        self.weight.set_value(word.weight)
        self.buckets = buckets
        zero = paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))
        width = dim if 0 < dim < hidden else hidden
        self.bigrams = nn.Embedding(buckets, width, weight_attr=zero)
        self.project = nn.Linear(width, hidden, bias_attr=False) if width < hidden else None

    def rows(self, first: paddle.Tensor, second: paddle.Tensor) -> paddle.Tensor:
        """The table rows of bigrams (first, second), in integer arithmetic throughout: a Python number times a
        tensor is Paddle's `scale` op, which paddle2onnx exports as a float32 multiply (exact only below 2^24, and
        in bf16 — OpenVINO's bf16 variant — not at all), and `full_like` as a float fill converted back; so each
        constant is a one-element int64 tensor (an int64 Constant in ONNX and OpenVINO), broadcast."""

        def const(value: int) -> paddle.Tensor:
            return paddle.full([1], value, dtype="int64")

        return paddle.remainder(first * const(FIRST) + second + const(SECOND), const(self.buckets))

    def forward(self, input_ids: paddle.Tensor) -> paddle.Tensor:
        # The bigrams of the row padded on both sides, hashed and looked up once: position t's left bigram is pair
        # t, its right bigram pair t + 1.
        pad = input_ids[:, :1] * 0 + paddle.full([1], self._padding_idx or 0, dtype="int64")  # integer, as rows()
        padded = paddle.concat([pad, input_ids, pad], axis=1)
        first, second = padded[:, :-1], padded[:, 1:]
        pairs = self.bigrams(self.rows(first, second))
        around = pairs[:, :-1] + pairs[:, 1:]
        return super().forward(input_ids) + (self.project(around) if self.project is not None else around)


def add_char_bigrams(model: Any, buckets: int, dim: int = 0) -> Any:
    """`model` (a PaddleNLP ERNIE head) with CharBigramEmbedding in place of its word embeddings (rows `dim` wide,
    0: the hidden size); unchanged when `buckets` is 0."""
    if buckets:
        embeddings = model.ernie.embeddings
        embeddings.word_embeddings = CharBigramEmbedding(embeddings.word_embeddings, buckets, dim)
    return model
