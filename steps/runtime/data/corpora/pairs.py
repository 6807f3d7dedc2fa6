"""Sentence-pair files (LCQMC style) for text matching: TSV/TXT, CSV or JSON lines, chosen by the file suffix.

Every error names the file, the line and the column, and says how to fix the file. A file is read as a stream of
lines (steps/runtime/data/source_text.py), never whole.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from steps.runtime.data import source_text
from steps.runtime.runner import StepError

PAIR_FIELDS = ("text_a", "text_b", "label")
TSV_SUFFIXES = (".tsv", ".txt")
CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


@dataclass(frozen=True)
class PairExample:
    """Two texts and the label of their relation (LCQMC: "1" same intent, "0" not)."""

    text_a: str
    text_b: str
    label: str | int
    where: str  # "file line N", for error messages


def _suffix(name: str) -> str:
    """Lower-case suffix of a path or URI's last component ("" if none)."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return "." + base.rsplit(".", 1)[-1].lower() if "." in base else ""


def _column(fields: tuple[str, str, str], index: int, tsv: bool) -> str:
    """How an error names a column: `'text_b' (column 2)` for TSV, `'text_b'` otherwise."""
    return f"'{fields[index]}' (column {index + 1})" if tsv else f"'{fields[index]}'"


def _text(value: object, where: str, fields: tuple[str, str, str], index: int, tsv: bool) -> str:
    """text_a or text_b, checked: present, a string, not blank."""
    column = _column(fields, index, tsv)
    if value is None:
        raise StepError(f"{where}, column {column}: the value is missing. Every row needs {', '.join(fields)}.")
    if not isinstance(value, str):
        kind = _JSON_TYPES.get(type(value), type(value).__name__)
        raise StepError(f"{where}, column {column}: must be a string (got JSON {kind}). Quote the text.")
    if not value.strip():
        raise StepError(f"{where}, column {column}: the text is empty. Every row needs {', '.join(fields)}.")
    return value


def _label(value: object, where: str, fields: tuple[str, str, str], tsv: bool) -> str | int:
    """The label, checked: a non-blank string (stripped) or an integer (not a bool)."""
    column = _column(fields, 2, tsv)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise StepError(f"{where}, column {column}: the label is missing or empty. Every row needs a label.")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        shown = json.dumps(value, ensure_ascii=False)
        raise StepError(f"{where}, column {column}: label {shown} must be a string or an integer (e.g. 0 or 1).")
    return value.strip() if isinstance(value, str) else value


def _example(values: list[object], where: str, fields: tuple[str, str, str], tsv: bool = False) -> PairExample:
    """A PairExample from the three values in field order; StepError naming the column on a bad value."""
    text_a = _text(values[0], where, fields, 0, tsv)
    text_b = _text(values[1], where, fields, 1, tsv)
    return PairExample(text_a, text_b, _label(values[2], where, fields, tsv), where)


def _rows(reader: Iterator[list[str]], line_num: Callable[[], int]) -> Iterator[tuple[int, list[str]]]:
    """(first line number, fields) of each non-blank record of a csv reader."""
    previous = 0
    for row in reader:
        first, previous = previous + 1, line_num()
        if any(value.strip() for value in row):
            yield first, row


def read_tsv(data: source_text.Chunks, name: str, fields: tuple[str, str, str]) -> Iterator[PairExample]:
    """Tab-separated text_a, text_b, label, no quoting; a first row equal to the field names is a header."""
    reader = csv.reader(source_text.csv_lines(data, name), delimiter="\t", quoting=csv.QUOTE_NONE)
    for position, (number, row) in enumerate(_rows(reader, lambda: reader.line_num)):
        if position == 0 and [value.strip() for value in row] == list(fields):
            continue
        if len(row) != len(fields):
            raise StepError(
                f"{name} line {number} has {len(row)} field{'s' if len(row) != 1 else ''}; expected 3 "
                f"({', '.join(fields)}). Fields must be separated by tabs, not spaces."
            )
        yield _example(list(row), f"{name} line {number}", fields, tsv=True)


def read_csv(data: source_text.Chunks, name: str, fields: tuple[str, str, str]) -> Iterator[PairExample]:
    """Comma-separated with a header row; columns found by name, extra columns ignored."""
    reader = csv.reader(source_text.csv_lines(data, name))
    rows = _rows(reader, lambda: reader.line_num)
    header = next(rows, None)
    if header is None:
        raise StepError(f"{name} is empty. The file needs a header row with columns {', '.join(fields)}.")
    columns = [value.strip() for value in header[1]]
    missing = [f for f in fields if f not in columns]
    if missing:
        raise StepError(
            f"{name} line {header[0]} (header) has no column {', '.join(repr(m) for m in missing)} "
            f"(columns found: {', '.join(columns)}). The file needs columns {', '.join(fields)}."
        )
    indices = [columns.index(f) for f in fields]
    for number, row in rows:
        yield _example([row[i] if i < len(row) else None for i in indices], f"{name} line {number}", fields)


def read_jsonl(data: source_text.Chunks, name: str, fields: tuple[str, str, str]) -> Iterator[PairExample]:
    """One JSON object per line with the three keys."""
    for number, line in source_text.newline_lines(data, name):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StepError(f"{where} is not valid JSON ({exc.msg} at column {exc.colno}). Fix or remove it.") from None
        if not isinstance(row, dict):
            kind = _JSON_TYPES.get(type(row), "value")
            raise StepError(
                f"{where} is a JSON {kind}, not an object. Write one object per line with keys {', '.join(fields)}."
            )
        yield _example([row.get(f) for f in fields], where, fields)


def read_pairs(
    data: source_text.Chunks, name: str, fields: tuple[str, str, str] = PAIR_FIELDS
) -> Iterator[PairExample]:
    """Examples of a pair file (UTF-8, optional BOM) by suffix: .tsv/.txt, .csv or .jsonl/.json/.ndjson."""
    suffix = _suffix(name)
    if suffix in TSV_SUFFIXES:
        reader = read_tsv
    elif suffix in CSV_SUFFIXES:
        reader = read_csv
    elif suffix in JSONL_SUFFIXES:
        reader = read_jsonl
    else:
        kind = f"type '{suffix}'" if suffix else "type (the name has no suffix)"
        raise StepError(f"{name}: unsupported pair file {kind}. Use .tsv, .csv or .jsonl.")
    return reader(data, name, fields)
