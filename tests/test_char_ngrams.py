"""Hashed character-bigram embeddings (`model.char_ngram_buckets`, steps/runtime/weights/char_ngrams.py): which rows a
token reads, that the table starts the model exactly where it was, that it learns, and that the export (and so every
engine and the model server) computes the same bigrams from `input_ids` alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
import pytest

from paddle_mlops_core.config.inputs import ModelConfig
from steps.runtime.weights import char_ngrams, ernie

TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "max_seq_len": 16}
IDS = np.array([[1, 7, 8, 9, 2, 0], [1, 9, 8, 2, 0, 0]], dtype="int64")


def row(a: int, b: int) -> int:
    """The table row of bigram (a, b) in a 1000-row table."""
    return int(a * char_ngrams.FIRST + b + char_ngrams.SECOND) % 1000


def trigram_slot(a: int, b: int, c: int) -> int:
    """The map slot of trigram (a, b, c)."""
    return int(a * char_ngrams.FIRST + char_ngrams.SECOND + b * char_ngrams.THIRD + c) % char_ngrams.SLOTS


def model(
    buckets: int, task: str = "token-classification", seed: int = 3, dim: int = 0, **table: object
) -> ernie.ErnieHead:
    paddle.seed(seed)
    cfg = ModelConfig(task=task, char_ngram_buckets=buckets, char_ngram_dim=dim, **TINY, **table)  # type: ignore[arg-type]
    return ernie.build_model(cfg, 20, 3)


def logits(m: ernie.ErnieHead, ids: np.ndarray = IDS) -> np.ndarray:
    m.eval()
    x = paddle.to_tensor(ids)
    return m(x, token_type_ids=paddle.zeros_like(x)).numpy()


def test_each_token_reads_its_left_and_right_bigram() -> None:
    layer = model(1000).ernie.embeddings.word_embeddings
    assert isinstance(layer, char_ngrams.CharBigramEmbedding)
    table = np.zeros((1000, 16), dtype="float32")
    for i in range(1000):
        table[i, i % 16] = i  # each row says which it is
    layer.bigrams.weight.set_value(table)
    x = paddle.to_tensor(IDS)
    got = (layer(x) - paddle.nn.Embedding.forward(layer, x)).numpy()

    # token 8 of the first text: bigrams (7, 8) and (8, 9); of the second: (9, 8) and (8, 2)
    assert np.allclose(got[0, 2], table[row(7, 8)] + table[row(8, 9)])
    assert np.allclose(got[1, 2], table[row(9, 8)] + table[row(8, 2)])
    # the edges pair with padding
    assert np.allclose(got[0, 0], table[row(0, 1)] + table[row(1, 7)])
    assert np.allclose(got[0, 5], table[row(2, 0)] + table[row(0, 0)])


def test_narrow_rows_are_projected_to_the_hidden_size() -> None:
    layer = model(1000, dim=4).ernie.embeddings.word_embeddings
    assert layer.bigrams.weight.shape == [1000, 4] and layer.project.weight.shape == [4, 16]
    assert layer.project.bias is None  # a zero table adds exactly nothing
    table = np.random.default_rng(1).normal(size=(1000, 4)).astype("float32")
    layer.bigrams.weight.set_value(table)
    x = paddle.to_tensor(IDS)
    got = (layer(x) - paddle.nn.Embedding.forward(layer, x)).numpy()
    assert np.allclose(got[0, 2], (table[row(7, 8)] + table[row(8, 9)]) @ layer.project.weight.numpy(), atol=1e-5)
    # as wide as the hidden size (or wider): no projection
    assert model(1000, dim=16).ernie.embeddings.word_embeddings.project is None
    assert model(1000, dim=64).ernie.embeddings.word_embeddings.bigrams.weight.shape == [1000, 16]


@pytest.mark.parametrize("dim", [0, 4])
def test_the_table_starts_at_zero_so_the_model_is_the_one_without_it(dim: int) -> None:
    assert np.array_equal(logits(model(1000, dim=dim)), logits(model(0)))
    assert not np.array_equal(logits(model(1000, seed=4, dim=dim)), logits(model(0)))


@pytest.mark.parametrize(
    ("task", "dim"), [("token-classification", 0), ("text-classification", 0), ("text-classification", 4)]
)
def test_the_table_learns(task: str, dim: int) -> None:
    m = model(1000, task, dim=dim)
    m.train()
    x = paddle.to_tensor(IDS)
    out = m(x, token_type_ids=paddle.zeros_like(x))
    out.sum().backward()
    grad = m.ernie.embeddings.word_embeddings.bigrams.weight.grad.numpy()

    padded = [[0, *r, 0] for r in IDS.tolist()]
    touched = {row(a, b) for r in padded for a, b in zip(r[:-1], r[1:], strict=True)}
    assert set(np.flatnonzero(np.abs(grad).sum(axis=1))) <= touched
    assert np.abs(grad).sum() > 0


def test_off_leaves_paddlenlp_embedding() -> None:
    assert type(model(0).ernie.embeddings.word_embeddings) is paddle.nn.Embedding


@pytest.mark.parametrize("dim", [0, 4])
def test_export_computes_the_bigrams_from_input_ids(tmp_path: Path, dim: int) -> None:
    from paddlenlp.transformers import ErnieTokenizer

    m = model(1000, dim=dim)
    table = np.random.default_rng(0).normal(size=(1000, dim or 16)).astype("float32")
    m.ernie.embeddings.word_embeddings.bigrams.weight.set_value(table)
    vocab = tmp_path / "vocab.txt"
    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    vocab.write_text("\n".join([*specials, *"一二三四五六七八九十甲乙丙丁戊"]) + "\n")
    cfg = ModelConfig(task="token-classification", char_ngram_buckets=1000, char_ngram_dim=dim, **TINY)
    out = ernie.export(m, ErnieTokenizer(str(vocab)), {0: "O", 1: "B-PER", 2: "I-PER"}, cfg, tmp_path / "export")
    exported = ernie.ExportedModel(out)
    assert exported.model_config["char_ngram_buckets"] == 1000
    assert exported.model_config["char_ngram_dim"] == dim
    assert np.allclose(exported.logits(IDS), logits(m), atol=1e-5)


LARGE_IDS = np.array([[1, 39_991, 39_989, 2_117, 39_999, 38_004, 2]], dtype="int64")


@pytest.mark.parametrize(
    "table",
    [
        {},  # hashed
        {"char_ngram_min_count": 1, "char_ngram_sides": "concat", "char_ngram_trigrams": True},  # vocabulary maps
    ],
    ids=["hashed", "vocabulary-trigrams"],
)
def test_the_converted_graphs_hash_large_token_ids_exactly(tmp_path: Path, table: dict) -> None:
    """Token ids up to 40,000 (ERNIE 3.0's vocabulary): the hash before the codes, (a × 7919 + b + 1000003) mod
    buckets, passed ONNX but OpenVINO computed its FloorMod in float32 (exact only below 2^24, so above id 2,117) and
    read other rows (Max absolute difference 0.19 here). The ONNX graph every engine variant is built
    from (steps/runtime/serving/engines/convert.py) from the export (ernie.export, what training writes), and the
    OpenVINO IR converted from it (the openvino-bf16 variant's; OpenVINO's CPU plugin has its own integer
    arithmetic: a trigram slot computed as slot × 509 read other rows there, docs/benchmarks.md), must compute the
    rows Paddle does, for the hashed table and for the vocabulary maps with the trigram table. The bf16 branch
    failed on a bf16 CPU while the codes were summed with add_n: paddle2onnx exports it as ONNX Sum (float-only), and
    OpenVINO ran that float island in bfloat16."""
    cfg = ModelConfig(task="token-classification", char_ngram_buckets=65_536, **TINY, **table)
    paddle.seed(0)
    m = ernie.build_model(cfg, 40_000, 3)  # a token classifier: each token's logits read its own rows
    layer = m.ernie.embeddings.word_embeddings
    if cfg.char_ngram_min_count:
        # every bigram and trigram of the ids below has a row of its own (and a shuffled copy makes other rows used)
        layer.fit_vocabulary([LARGE_IDS[0].tolist(), LARGE_IDS[0, ::-1].tolist()])
    rng = np.random.default_rng(0)
    for weights in (layer.bigrams.weight, *([layer.trigrams.weight] if cfg.char_ngram_trigrams else [])):
        weights.set_value(rng.normal(size=weights.shape).astype("float32"))
    assert_every_engine_gives(tmp_path, m, cfg, LARGE_IDS, onnx_atol=1e-5)


def assert_every_engine_gives(
    tmp_path: Path, m: ernie.ErnieHead, cfg: ModelConfig, ids: np.ndarray, **tol: float
) -> None:
    """The export of `m` (what training writes; a 40,000-id vocabulary, as ERNIE 3.0's: the specials, then made-up
    tokens), its ONNX graph (every engine variant is built from it) and OpenVINO's IR from that at f32 and at bf16
    answer `ids` with `m`'s own logits."""
    import onnxruntime as ort
    import openvino as ov
    import openvino.properties.hint as hints
    from paddlenlp.transformers import ErnieTokenizer

    from steps.runtime.serving.engines.convert import onnx_to_openvino, paddle_to_onnx

    assert int(ids.max()) * char_ngrams.FIRST + char_ngrams.SECOND > 2**24
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", *(f"t{i}" for i in range(39_995))]) + "\n"
    )
    want = logits(m, ids)
    labels = {i: label for i, label in enumerate(["O", "B-PER", "I-PER"][: want.shape[-1]])}
    out = ernie.export(m, ErnieTokenizer(str(vocab)), labels, cfg, tmp_path / "export")
    np.testing.assert_allclose(ernie.ExportedModel(out).logits(ids), want, atol=1e-4)
    paddle_to_onnx(out / "inference.json", out / "inference.pdiparams", tmp_path / "model.onnx")
    onnx_to_openvino(tmp_path / "model.onnx", tmp_path / "openvino" / "model.xml")

    feeds = {"input_ids": ids, "token_type_ids": np.zeros_like(ids)}
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, feeds)[0], want, atol=tol.get("onnx_atol", 1e-4))
    core, xml = ov.Core(), str(tmp_path / "openvino" / "model.xml")
    f32 = core.compile_model(xml, "CPU", {hints.inference_precision: ov.Type.f32})
    np.testing.assert_allclose(f32(feeds)[0], want, atol=1e-4)
    # bf16 where the CPU has it (the served variant; elsewhere the plugin runs f32): rounding noise of a few per cent
    # of the largest logit, where a wrong row moves the logits by about their own size
    bf16 = core.compile_model(xml, "CPU", {hints.inference_precision: ov.Type.bf16})
    assert np.abs(bf16(feeds)[0] - want).max() < 0.05 * np.abs(want).max()


def test_a_pretrained_encoder_keeps_its_vocabulary(tmp_path: Path) -> None:
    m = model(0)
    m.save_pretrained(str(tmp_path / "weights"))
    cfg = ModelConfig(task="token-classification", dropout=0.0, char_ngram_buckets=500)
    loaded = ernie.load_pretrained(tmp_path / "weights", 3, cfg)
    word = loaded.ernie.embeddings.word_embeddings
    assert isinstance(word, char_ngrams.CharBigramEmbedding) and word.bigrams.weight.shape == [500, 16]
    assert np.array_equal(word.weight.numpy(), m.ernie.embeddings.word_embeddings.weight.numpy())


# The train split of a table with a vocabulary: (7, 8) three times, (8, 9) twice, every other bigram once.
TRAIN_IDS = [[1, 7, 8, 9, 2], [1, 7, 8, 9, 2], [1, 7, 8, 2]]


def vocabulary_model(min_count: int = 2, dim: int = 4, sides: str = "sum") -> char_ngrams.CharBigramEmbedding:
    layer = model(
        1000, dim=dim, char_ngram_min_count=min_count, char_ngram_sides=sides
    ).ernie.embeddings.word_embeddings
    assert isinstance(layer, char_ngrams.CharBigramEmbedding)
    return layer


def slot_row(layer: char_ngrams.CharBigramEmbedding, a: int, b: int) -> int:
    return int(layer.rows(paddle.to_tensor([[a]]), paddle.to_tensor([[b]])).numpy()[0, 0])


def test_a_vocabulary_gives_frequent_bigrams_their_own_rows_and_every_other_the_zero_row() -> None:
    layer = vocabulary_model(min_count=2)
    counts = layer.fit_vocabulary(TRAIN_IDS)
    # with padding: (0,1) x3, (1,7) x3, (7,8) x3, (8,9) x2, (9,2) x2, (2,0) x3, (8,2) x1
    assert counts == {"distinct": 7, "frequent": 6, "rows": 6, "slot_clashes": 0}
    frequent = [(0, 1), (1, 7), (7, 8), (8, 9), (9, 2), (2, 0)]
    assert sorted(slot_row(layer, a, b) for a, b in frequent) == [1, 2, 3, 4, 5, 6]
    assert slot_row(layer, 8, 9) in (4, 5) and slot_row(layer, 7, 8) <= 3  # most frequent first
    assert slot_row(layer, 8, 2) == 0  # seen once: below min_count
    assert slot_row(layer, 9, 8) == 0  # never seen (hashing alone puts it on some trained row)

    # the zero row adds nothing, whatever the table holds elsewhere; a known bigram adds its row
    table = np.random.default_rng(2).normal(size=(1000, 4)).astype("float32")
    layer.bigrams.weight.set_value(table)
    x = paddle.to_tensor([[9, 8, 8, 9]])
    got = (layer(x) - paddle.nn.Embedding.forward(layer, x)).numpy()
    project = layer.project.weight.numpy()
    # token 8 at position 1: left bigram (9, 8) unseen, right bigram (8, 8) unseen
    assert np.allclose(got[0, 1], 0, atol=1e-6)
    # token 9 at position 3: left (8, 9) known, right (9, 0) unseen
    assert np.allclose(got[0, 3], table[slot_row(layer, 8, 9)] @ project, atol=1e-5)


def test_the_zero_row_gets_no_gradient_and_the_table_is_capped_at_its_size() -> None:
    layer = vocabulary_model(min_count=1)
    layer.fit_vocabulary(TRAIN_IDS)
    x = paddle.to_tensor([[9, 8, 8, 9]])
    layer(x).sum().backward()
    assert np.abs(layer.bigrams.weight.grad.numpy()[0]).sum() == 0

    small = model(4, dim=4, char_ngram_min_count=1).ernie.embeddings.word_embeddings
    assert small.fit_vocabulary(TRAIN_IDS)["rows"] == 3  # rows 1..3 of 4: row 0 is the zero row


def test_sides_concat_tells_a_left_bigram_from_a_right_one() -> None:
    layer = vocabulary_model(min_count=1, dim=4, sides="concat")
    assert layer.project.weight.shape == [8, 16]
    layer.fit_vocabulary(TRAIN_IDS)
    table = np.random.default_rng(3).normal(size=(1000, 4)).astype("float32")
    layer.bigrams.weight.set_value(table)
    x = paddle.to_tensor([[1, 7, 8, 2]])
    got = (layer(x) - paddle.nn.Embedding.forward(layer, x)).numpy()
    left, right = table[slot_row(layer, 7, 8)], table[slot_row(layer, 8, 2)]
    assert np.allclose(got[0, 2], np.concatenate([left, right]) @ layer.project.weight.numpy(), atol=1e-5)
    # the same two rows the other way round give another vector (summed they would not)
    assert not np.allclose(got[0, 2], np.concatenate([right, left]) @ layer.project.weight.numpy(), atol=1e-3)
    # full-width rows side by side are projected too
    assert model(1000, dim=0, char_ngram_sides="concat").ernie.embeddings.word_embeddings.project is not None


def test_the_vocabulary_is_part_of_the_state_a_checkpoint_restores() -> None:
    trained = model(1000, dim=4, char_ngram_min_count=1)
    trained.ernie.embeddings.word_embeddings.fit_vocabulary(TRAIN_IDS)
    fresh = model(1000, dim=4, char_ngram_min_count=1)
    assert "ernie.embeddings.word_embeddings.slots" in trained.state_dict()
    fresh.set_state_dict(trained.state_dict())
    assert np.array_equal(
        fresh.ernie.embeddings.word_embeddings.slots.numpy(), trained.ernie.embeddings.word_embeddings.slots.numpy()
    )
    assert char_ngrams.fit_vocabulary(model(1000), TRAIN_IDS) is None  # no vocabulary: nothing to fit


@pytest.mark.parametrize("sides", ["sum", "concat"])
def test_the_export_and_its_onnx_graph_carry_the_vocabulary(tmp_path: Path, sides: str) -> None:
    """The bigram -> row map is an int32 buffer gathered in the graph: the export (Paddle Inference) and the ONNX
    graph every other engine is built from must read the rows the trained model reads."""
    import onnxruntime as ort
    from paddlenlp.transformers import ErnieTokenizer

    from steps.runtime.serving.engines.convert import paddle_to_onnx

    m = model(1000, dim=4, char_ngram_min_count=1, char_ngram_sides=sides)
    layer = m.ernie.embeddings.word_embeddings
    layer.fit_vocabulary(TRAIN_IDS)
    table = np.random.default_rng(0).normal(size=(1000, 4)).astype("float32")
    table[0] = 0  # as training leaves it
    layer.bigrams.weight.set_value(table)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", *"一二三四五六七八九十甲乙丙丁戊"]) + "\n"
    )
    cfg = ModelConfig(
        task="token-classification", char_ngram_buckets=1000, char_ngram_dim=4, char_ngram_min_count=1,
        char_ngram_sides=sides, **TINY,
    )  # fmt: skip
    out = ernie.export(m, ErnieTokenizer(str(vocab)), {0: "O", 1: "B-PER", 2: "I-PER"}, cfg, tmp_path / "export")
    exported = ernie.ExportedModel(out)
    assert exported.model_config["char_ngram_min_count"] == 1 and exported.model_config["char_ngram_sides"] == sides
    ids = np.array([[1, 7, 8, 9, 2, 0], [1, 9, 8, 2, 0, 0]], dtype="int64")  # known and unseen bigrams
    assert np.allclose(exported.logits(ids), logits(m, ids), atol=1e-5)
    paddle_to_onnx(out / "inference.json", out / "inference.pdiparams", tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids, "token_type_ids": np.zeros_like(ids)})[0]
    np.testing.assert_allclose(got, logits(m, ids), atol=1e-5)


def test_trigrams_get_rows_of_their_own_and_need_a_vocabulary(tmp_path: Path) -> None:
    """Each token's centred trigram (previous, itself, next) reads its row of a second table: the same in dygraph,
    the export and its ONNX graph; a trigram table without a vocabulary is refused."""
    import onnxruntime as ort
    from paddlenlp.transformers import ErnieTokenizer

    from steps.runtime.serving.engines.convert import paddle_to_onnx

    m = model(1000, dim=4, char_ngram_min_count=2, char_ngram_sides="concat", char_ngram_trigrams=True)
    layer = m.ernie.embeddings.word_embeddings
    assert layer.project.weight.shape == [12, 16]  # left, right, trigram
    counts = layer.fit_vocabulary(TRAIN_IDS)
    # with padding: (0,1,7) x3, (1,7,8) x3, (7,8,9) x2, (8,9,2) x2, (9,2,0) x2, (7,8,2) x1, (8,2,0) x1
    assert counts["trigram_rows"] == 5 and counts["trigrams_distinct"] == 7
    slots = layer.trigram_slots.numpy()
    assert {slots[trigram_slot(0, 1, 7)], slots[trigram_slot(1, 7, 8)]} == {1, 2}
    assert slots[trigram_slot(7, 8, 2)] == 0  # seen once
    table = np.random.default_rng(4).normal(size=(1000, 4)).astype("float32")
    table[0] = 0
    layer.trigrams.weight.set_value(table)
    bigrams = np.zeros((1000, 4), dtype="float32")
    layer.bigrams.weight.set_value(bigrams)  # only the trigrams add anything
    x = paddle.to_tensor([[1, 7, 8, 9, 2]])
    got = (layer(x) - paddle.nn.Embedding.forward(layer, x)).numpy()
    project = layer.project.weight.numpy()
    expected = table[slots[trigram_slot(7, 8, 9)]] @ project[8:]
    assert np.allclose(got[0, 2], expected, atol=1e-5) and np.abs(expected).sum() > 0

    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", *"一二三四五六七八九十甲乙丙丁戊"]) + "\n"
    )
    cfg = ModelConfig(
        task="token-classification", char_ngram_buckets=1000, char_ngram_dim=4, char_ngram_min_count=2,
        char_ngram_sides="concat", char_ngram_trigrams=True, **TINY,
    )  # fmt: skip
    out = ernie.export(m, ErnieTokenizer(str(vocab)), {0: "O", 1: "B-PER", 2: "I-PER"}, cfg, tmp_path / "export")
    ids = np.array([[1, 7, 8, 9, 2, 0], [1, 9, 8, 2, 0, 0]], dtype="int64")
    assert np.allclose(ernie.ExportedModel(out).logits(ids), logits(m, ids), atol=1e-5)
    paddle_to_onnx(out / "inference.json", out / "inference.pdiparams", tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids, "token_type_ids": np.zeros_like(ids)})[0]
    np.testing.assert_allclose(got, logits(m, ids), atol=1e-5)

    with pytest.raises(ValueError, match="char_ngram_trigrams needs the table on with a vocabulary"):
        ModelConfig(char_ngram_buckets=1000, char_ngram_trigrams=True)


@pytest.mark.parametrize(
    ("buckets", "min_count", "trigrams"), [(1000, 2, True), (1000, 1, False), (6, 1, True), (200, 3, True)]
)
def test_the_table_prepare_data_counted_fills_the_maps_exactly_as_counting_the_rows(
    tmp_path: Path, buckets: int, min_count: int, trigrams: bool
) -> None:
    """`apply_table` (the train step) from `ngrams.npz` (the data area's counts, built here with a plain Counter in
    most_common order as docs/contracts.md says) gives the slots, vocabulary and stats `fit_vocabulary` gives from
    the same rows: a table capped at its size (6 buckets) and n-grams that share a slot (SLOTS mod a 2**22 map over
    ids up to 2**20) included."""
    from collections import Counter

    from fixtures_ernie import write_ngram_counts

    rng = np.random.default_rng(buckets + min_count)
    vocab = 2**20  # large ids: several n-grams land on one slot
    rows = [rng.integers(1, 40, size=rng.integers(2, 12)).tolist() for _ in range(300)]
    rows += [rng.integers(1, vocab, size=6).tolist() for _ in range(4000)] * 2
    first = char_ngrams.codes(vocab, char_ngrams.SLOTS)[0].astype("int64")
    for a, b, other in rng.integers(1, vocab, size=(200, 3)).tolist():  # (a, b) and (other, b') on one slot
        clash = (first[a] + b - first[other]) % char_ngrams.SLOTS
        if 0 < clash < vocab:
            rows += [[a, b]] * 5 + [[other, int(clash)]] * 4

    def layer() -> char_ngrams.CharBigramEmbedding:
        cfg = ModelConfig(task="token-classification", char_ngram_buckets=buckets, char_ngram_dim=4,
                          char_ngram_min_count=min_count, char_ngram_trigrams=trigrams, **TINY)  # type: ignore[arg-type]  # fmt: skip
        embedding = ernie.build_model(cfg, vocab, 3).ernie.embeddings.word_embeddings
        assert isinstance(embedding, char_ngrams.CharBigramEmbedding)
        return embedding

    counted = layer()
    expected = counted.fit_vocabulary(rows)
    counts: dict[str, Counter] = {"bigrams": Counter(), "trigrams": Counter()}
    for ids in rows:
        padded = [0, *ids, 0]
        counts["bigrams"].update(zip(padded[:-1], padded[1:], strict=False))
        if trigrams:
            counts["trigrams"].update(zip(padded[:-2], padded[1:-1], padded[2:], strict=False))
    write_ngram_counts(tmp_path, counts, min_count)
    loaded = layer()
    holder = type("Model", (), {})()
    holder.ernie = type("Ernie", (), {})()
    holder.ernie.embeddings = type("Embeddings", (), {"word_embeddings": loaded})()
    assert char_ngrams.apply_table(holder, tmp_path) == expected
    assert expected["slot_clashes"] > 0 or buckets < 1000  # a full small table stops before the clashing pairs
    assert loaded.vocabulary == counted.vocabulary
    np.testing.assert_array_equal(loaded.slots.numpy(), counted.slots.numpy())
    if trigrams:
        np.testing.assert_array_equal(loaded.trigram_slots.numpy(), counted.trigram_slots.numpy())


def test_a_missing_table_file_says_to_rerun_prepare_data(tmp_path: Path) -> None:
    from steps.runtime.runner import StepError

    with pytest.raises(StepError, match=r"ngrams.npz does not exist.*rerun prepare-data"):
        char_ngrams.apply_table(model(1000, char_ngram_min_count=2), tmp_path)
    assert char_ngrams.apply_table(model(1000), tmp_path) is None  # no vocabulary: no file needed
