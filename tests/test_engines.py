"""steps.runtime.serving.engines on tiny exported ERNIE models: every variant builds, opens and agrees with Paddle fp32.

Two models, both hidden 32 with one layer and random weights: the sequence classifier of
fixtures_ernie.make_exported_model (logits [batch, 2]) and a token classifier (logits [batch, seq, 3]).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from steps.runtime.serving.engines import cpu, measure, runners, variants
from steps.runtime.serving.engines.variants import (
    ONNX_FP32,
    ONNX_INT8,
    OPENVINO_BF16,
    OPENVINO_INT8,
    PADDLE_BF16,
    PADDLE_FP32,
    VARIANTS,
    build_variants,
)
from tests.fixtures_ernie import make_exported_model, sentiment_rows, tiny_ernie_config

ROOT = Path(__file__).resolve().parents[1]
THREADS = 2
# Largest |logit difference| from Paddle fp32, as a fraction of the largest |logit| of the batch. fp32 engines
# differ only in summation order (measured < 1e-6 of the scale); bf16 keeps 8 bits of mantissa, and int8
# quantises every MatMul's weights and activations to 256 levels. Measured on these tiny models with seeds 0-7
# (the batches below): bf16 up to 1.3 % (Paddle) and 1.5 % (OpenVINO), int8 up to 2.5 %; the bounds leave two
# to three times that. The six-layer, hidden-768 model of benchmarks/engines.py, where more rounding adds up,
# measured 3.2 %, 3.8 % and 6.2 % on its texts (1.6 %, 1.1 % and 3.1 % on random token ids).
# The absolute error does not shrink with the logits (it comes from rounding the O(1) hidden states), so a
# random model whose logits all happen to lie near 0 inflates the ratio (one seed in 16 tried: logits within
# +-0.0014, bf16 off by 11 % of that): the fixture pins the seeds.
RELATIVE_TOLERANCE = {"fp32": 1e-4, "bf16": 0.05, "int8": 0.08}
# The bigram-vocabulary model's int8 variants err up to ≈ 8.5 % of the largest logit (its concatenated bigram rows
# go through one more quantized projection); reading wrong rows of the table (the map shuffled) moves the logits by
# ≈ 120 % of it, so 15 % still tells a wrong graph from quantization noise.
INT8_TOLERANCE = {"bigram-vocabulary": 0.15}
FP32_ATOL = 1e-4


def _export_token_classifier(directory: Path, vocab_dir: Path, num_labels: int = 3, seed: int = 0) -> Path:
    """A random-weight ERNIE token classifier of the tiny shape, exported as steps.runtime.weights.ernie.export does."""
    import paddle
    from paddlenlp.transformers import ErnieForTokenClassification

    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(vocab_dir)
    config = tiny_ernie_config(tokenizer, 32, pad_token_id=tokenizer.pad_token_id, num_labels=num_labels)
    paddle.seed(seed)
    with paddle.utils.unique_name.guard():
        model = ErnieForTokenClassification(config)
    model.eval()
    spec = [paddle.static.InputSpec([None, None], "int64", name) for name in ernie.INPUT_NAMES]
    paddle.jit.save(paddle.jit.to_static(model, input_spec=spec, full_graph=True), str(directory / "inference"))
    return directory


def calibration(vocab_dir: Path, texts: list[str] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches of 4 texts for the static int8 variant to observe (other texts than the measured `batches`),
    tokenised with the tokenizer saved in `vocab_dir` (the sequence classifier's export)."""
    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(vocab_dir)
    texts = texts or [row["text"] * (1 + i % 4) for i, row in enumerate(sentiment_rows()[10:26])]
    ids = ernie.encode(tokenizer, texts, 32)
    return [ernie.pad_batch(ids[i : i + 4], tokenizer.pad_token_id) for i in range(0, len(ids), 4)]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The exports, each with every variant built beside it: a sequence classifier, a token classifier and a
    sequence classifier with the bigram table of the sentiment default (projected rows: char_ngrams.py), whose
    hashing (multiply, add, remainder) each engine has to compute from input_ids as Paddle does."""
    import paddle

    base = tmp_path_factory.mktemp("engines")
    paddle.seed(0)
    classifier = make_exported_model(base / "classifier")
    token = _export_token_classifier(base / "token", classifier)
    bigrams = make_exported_model(base / "bigrams", char_ngram_buckets=1000, char_ngram_dim=8)
    # the defaults' tables: a vocabulary (an int32 bigram -> row map gathered in the graph), sides concatenated, and
    # sentiment's trigram table (a second map, hashed in two int32-safe steps), on a token classifier
    vocabulary = make_exported_model(
        base / "bigram-vocabulary", labels=("O", "B-PER", "I-PER"), task="token-classification",
        char_ngram_buckets=1000, char_ngram_dim=8, char_ngram_min_count=2, char_ngram_sides="concat",
        char_ngram_trigrams=True,
    )  # fmt: skip
    for directory in (classifier, token, bigrams, vocabulary):
        built = build_variants(directory, calibration=calibration(classifier))
        assert set(built) | set(built.skipped) == set(VARIANTS)
    return {"sequence": classifier, "token": token, "bigrams": bigrams, "bigram-vocabulary": vocabulary}


@pytest.fixture(scope="module")
def batches(models: dict[str, Path]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Padded batches of 1, 3 and 7 texts of different lengths, tokenised with the export's tokenizer."""
    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(models["sequence"])
    texts = [row["text"] for row in sentiment_rows()]
    groups = [texts[:1], [texts[0] * 3, texts[1][:2], texts[2]], [t * (1 + i % 3) for i, t in enumerate(texts[3:10])]]
    return [ernie.pad_batch(ernie.encode(tokenizer, g, 32), tokenizer.pad_token_id) for g in groups]


def _available(variant: str, directory: Path) -> None:
    """Skip where this node or environment cannot run `variant` (the reason is the test's skip message)."""
    lacking = cpu.missing_features(variant, cpu.cpu_flags())
    if lacking:
        pytest.skip(f"this CPU lacks {', '.join(lacking)}")
    if not all((directory / f).is_file() for f in variants.variant_spec(variant).files):
        pytest.skip(f"{variant} was not built here (its package is missing)")


def test_the_locked_engines_all_build(models: dict[str, Path]) -> None:
    # onnxruntime and paddle2onnx are hard dependencies; openvino is one too in uv.lock, but optional in the code.
    for directory in models.values():
        built = build_variants(directory, calibration=calibration(models["sequence"]))
        assert {PADDLE_FP32, PADDLE_BF16, ONNX_FP32, ONNX_INT8} <= set(built)
        assert built[ONNX_FP32] == ["model.onnx"] and built[ONNX_INT8] == ["model.int8.onnx"]
        assert built[PADDLE_FP32] == [] and built[PADDLE_BF16] == []
        if OPENVINO_BF16 in built:
            assert built[OPENVINO_BF16] == ["openvino/model.xml", "openvino/model.bin"]
            assert built[OPENVINO_INT8] == ["openvino-int8/model.xml", "openvino-int8/model.bin"]
            # The QDQ model it is converted from is an intermediate, never left beside the export.
            assert not list(directory.rglob("*.qdq.onnx"))
        else:
            assert "not installed" in built.skipped[OPENVINO_BF16]
            assert "not installed" in built.skipped[OPENVINO_INT8]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", ["sequence", "token", "bigrams", "bigram-vocabulary"])
def test_variant_logits_agree_with_paddle_fp32(
    models: dict[str, Path], batches: list[tuple[np.ndarray, np.ndarray]], kind: str, variant: str
) -> None:
    directory = models[kind]
    _available(variant, directory)
    reference = runners.open_engine(PADDLE_FP32, directory, THREADS)
    engine = runners.open_engine(variant, directory, THREADS)
    assert (engine.name, engine.threads) == (variant, THREADS)
    precision = variants.variant_spec(variant).precision
    for input_ids, token_type_ids in batches:
        expected = reference.run(input_ids, token_type_ids)
        got = engine.run(input_ids, token_type_ids)
        rows, width = input_ids.shape
        assert expected.shape == ((rows, width, 3) if kind in ("token", "bigram-vocabulary") else (rows, 2))
        assert got.shape == expected.shape and got.dtype == np.float32
        scale = float(np.abs(expected).max())
        difference = float(np.abs(got - expected).max())
        tolerance = INT8_TOLERANCE.get(kind, RELATIVE_TOLERANCE[precision]) if precision == "int8" else None
        assert difference <= (tolerance or RELATIVE_TOLERANCE[precision]) * scale, (variant, difference, scale)
        if precision == "fp32":
            np.testing.assert_allclose(got, expected, rtol=0, atol=FP32_ATOL)


FLAGS_COMMON = "fpu sse2 avx2 avx512f avx512bw"
NEEDS_BF16 = ["avx512_bf16 or amx_bf16"]
NEEDS_VNNI = ["avx512_vnni or avx_vnni"]


@pytest.mark.parametrize(
    ("extra", "lacking"),
    [
        ("avx512_bf16 avx512_vnni", {}),
        ("avx512_vnni", {PADDLE_BF16: NEEDS_BF16, OPENVINO_BF16: NEEDS_BF16}),
        ("avx_vnni", {PADDLE_BF16: NEEDS_BF16, OPENVINO_BF16: NEEDS_BF16}),
        ("amx_bf16 amx_tile", {ONNX_INT8: NEEDS_VNNI, OPENVINO_INT8: NEEDS_VNNI}),
        ("", {PADDLE_BF16: NEEDS_BF16, ONNX_INT8: NEEDS_VNNI, OPENVINO_BF16: NEEDS_BF16, OPENVINO_INT8: NEEDS_VNNI}),
    ],
    ids=["bf16-and-vnni", "vnni-only", "avx-vnni-only", "amx-bf16-only", "neither"],
)
def test_missing_features_read_from_cpuinfo(tmp_path: Path, extra: str, lacking: dict[str, list[str]]) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    # Only the first processor counts; the second one's flags are there to show they are not read.
    cpuinfo.write_text(
        f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {FLAGS_COMMON} {extra}\n\n"
        f"processor\t: 1\nflags\t\t: {FLAGS_COMMON} avx512_bf16 amx_bf16 avx512_vnni\n",
        encoding="utf-8",
    )
    flags = cpu.cpu_flags(cpuinfo)
    assert "avx512f" in flags and "processor" not in flags
    for variant in VARIANTS:
        assert cpu.missing_features(variant, flags) == lacking.get(variant, []), variant


def test_cpu_flags_of_an_unreadable_or_flagless_cpuinfo_are_empty(tmp_path: Path) -> None:
    assert cpu.cpu_flags(tmp_path / "absent") == frozenset()
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd\n", encoding="utf-8")
    assert cpu.cpu_flags(tmp_path / "arm") == frozenset()
    with pytest.raises(ValueError, match="paddle-fp32"):
        cpu.missing_features("tensorrt-fp16", set())


def test_open_engine_names_what_the_node_lacks(models: dict[str, Path], tmp_path: Path) -> None:
    directory = models["sequence"]
    with pytest.raises(runners.EngineUnavailable, match="avx512_bf16 or amx_bf16"):
        runners.open_engine(PADDLE_BF16, directory, 1, flags={"avx2"})
    with pytest.raises(runners.EngineUnavailable, match="avx512_vnni or avx_vnni"):
        runners.open_engine(ONNX_INT8, directory, 1, flags={"avx2"})
    assert runners.open_engine(ONNX_FP32, directory, 1, flags={"avx2"}).name == ONNX_FP32
    with pytest.raises(runners.EngineUnavailable, match="has no model.onnx"):
        runners.open_engine(ONNX_FP32, tmp_path, 1)
    with pytest.raises(ValueError, match="unknown engine variant"):
        runners.open_engine("onnx-fp16", directory, 1)


def _copy_export(source: Path, target: Path) -> Path:
    target.mkdir()
    for name in (variants.PADDLE_MODEL, variants.PADDLE_PARAMS):
        (target / name).write_bytes((source / name).read_bytes())
    return target


def test_a_missing_package_skips_its_variant_and_those_built_from_it(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = _copy_export(models["sequence"], tmp_path / "export")
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` now raises ImportError
    built = build_variants(export, calibration=calibration(models["sequence"]))
    assert set(built) == {PADDLE_FP32, PADDLE_BF16, ONNX_FP32, ONNX_INT8}
    assert list(built.skipped) == [OPENVINO_BF16, OPENVINO_INT8]
    assert all("openvino package is not installed" in reason for reason in built.skipped.values())
    assert not (export / "openvino").exists() and not (export / "openvino-int8").exists()
    with pytest.raises(runners.EngineUnavailable, match="needs the openvino package"):
        runners.open_engine(OPENVINO_BF16, models["sequence"], 1, flags=variants.BF16_FLAGS)

    monkeypatch.setitem(sys.modules, "paddle2onnx", None)
    built = build_variants(tmp_path / "export", out_dir=tmp_path / "out", calibration=calibration(models["sequence"]))
    assert set(built) == {PADDLE_FP32, PADDLE_BF16}
    assert "paddle2onnx package is not installed" in built.skipped[ONNX_FP32]
    for name in (ONNX_INT8, OPENVINO_BF16, OPENVINO_INT8):
        assert built.skipped[name] == "it is converted from onnx-fp32, which was skipped"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [variants.RECORD_FILE]


def _snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in directory.rglob("*")
        if p.is_file()
    }


def test_build_variants_is_idempotent(models: dict[str, Path], tmp_path: Path) -> None:
    export = _copy_export(models["sequence"], tmp_path / "export")
    observed = calibration(models["sequence"])
    first = build_variants(export, calibration=observed)
    before = _snapshot(export)
    assert build_variants(export, calibration=observed) == first
    assert _snapshot(export) == before  # nothing rewritten, not even the record

    # A deleted variant file is built again, with the same bytes; what it is built from is left alone.
    (export / "model.int8.onnx").unlink()
    assert build_variants(export, calibration=observed) == first
    after = _snapshot(export)
    assert after["model.int8.onnx"][1] == before["model.int8.onnx"][1]
    assert after["model.onnx"] == before["model.onnx"]

    # A new export (other weights) rebuilds everything converted from it.
    (export / variants.PADDLE_PARAMS).write_bytes((models["token"] / variants.PADDLE_PARAMS).read_bytes())
    (export / variants.PADDLE_MODEL).write_bytes((models["token"] / variants.PADDLE_MODEL).read_bytes())
    build_variants(export, calibration=observed)
    assert (export / "model.onnx").read_bytes() == (models["token"] / "model.onnx").read_bytes()


def test_the_static_int8_variant_follows_its_calibration_batches(models: dict[str, Path], tmp_path: Path) -> None:
    """openvino-int8 fixes its activations' ranges on the batches it is given: other batches rebuild it (and only
    it); none skip it and delete its files, which would hold ranges of data nobody vouches for."""
    export = _copy_export(models["sequence"], tmp_path / "export")
    first = build_variants(export, calibration=calibration(models["sequence"]))
    if OPENVINO_INT8 not in first:
        pytest.skip(f"openvino-int8 was not built here: {first.skipped[OPENVINO_INT8]}")
    before = _snapshot(export)
    other = calibration(models["sequence"], ["很好", "太差了太差了", "一般般吧还可以"])
    assert build_variants(export, calibration=other) == first
    after = _snapshot(export)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"openvino-int8/model.xml", "openvino-int8/model.bin", variants.RECORD_FILE}
    record = json.loads((export / variants.RECORD_FILE).read_text())
    assert (
        record["variants"][OPENVINO_INT8]["calibration"]
        != json.loads(before[variants.RECORD_FILE][1])["variants"][OPENVINO_INT8]["calibration"]
    )

    built = build_variants(export)
    assert OPENVINO_INT8 not in built and "calibrated on model inputs" in built.skipped[OPENVINO_INT8]
    assert not (export / "openvino-int8").exists()
    assert set(built) == set(first) - {OPENVINO_INT8}


def test_only_the_inputs_the_graph_declares_are_fed(tmp_path: Path) -> None:
    """An export without token_type_ids: ONNX Runtime would reject a feed the graph does not declare."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["logits"], to=TensorProto.FLOAT)],
        "ids-only",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq"])],
    )
    # IR version 8, as paddle2onnx writes: onnx's newest default can be newer than ONNX Runtime reads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(tmp_path / "model.onnx"))
    engine = runners.open_engine(ONNX_FP32, tmp_path, 1)
    ids = np.array([[1, 5, 7], [1, 2, 0]], dtype=np.int32)  # converted to int64 on the way in
    np.testing.assert_array_equal(engine.run(ids, np.zeros_like(ids)), ids.astype(np.float32))


def test_measure_times_batch_one_and_batched_calls(models: dict[str, Path], batches: list) -> None:
    engine = runners.open_engine(ONNX_FP32, models["sequence"], 1)
    calls: list[tuple[int, ...]] = []

    class Counting:
        name, threads = engine.name, engine.threads

        def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
            calls.append(input_ids.shape)
            return engine.run(input_ids, token_type_ids)

    ids = batches[2][0]
    speed = measure.measure(Counting(), lambda n: (ids[:1].repeat(n, 0), np.zeros((n, ids.shape[1]), "int64")), 3, 4)
    assert calls == [(1, ids.shape[1]), (4, ids.shape[1])] * 4  # one warm-up round, then three timed
    assert speed.batch1_p50_ms > 0 and speed.batchN_texts_per_s > 0
    assert speed.batch1_texts_per_s == pytest.approx(1000 / speed.batch1_p50_ms)
    with pytest.raises(ValueError):
        measure.measure(engine, lambda n: batches[0], rounds=0)


def test_interleaved_rounds_rotate_the_order_and_time_every_engine_alike() -> None:
    turns: list[tuple[str, int]] = []

    class Recording:
        threads = 1

        def __init__(self, name: str) -> None:
            self.name = name

        def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
            turns.append((self.name, len(input_ids)))
            return np.zeros((len(input_ids), 2), "float32")

    one = (np.ones((1, 4), "int64"), np.zeros((1, 4), "int64"))
    many = (np.ones((8, 4), "int64"), np.zeros((8, 4), "int64"))
    speeds = measure.interleaved({"a": Recording("a"), "b": Recording("b")}, one, many, rounds=3, pause=0.0)
    warm, timed = turns[:4], turns[4:]
    assert warm == [("a", 1), ("a", 8), ("b", 1), ("b", 8)]
    assert [name for name, size in timed if size == 1] == ["a", "b", "b", "a", "a", "b"]  # round r starts at r
    assert [size for _, size in timed] == [1, 8] * 6
    assert set(speeds) == {"a", "b"}
    for speed in speeds.values():  # the batched rate is per text of the batch given
        assert speed.batch1_p50_ms > 0 and speed.batchN_texts_per_s > 0


def test_importing_the_package_loads_no_inference_runtime() -> None:
    code = (
        "import sys\n"
        "from steps.runtime.serving.engines import cpu, measure, runners, variants, convert, inputs\n"
        "print(sorted(m for m in ('paddle', 'paddle2onnx', 'onnxruntime', 'openvino', 'onnx') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("name", variants.GPU_VARIANTS)
def test_gpu_variants_say_what_a_cpu_node_lacks(models: dict[str, Path], name: str) -> None:
    """The GPU variants (serving.use_gpu) run the export itself on CUDA; a node without a CUDA device (this one,
    CI) gets EngineUnavailable naming it, never a crash inside Paddle."""
    import paddle

    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        pytest.skip("a CUDA device is present: benchmarks/gpu.sh exercises the GPU variants")
    assert variants.SPECS[name].device == "gpu" and cpu.missing_features(name, set()) == []
    with pytest.raises(runners.EngineUnavailable, match="CUDA"):
        runners.open_engine(name, next(iter(models.values())), 1)
    directory = next(iter(models.values()))
    assert name not in variants.build_variants(directory, calibration=calibration(models["sequence"]))
