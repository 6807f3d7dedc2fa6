"""Sentence-pair files: TSV/CSV/JSONL read to the same examples, and every bad row named by file, line and column."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from steps.runtime.data.corpora.pairs import PAIR_FIELDS, PairExample, read_pairs
from steps.runtime.runner import StepError

PAIRS = [
    ("喜欢打篮球的男生喜欢什么样的女生", "爱打篮球的男生喜欢什么样的女生", "1"),
    ("我手机丢了，我想换个手机", "我想买个新手机，求推荐", "1"),
    ("大家觉得她好看吗", "大家觉得跑男好看吗？", "0"),
    ('他说"你好"', "引号'单'与\"双\"", "0"),
]


def write_tsv(path: Path, rows: list[tuple[str, ...]]) -> Path:
    path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[tuple[str, ...]], header: tuple[str, ...] = PAIR_FIELDS) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def read(path: Path) -> list[PairExample]:
    return list(read_pairs(path.read_bytes(), str(path)))


def triples(examples: list[PairExample]) -> list[tuple[str, str, str | int]]:
    return [(e.text_a, e.text_b, e.label) for e in examples]


def error(path: Path) -> str:
    with pytest.raises(StepError) as raised:
        read(path)
    return str(raised.value)


def test_formats_read_the_same_examples(tmp_path: Path) -> None:
    files = [
        write_tsv(tmp_path / "train.tsv", PAIRS),
        write_tsv(tmp_path / "train.TXT", PAIRS),
        write_csv(tmp_path / "train.csv", PAIRS),
        write_jsonl(tmp_path / "train.jsonl", [dict(zip(PAIR_FIELDS, row, strict=True)) for row in PAIRS]),
        write_jsonl(tmp_path / "train.ndjson", [dict(zip(PAIR_FIELDS, row, strict=True)) for row in PAIRS]),
    ]
    for path in files:
        examples = read(path)
        assert triples(examples) == PAIRS, path
        assert examples[0].where == f"{path} line {2 if path.suffix == '.csv' else 1}"


def test_s3_uri_and_custom_fields(tmp_path: Path) -> None:
    data = write_csv(tmp_path / "x.csv", PAIRS, header=("q1", "q2", "y")).read_bytes()
    examples = list(read_pairs(data, "s3://bucket/data/pairs.CSV", fields=("q1", "q2", "y")))
    assert triples(examples) == PAIRS and examples[0].where == "s3://bucket/data/pairs.CSV line 2"


def test_lcqmc_header_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "dev.tsv"
    path.write_text("text_a\ttext_b\tlabel\n\n" + "".join("\t".join(row) + "\n" for row in PAIRS) + "\n", "utf-8")
    examples = read(path)
    assert triples(examples) == PAIRS
    assert examples[0].where == f"{path} line 3"
    # the header is only a header in the first row
    later = write_tsv(tmp_path / "later.tsv", [PAIRS[0], PAIR_FIELDS])
    assert triples(read(later))[1] == PAIR_FIELDS


def test_labels_stripped_and_integers_kept(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "p.json",
        [
            {"text_a": "a", "text_b": "b", "label": 1},
            {"text_a": "今天天气好", "text_b": "今天天气不错", "label": " 0 "},
        ],
    )
    assert [e.label for e in read(path)] == [1, "0"]


def test_csv_quoted_comma_newline_extra_columns_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    text = 'id,label,text_b,text_a,source\n7,1,"你好，世界, 再见","第一行\n第二行",web\n8,0,b,"a",web\n'
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    examples = read(path)
    assert triples(examples) == [("第一行\n第二行", "你好，世界, 再见", "1"), ("a", "b", "0")]
    assert [e.where for e in examples] == [f"{path} line 2", f"{path} line 4"]


def test_bom_tsv_header(tmp_path: Path) -> None:
    path = tmp_path / "p.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + "text_a\ttext_b\tlabel\n甲\t乙\t1\n".encode())
    assert triples(read(path)) == [("甲", "乙", "1")]


def test_tsv_quotes_are_literal(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "q.tsv", [('"开头引号', '中间"引号"', "1")])
    assert triples(read(path)) == [('"开头引号', '中间"引号"', "1")]


def test_unsupported_suffix() -> None:
    with pytest.raises(StepError, match=r"pairs.xlsx: unsupported pair file type '.xlsx'. Use .tsv, .csv or .jsonl"):
        read_pairs(b"", "s3://b/pairs.xlsx")
    with pytest.raises(StepError, match="no suffix"):
        read_pairs(b"", "data/pairs")


@pytest.mark.parametrize(
    ("rows", "line", "fragments"),
    [
        ([PAIRS[0], ("只有", "两列")], 2, ["has 2 fields; expected 3", "separated by tabs"]),
        ([("一 行 空格 分隔",)], 1, ["has 1 field; expected 3", "separated by tabs"]),
        ([PAIRS[0], ("a", "b", "1", "extra")], 2, ["has 4 fields"]),
        ([("  ", "b", "1")], 1, ["column 'text_a' (column 1)", "text is empty"]),
        ([("a", "", "1")], 1, ["column 'text_b' (column 2)", "text is empty"]),
        ([PAIRS[1], PAIRS[2], ("a", "b", " ")], 3, ["column 'label' (column 3)", "label is missing or empty"]),
    ],
)
def test_tsv_errors(tmp_path: Path, rows: list[tuple[str, ...]], line: int, fragments: list[str]) -> None:
    message = error(write_tsv(tmp_path / "bad.tsv", rows))
    assert f"bad.tsv line {line}" in message
    for fragment in fragments:
        assert fragment in message


def test_csv_missing_column(tmp_path: Path) -> None:
    message = error(write_csv(tmp_path / "bad.csv", [("a", "b")], header=("text_a", "text_b")))
    assert "bad.csv line 1" in message and "'label'" in message
    assert "columns found: text_a, text_b" in message and "needs columns text_a, text_b, label" in message
    empty = tmp_path / "empty.csv"
    empty.write_text("\n", encoding="utf-8")
    assert "empty.csv is empty" in error(empty)


@pytest.mark.parametrize(
    ("rows", "line", "column", "fragment"),
    [
        ([("a", "b", "1"), ("", "b", "0")], 3, "text_a", "text is empty"),
        ([("a", "  ", "1")], 2, "text_b", "text is empty"),
        ([("a", "b", "")], 2, "label", "label is missing"),
    ],
)
def test_csv_errors(tmp_path: Path, rows: list[tuple[str, ...]], line: int, column: str, fragment: str) -> None:
    message = error(write_csv(tmp_path / "bad.csv", rows))
    assert f"bad.csv line {line}" in message and f"'{column}'" in message and fragment in message


def test_csv_short_row(tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    path.write_text("text_a,text_b,label\na,b\n", encoding="utf-8")
    message = error(path)
    assert "short.csv line 2, column 'label'" in message


@pytest.mark.parametrize(
    ("line", "column", "fragment"),
    [
        ('{"text_a": 5, "text_b": "b", "label": 1}', "text_a", "must be a string (got JSON number)"),
        ('{"text_a": "a", "text_b": ["b"], "label": 1}', "text_b", "must be a string (got JSON array)"),
        ('{"text_a": "a", "label": 1}', "text_b", "value is missing"),
        ('{"text_a": "a", "text_b": "b"}', "label", "label is missing"),
        ('{"text_a": "a", "text_b": "b", "label": true}', "label", "label true must be a string or an integer"),
        ('{"text_a": "a", "text_b": "b", "label": 1.5}', "label", "label 1.5 must be a string or an integer"),
        ('{"text_a": "a", "text_b": "b", "label": null}', "label", "label is missing"),
    ],
)
def test_jsonl_value_errors(tmp_path: Path, line: str, column: str, fragment: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text_a": "a", "text_b": "b", "label": 0}\n\n' + line + "\n", encoding="utf-8")
    message = error(path)
    assert "bad.jsonl line 3" in message and f"column '{column}'" in message and fragment in message


def test_jsonl_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text_a": "a", "text_b": "b", "label": 0}\n{"text_a": "a",\n', encoding="utf-8")
    message = error(path)
    assert "bad.jsonl line 2 is not valid JSON (Expecting property name enclosed in double quotes" in message
    path.write_text('["a", "b", 1]\n', encoding="utf-8")
    assert "bad.jsonl line 1 is a JSON array, not an object" in error(path)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_bytes("甲\t乙\t1\n".encode() + b"\xff\xfe\tb\t0\n")
    assert "bad.tsv line 2 is not valid UTF-8" in error(path)
