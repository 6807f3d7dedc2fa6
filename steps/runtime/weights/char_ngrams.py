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

`sides: concat` (`model.char_ngram_sides`) projects the left and the right bigram's rows side by side instead of
their sum, so the model tells a bigram ending at a character from one starting there (a CRF's features do: an
entity's edge is exactly that difference).

`min_count` (`model.char_ngram_min_count`) 1 or more gives the table a vocabulary: prepare-data counts the train
split's bigrams once (`ngrams.npz`), and the train step (`apply_table`; `fit_vocabulary` from rows, the same) gives
each one seen at least that often its own row, most frequent first;
every other bigram reads row 0, which stays zero (padding_idx: no gradient), as a CRF ignores a feature it never
saw. Hashing alone puts a bigram the training data never had on the row some other bigram trained (a 262,144-row
table holding the NER train split's 246,561 bigrams is 61 % full), which is noise exactly where a rare name is. The
bigram -> row map is an int32 buffer of SLOTS entries in the model (the export carries it; 16 MiB): a bigram hashes
to a slot (below), and the slot holds its row. Two bigrams of the vocabulary on one slot: the more
frequent keeps it, the other reads row 0; an unseen bigram on a taken slot reads that row (SLOTS is 36 times
the 114,000 NER bigrams seen twice, so about 3 % of them).

`trigrams` (`model.char_ngram_trigrams`, with a vocabulary only) adds a second table of the same size for each
character's centred trigram (previous, itself, next), with its own map and the same min_count, its row concatenated
before the projection (the TF-IDF baseline reads 1-3-grams). How an n-gram hashes (the constants below): from
per-token codes, summed, so that every engine computes it exactly. Two earlier hashes that multiplied (a trigram
slot times a constant, then a token id times 7919 reduced with a Mod) made OpenVINO read other rows than Paddle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import paddle
from paddle import nn

from steps.runtime.runner import StepError

# The hash: a bigram (a, b) goes to (a * FIRST + b + SECOND) mod modulus, a trigram (a, b, c) to
# (a * FIRST + SECOND + b * THIRD + c) mod modulus: two primes and a prime below 2^13. The graph computes neither
# product nor the Mod: OpenVINO's CPU plugin computes FloorMod in float32, exact only below 2^24, so with the hash
# computed in the graph its variants read other rows than Paddle for every token id above 2,117 (tests/
# test_char_ngrams.py `test_the_converted_graphs_hash_large_token_ids_exactly`), and paddle2onnx exports a Python
# number times a tensor as a float32 multiply. Instead every token id has its codes, computed here in Python and held
# by the model (a buffer: the export carries them): (id * FIRST + SECOND), id, (id * THIRD) and id, each mod modulus,
# for its place in a bigram (first, second) or a trigram (first, second, third). The graph gathers an n-gram's codes,
# sums them and subtracts the modulus while the sum is above it: integer gathers, adds and compares of values below
# 3 x modulus.
FIRST, SECOND = 7919, 1000003
THIRD = 6151
BIGRAM, TRIGRAM = (0, 1), (0, 2, 3)  # the rows of `codes` each member of an n-gram reads
SLOTS = 2**22  # entries of the n-gram -> row map of a table with a vocabulary (min_count >= 1)
SIDES = ("sum", "concat")


def const(value: int, dtype: Literal["int32", "int64"] = "int64") -> paddle.Tensor:
    """A one-element integer tensor, broadcast: the graph's integer constants (CharBigramEmbedding.rows says why)."""
    return paddle.full([1], value, dtype=dtype)


def codes(vocab: int, modulus: int) -> np.ndarray:
    """[4, vocab] int32: each token id's code as an n-gram's member, in [0, modulus): first (of a bigram or a
    trigram), second of a bigram, second of a trigram, third of a trigram (BIGRAM, TRIGRAM)."""
    ids = np.arange(vocab, dtype="int64")
    return (np.stack([ids * FIRST + SECOND, ids, ids * THIRD, ids]) % modulus).astype("int32")


def _wrap(value: paddle.Tensor, modulus: int, times: int) -> paddle.Tensor:
    """`value` mod `modulus` for a `value` below (times + 1) x modulus: `modulus` subtracted while it is above."""
    m = const(modulus, "int32")
    for _ in range(times):
        value = paddle.where(value >= m, value - m, value)
    return value


def _fill(counts: Counter[Any], min_count: int, size: int, slot_of: Any) -> tuple[np.ndarray, dict[Any, int], int]:
    """A map of SLOTS entries giving the n-grams of `counts` seen at least `min_count` times rows 1.. (most
    frequent first, below `size`); the map, each n-gram given a row with its row, and the n-grams lost to a taken
    slot."""
    slots = np.zeros(SLOTS, dtype="int32")
    given: dict[Any, int] = {}
    clashes = 0
    for gram, seen in counts.most_common():
        if seen < min_count or len(given) + 1 >= size:
            break
        slot = slot_of(*gram)
        if slots[slot]:
            clashes += 1
            continue
        given[gram] = slots[slot] = len(given) + 1
    return slots, given, clashes


class CharBigramEmbedding(nn.Embedding):
    """The token embedding plus the embeddings of the token's left and right bigrams (pad next to the edges)."""

    def __init__(
        self,
        word: nn.Embedding,
        buckets: int,
        dim: int = 0,
        min_count: int = 0,
        sides: str = "sum",
        trigrams: bool = False,
    ) -> None:
        if sides not in SIDES:
            raise ValueError(f"sides must be one of {SIDES}, not {sides!r}")
        if trigrams and not min_count:
            raise ValueError("trigrams need a vocabulary (min_count >= 1)")
        vocab, hidden = word.weight.shape
        super().__init__(vocab, hidden, padding_idx=word._padding_idx)
        self.weight.set_value(word.weight)
        self.buckets, self.min_count, self.concat = buckets, min_count, sides == "concat"
        zero = paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))
        width = dim if 0 < dim < hidden else hidden
        # With a vocabulary, row 0 is every bigram outside it: zero, and no gradient reaches it.
        self.bigrams = nn.Embedding(buckets, width, padding_idx=0 if min_count else None, weight_attr=zero)
        inputs = (2 * width if self.concat else width) + (width if trigrams else 0)
        self.project = nn.Linear(inputs, hidden, bias_attr=False) if inputs != hidden else None
        self.modulus = SLOTS if min_count else buckets
        self.register_buffer("codes", paddle.to_tensor(codes(vocab, self.modulus)), persistable=True)
        if min_count:
            self.register_buffer("slots", paddle.zeros([SLOTS], dtype="int32"), persistable=True)
        self.trigrams = nn.Embedding(buckets, width, padding_idx=0, weight_attr=zero) if trigrams else None
        # fit_vocabulary's n-grams of token ids and the rows they own, per kind (BIGRAM, TRIGRAM): what a weight
        # learned outside the model for one n-gram may be written to (steps/runtime/weights/baseline_product.py)
        self.vocabulary: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}
        if trigrams:
            self.register_buffer("trigram_slots", paddle.zeros([SLOTS], dtype="int32"), persistable=True)

    def fit_vocabulary(self, rows: Sequence[Sequence[int]]) -> dict[str, int]:
        """Give the bigrams of `rows` (the train split's input_ids, unpadded) seen at least `min_count` times their
        own rows, most frequent first, up to the table's size; the counts of what it did (logged and recorded)."""
        pad = int(self._padding_idx or 0)
        counts: Counter[tuple[int, int]] = Counter()
        triples: Counter[tuple[int, int, int]] = Counter()
        for ids in rows:
            padded = [pad, *ids, pad]
            counts.update(zip(padded[:-1], padded[1:], strict=False))
            if self.trigrams is not None:
                triples.update(zip(padded[:-2], padded[1:-1], padded[2:], strict=False))
        slots, self.vocabulary[BIGRAM], clashes = _fill(counts, self.min_count, self.buckets, self.slotter(BIGRAM))
        self.slots.set_value(paddle.to_tensor(slots))
        frequent = sum(1 for seen in counts.values() if seen >= self.min_count)
        rows_ = len(self.vocabulary[BIGRAM])
        out = {"distinct": len(counts), "frequent": frequent, "rows": rows_, "slot_clashes": clashes}
        if self.trigrams is not None:
            slots, self.vocabulary[TRIGRAM], clashes = _fill(
                triples, self.min_count, self.buckets, self.slotter(TRIGRAM)
            )
            self.trigram_slots.set_value(paddle.to_tensor(slots))
            rows_ = len(self.vocabulary[TRIGRAM])
            out |= {"trigrams_distinct": len(triples), "trigram_rows": rows_, "trigram_slot_clashes": clashes}
        return out

    def slot(self, *ids: int) -> int:
        """What the graph computes for one bigram or trigram of token ids, in Python: its hash (the table's row
        without a vocabulary, the map's slot with one)."""
        return self.slotter(BIGRAM if len(ids) == 2 else TRIGRAM)(*ids)

    def slotter(self, parts: Sequence[int]) -> Callable[..., int]:
        """`slot` for the n-grams whose members read the code rows `parts`, the codes read once (fit_vocabulary
        hashes every n-gram of the train split)."""
        table, modulus = self.codes.numpy(), self.modulus
        return lambda *ids: sum(int(table[part, token]) for part, token in zip(parts, ids, strict=True)) % modulus

    def hashed(self, parts: Sequence[int], *ids: paddle.Tensor) -> paddle.Tensor:
        """The hash of the n-grams (ids[0][i], ids[1][i], …) in the graph, as `slot`: the codes of rows `parts`
        gathered and added, the modulus subtracted (int32 throughout, below 3 x modulus; no Mod, no multiply)."""
        # (enumerate, not zip(..., strict=True): the export's dy2static has no strict)
        codes_ = [
            paddle.gather(self.codes[parts[i]], token.flatten()).reshape(paddle.shape(token))
            for i, token in enumerate(ids)
        ]
        # Added pairwise, not by add_n: paddle2onnx exports add_n as ONNX Sum, which is float-only, so the codes went
        # through a float cast, exact in float32 but not in the bfloat16 the openvino-bf16 variant runs it in.
        total = codes_[0]
        for code in codes_[1:]:
            total = total + code
        return _wrap(total, self.modulus, len(ids) - 1)

    def rows(self, first: paddle.Tensor, second: paddle.Tensor) -> paddle.Tensor:
        """The table rows of bigrams (first, second): the hash, or with a vocabulary the row the map holds there."""
        hashed = self.hashed(BIGRAM, first, second)
        return hashed.astype("int64") if not self.min_count else self.lookup(self.slots, hashed)

    def trigram_rows(self, first: paddle.Tensor, second: paddle.Tensor, third: paddle.Tensor) -> paddle.Tensor:
        """The trigram table's rows of (first, second, third): the map's row at the trigram's slot."""
        return self.lookup(self.trigram_slots, self.hashed(TRIGRAM, first, second, third))

    @staticmethod
    def lookup(slots: paddle.Tensor, slot: paddle.Tensor) -> paddle.Tensor:
        """The rows a map holds at `slot` (an integer gather, shaped as `slot`)."""
        return paddle.gather(slots, slot.flatten()).reshape(paddle.shape(slot)).astype("int64")

    def padded(self, input_ids: paddle.Tensor, width: int) -> paddle.Tensor:
        """The rows with `width` padding ids on each side, integers as the ids (as rows() needs)."""
        pad = input_ids[:, :width] * 0 + const(int(self._padding_idx or 0))
        return paddle.concat([pad, input_ids, pad], axis=1)

    def forward(self, input_ids: paddle.Tensor) -> paddle.Tensor:
        # The bigrams of the row padded on both sides, hashed and looked up once: position t's left bigram is pair
        # t, its right bigram pair t + 1.
        padded = self.padded(input_ids, 1)
        first, second = padded[:, :-1], padded[:, 1:]
        pairs = self.bigrams(self.rows(first, second))
        left, right = pairs[:, :-1], pairs[:, 1:]
        around = paddle.concat([left, right], axis=-1) if self.concat else left + right
        if self.trigrams is not None:  # position t's trigram: (previous, token, next)
            grams = self.trigrams(self.trigram_rows(padded[:, :-2], padded[:, 1:-1], padded[:, 2:]))
            around = paddle.concat([around, grams], axis=-1)
        return super().forward(input_ids) + (self.project(around) if self.project is not None else around)


def add_char_bigrams(model: Any, model_cfg: Any) -> Any:
    """`model` (a PaddleNLP ERNIE head) with CharBigramEmbedding in place of its word embeddings, as `model_cfg`
    (ModelConfig: `char_ngram_buckets`, `_dim`, `_min_count`, `_sides`, `_trigrams`) says; unchanged when the
    buckets are 0."""
    if model_cfg.char_ngram_buckets:
        embeddings = model.ernie.embeddings
        embeddings.word_embeddings = CharBigramEmbedding(
            embeddings.word_embeddings, model_cfg.char_ngram_buckets, model_cfg.char_ngram_dim,
            model_cfg.char_ngram_min_count, model_cfg.char_ngram_sides, model_cfg.char_ngram_trigrams,
        )  # fmt: skip
    return model


NGRAMS = "ngrams.npz"  # in the data area: the train split's n-gram counts, written by prepare-data


def _table_slots(
    layer: CharBigramEmbedding, parts: Sequence[int], grams: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, dict[tuple[int, ...], int], int]:
    """`_fill`, vectorised, for n-grams already in `Counter.most_common()` order: each n-gram's slot from the codes
    table, the first n-gram on a slot keeps it, rows 1.. in order up to the table's size."""
    grams = grams[counts >= layer.min_count].astype(np.int64)  # a prefix: the counts are descending
    table = layer.codes.numpy().astype(np.int64)
    slot = sum(table[part, grams[:, i]] for i, part in enumerate(parts)) % layer.modulus
    first = np.zeros(len(slot), dtype=bool)
    first[np.unique(slot, return_index=True)[1]] = True
    kept_before = np.cumsum(first) - first  # n-grams given a row before each one
    considered = kept_before < layer.buckets - 1  # `_fill` stops once the table is full
    given = first & considered
    rows = np.cumsum(given).astype(np.int32)
    slots = np.zeros(SLOTS, dtype="int32")
    slots[slot[given]] = rows[given]
    vocabulary = dict(zip(map(tuple, grams[given].tolist()), rows[given].tolist(), strict=True))
    return slots, vocabulary, int(np.count_nonzero(considered & ~first))


def apply_table(model: Any, data_dir: Path) -> dict[str, int] | None:
    """The train step's part: fill the n-gram maps and `vocabulary` of a table with a vocabulary
    (`model.char_ngram_min_count`) from the counts prepare-data wrote (`ngrams.npz`: each kind's n-grams seen at
    least min_count times in most-common order, and how many distinct ones there were), exactly as
    `fit_vocabulary` does from the rows; the same stats. None where the table has no vocabulary."""
    layer = model.ernie.embeddings.word_embeddings
    if not (isinstance(layer, CharBigramEmbedding) and layer.min_count):
        return None
    path = data_dir / NGRAMS
    needed = ["bigrams", "bigram_counts", "distinct_bigrams"]
    needed += ["trigrams", "trigram_counts", "distinct_trigrams"] if layer.trigrams is not None else []
    if not path.is_file():
        raise StepError(
            f"{path} does not exist: the n-gram table (model.char_ngram_min_count) is filled from the train split's "
            "counts prepare-data writes there; rerun prepare-data with this configuration"
        )
    with np.load(path) as found:
        missing = [k for k in needed if k not in found.files]
        if missing:
            raise StepError(f"{path} has no {', '.join(missing)}; rerun prepare-data with this configuration")
        table = {k: found[k] for k in needed}
    slots, layer.vocabulary[BIGRAM], clashes = _table_slots(layer, BIGRAM, table["bigrams"], table["bigram_counts"])
    layer.slots.set_value(paddle.to_tensor(slots))
    frequent = int(np.count_nonzero(table["bigram_counts"] >= layer.min_count))
    out = {"distinct": int(table["distinct_bigrams"]), "frequent": frequent, "rows": len(layer.vocabulary[BIGRAM]),
           "slot_clashes": clashes}  # fmt: skip
    if layer.trigrams is not None:
        slots, layer.vocabulary[TRIGRAM], clashes = _table_slots(
            layer, TRIGRAM, table["trigrams"], table["trigram_counts"]
        )
        layer.trigram_slots.set_value(paddle.to_tensor(slots))
        out |= {"trigrams_distinct": int(table["distinct_trigrams"]), "trigram_rows": len(layer.vocabulary[TRIGRAM]),
                "trigram_slot_clashes": clashes}  # fmt: skip
    return out


def fit_vocabulary(model: Any, rows: Sequence[Sequence[int]]) -> dict[str, int] | None:
    """The train step's part: fill the bigram table's vocabulary from the train split's input_ids where the table
    has one (`model.char_ngram_min_count`); None where it has none."""
    layer = model.ernie.embeddings.word_embeddings
    if isinstance(layer, CharBigramEmbedding) and layer.min_count:
        return layer.fit_vocabulary(rows)
    return None
