"""Tiny data and a tiny exported ERNIE model for tests (no network, seconds to build).

`make_exported_model(dir)` gives a directory that `steps.runtime.weights.ernie.ExportedModel` (and so
the model server) loads; its weights are random, so only shapes and plumbing are meaningful.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "pipeline.yaml")
POSITIVE = ("很好", "满意", "喜欢", "不错", "推荐", "优秀", "舒服", "漂亮")
NEGATIVE = ("很差", "失望", "讨厌", "糟糕", "退货", "垃圾", "难用", "坏了")
SUBJECTS = ("手机", "酒店", "这本书", "服务", "质量", "快递", "屏幕", "电池")

# The tiny model and schedule every pipeline-level test trains (tests/test_e2e.py adds its own data lines).
TINY_MODEL = [
    "model.hidden_size=32",
    "model.num_hidden_layers=1",
    "model.num_attention_heads=2",
    "model.intermediate_size=64",
    "model.max_seq_len=32",
    # the bigram table the sentiment default has, small (its 65,536 rows would be most of a tiny model's cost)
    "model.char_ngram_buckets=1000",
    "model.char_ngram_dim=8",
    "training.epochs=2",
    "training.batch_size=16",
    "training.learning_rate=0.005",
]
TINY_OVERRIDES = [
    *TINY_MODEL,
    "data.vocab_min_freq=1",
    "data.dev_fraction=0.2",
    "data.test_fraction=0.2",
    "training.nproc=1",
]


def sentiment_rows() -> list[dict[str, str]]:
    """64 distinct short reviews, half positive, half negative, learnable from one word."""
    rows = []
    for i, subject in enumerate(SUBJECTS):
        for j in range(4):
            rows.append({"text": f"{subject}{POSITIVE[(i + j) % 8]}第{j}次", "label": "positive"})
            rows.append({"text": f"{subject}{NEGATIVE[(i + j) % 8]}第{j}次", "label": "negative"})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def prepared_workspace(base: Path) -> Path:
    """`base/ws`, whose data/ prepare-data wrote from the 64 tiny reviews (split 60/20/20 %)."""
    from steps import prepare_data

    src = write_jsonl(base / "reviews.jsonl", sentiment_rows())
    ws = base / "ws"
    assert prepare_data.main([*common(f"data.source={src}"), "--output", str(ws / "data")]) == 0
    return ws


def ngram_counts(data_dir: Path, max_seq_len: int = 32, trigrams: bool = True) -> dict[str, Counter]:
    """The train split's n-grams counted as CharBigramEmbedding.fit_vocabulary counts them (each text's input_ids,
    the pad id on both sides), with a plain Counter: the reference the n-gram table file is checked against."""
    from steps.runtime.data import tasks
    from steps.runtime.weights import ernie

    tokenizer = ernie.load_tokenizer(data_dir / "vocab.txt")
    task = tasks.for_type("text-classification")
    rows = task.read_rows(data_dir / "train.jsonl")
    labels = {0: "negative", 1: "positive"}
    encoded, _ = task.encode_training(tokenizer, rows, max_seq_len, labels)
    pad = tokenizer.pad_token_id
    counts: dict[str, Counter] = {"bigrams": Counter(), "trigrams": Counter()}
    for ids in encoded.input_ids:
        padded = [pad, *ids, pad]
        counts["bigrams"].update(zip(padded[:-1], padded[1:], strict=False))
        if trigrams:
            counts["trigrams"].update(zip(padded[:-2], padded[1:-1], padded[2:], strict=False))
    return counts


def write_ngram_counts(data_dir: Path, counts: dict[str, Counter], min_count: int = 2) -> Path:
    """`ngrams.npz` as the data area holds it (docs/contracts.md): per kind the n-grams seen at least `min_count`
    times in `Counter.most_common()` order, their counts, and how many distinct ones there were."""
    arrays: dict[str, np.ndarray] = {}
    for kind, width in (("bigram", 2), ("trigram", 3)):
        if kind == "trigram" and not counts["trigrams"]:
            continue
        frequent = [(gram, n) for gram, n in counts[f"{kind}s"].most_common() if n >= min_count]
        arrays[f"{kind}s"] = np.array([g for g, _ in frequent], dtype="int32").reshape(-1, width)
        arrays[f"{kind}_counts"] = np.array([n for _, n in frequent], dtype="int64")
        arrays[f"distinct_{kind}s"] = np.array(len(counts[f"{kind}s"]), dtype="int64")
    np.savez(data_dir / "ngrams.npz", **arrays)
    return data_dir / "ngrams.npz"


def make_exported_model(
    directory: Path,
    labels: tuple[str, ...] = ("negative", "positive"),
    texts: tuple[str, ...] | None = None,
    max_seq_len: int = 32,
    task: str = "text-classification",
    char_ngram_buckets: int = 0,
    char_ngram_dim: int = 0,
    char_ngram_min_count: int = 0,
    char_ngram_sides: str = "sum",
    char_ngram_trigrams: bool = False,
) -> Path:
    """Export a random-weight hidden-32, one-layer ERNIE of task type `task` with a character vocabulary (and a
    random bigram table of `char_ngram_buckets` rows, `char_ngram_dim` wide, where that is not 0; with a vocabulary
    of the corpus's bigrams where `char_ngram_min_count` is not 0)."""
    from paddle_mlops_core.config.inputs import ModelConfig
    from steps.runtime.data import labelled_text
    from steps.runtime.weights import ernie

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    corpus = texts or tuple(r["text"] for r in sentiment_rows())
    vocab_file = directory.parent / f".{directory.name}-vocab.txt"
    vocab_file.write_text("\n".join(labelled_text.build_vocab(corpus, 1, 8000)) + "\n", encoding="utf-8")
    cfg = ModelConfig(
        task=task,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_seq_len=max_seq_len,
        char_ngram_buckets=char_ngram_buckets,
        char_ngram_dim=char_ngram_dim,
        char_ngram_min_count=char_ngram_min_count,
        char_ngram_sides=char_ngram_sides,  # type: ignore[arg-type]
        char_ngram_trigrams=char_ngram_trigrams,
    )
    tokenizer = ernie.load_tokenizer(vocab_file)
    model = ernie.build_model(cfg, len(tokenizer.vocab), len(labels), tokenizer.pad_token_id)
    if char_ngram_buckets:  # the table starts at zero; random rows make the bigrams change every logit
        table = model.ernie.embeddings.word_embeddings.bigrams.weight
        rows = np.random.default_rng(0).normal(0, 0.05, table.shape).astype("float32")
        if char_ngram_min_count:
            rows[0] = 0  # the zero row of every bigram outside the vocabulary, as training leaves it
            if char_ngram_trigrams:
                trigrams = model.ernie.embeddings.word_embeddings.trigrams.weight
                grams = np.random.default_rng(1).normal(0, 0.05, trigrams.shape).astype("float32")
                grams[0] = 0
                trigrams.set_value(grams)
            model.ernie.embeddings.word_embeddings.fit_vocabulary(ernie.encode(tokenizer, corpus, max_seq_len))
        table.set_value(rows)
    ernie.export(model, tokenizer, dict(enumerate(labels)), cfg, directory)
    vocab_file.unlink()
    return directory


def tiny_ernie_config(tokenizer: Any, max_positions: int, **extra: Any) -> Any:
    """PaddleNLP's ErnieConfig of the tiny shape (hidden 32, one layer, two heads) for `tokenizer`'s vocabulary."""
    from paddlenlp.transformers import ErnieConfig

    return ErnieConfig(
        vocab_size=len(tokenizer.vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        type_vocab_size=2,
        **extra,
    )


def common(*overrides: str) -> list[str]:
    """The common step arguments for the tiny configuration, plus `overrides`."""
    return ["--config", CONFIG, "--env", "local", "--overrides", json.dumps([*TINY_OVERRIDES, *overrides])]


def train_args(ws: Path, dump: Path, *overrides: str) -> list[str]:
    """`steps.train` arguments: the tiny configuration plus `overrides`, workspace `ws`, parameters dumped to `dump`."""
    return [*common(*overrides), "--workspace", str(ws), "--dump-params", str(dump)]


NER_LINES = (
    "江/nr  泽民/nr  主席/n  在/p  北京/ns  会见/v  了/u  联合国/nt  秘书长/n  安南/nr  。/w",
    "国务院/nt  总理/n  李/nr  鹏/nr  昨天/t  抵达/v  上海/ns  。/w",
    "新华社/nt  记者/n  从/p  广州/ns  报道/v  ，/w  王/nr  小明/nr  获奖/v  。/w",
    "中国/ns  人民/n  银行/n  宣布/v  ，/w  张/nr  伟/nr  出任/v  行长/n  。/w",
)


def ner_corpus(path: Path, copies: int = 40) -> Path:
    """A People's Daily-format file (word/POS, two spaces): the four lines above with numbered variants."""
    lines = [f"{line.replace('。/w', f'第{i}次/m  。/w')}" for i in range(copies) for line in NER_LINES]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pair_rows() -> list[tuple[str, str, int]]:
    """LCQMC-style (text_a, text_b, label): paraphrases match (1), other subjects or questions do not (0)."""
    asks = (
        ("怎么还款", "如何还钱"),
        ("怎么开通", "如何开通"),
        ("在哪里查看", "去哪看"),
        ("为什么用不了", "为何不能用"),
    )
    rows = []
    for i, subject in enumerate(SUBJECTS):
        for j, (a, b) in enumerate(asks):
            other = asks[(j + 1) % len(asks)][1]
            rows += [(f"{subject}{a}", f"{subject}{b}", 1), (f"{subject}{a}", f"{subject}{other}", 0)]
            rows += [(f"请问{subject}{a}", f"{SUBJECTS[(i + 3) % len(SUBJECTS)]}{b}", 0)]
    return rows


def pairs_tsv(path: Path) -> Path:
    path.write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in pair_rows()), encoding="utf-8")
    return path
