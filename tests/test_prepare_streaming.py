"""prepare-data in bounded memory: the same data area as the in-memory prepare-data of 7837109, byte for byte, and a
peak that does not grow with the corpus.

tests/prepare_data_7837109.json holds the sha256 of every file 7837109's prepare-data wrote for each case of
tests/generated_corpora.py (regenerate by running `generated_corpora.prepared_digests` against a `git archive
7837109` export, with PYTHONPATH at that export).
"""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from fixtures_ernie import TINY_OVERRIDES
from generated_corpora import CASES, prepared_digests

from paddle_mlops_core.config import load_config
from steps.runtime.data import area, distinct, source_text, tasks
from steps.runtime.runner import StepError

GOLDEN = json.loads((Path(__file__).parent / "prepare_data_7837109.json").read_text(encoding="utf-8"))
# What the data area gained since 7837109 (#61 item 4): the split index and the tables computed once from the data.
ADDED = {f"{split}.{kind}.npy" for split in ("train", "dev", "test") for kind in ("offsets", "lengths")}
ADDED |= {"ngrams.npz", "teacher.npy"}


def same_as_7837109(case: str, digests: dict[str, str]) -> None:
    """Every file 7837109 wrote, byte for byte; besides them only the files the data area gained since."""
    assert {name: digests.get(name) for name in GOLDEN[case]} == GOLDEN[case]
    assert set(digests) - set(GOLDEN[case]) <= ADDED


CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "pipeline.yaml")


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith(("sentiment-builtin", "ner-builtin"))])
def test_the_area_is_byte_identical_to_the_in_memory_prepare(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Duplicates, conflicts, 1 vs "1", empties, CSV quoting across lines, CRLF, chunked NER sentences and caps,
    deduplicated through many small partitions (the merge of their outputs keeps first-occurrence order)."""
    monkeypatch.setattr(distinct, "PARTITION_BYTES", 4096)
    same_as_7837109(case, prepared_digests(case, tmp_path))


@pytest.mark.parametrize("case", ["sentiment-builtin", "sentiment-builtin-capped", "ner-builtin-capped"])
def test_the_built_in_corpora_are_byte_identical(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distinct, "PARTITION_BYTES", 256 << 10)
    same_as_7837109(case, prepared_digests(case, tmp_path))


def _corpus(path: Path, n: int) -> Path:
    """`n` short distinct reviews of two labels, every 10th one repeated."""
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            row = json.dumps({"text": f"评论{i}号很好" if i % 2 else f"评论{i}号很差", "label": i % 2})
            out.write(row + "\n" + (row + "\n" if i % 10 == 0 else ""))
    return path


def _peak(tmp_path: Path, n: int) -> int:
    source = _corpus(tmp_path / f"reviews-{n}.jsonl", n)
    cfg = load_config(CONFIG, "local", [*TINY_OVERRIDES, f"data.source={source}"], task="sentiment")
    tracemalloc.start()
    try:
        stats = tasks.prepare(cfg, tmp_path / f"data-{n}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats["examples"] == n and stats["duplicates_dropped"] == -(-n // 10)
    return peak


def test_peak_memory_does_not_grow_with_the_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """20k and 80k examples (1.2 and 4.9 MB) in partitions of 512 KB: the 4x corpus peaks within 1.3x (the
    in-memory prepare of 7837109 peaks 4.0x, 11.8 and 47.4 MB: every text in a dict, every split in a list)."""
    monkeypatch.setattr(distinct, "PARTITION_BYTES", 512 << 10)
    small, large = _peak(tmp_path, 20_000), _peak(tmp_path, 80_000)
    assert large < 1.3 * small, (small, large)


def test_a_bad_byte_is_named_by_its_line_across_chunks() -> None:
    """The stream is decoded line by line, so the line of a bad byte is found however the chunks fall."""
    data = b"\xef\xbb\xbf" + "好\n".encode() * 5 + b"ok \xff\n" + b"x\n"
    for size in (1, 2, 3, 7, len(data)):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        with pytest.raises(StepError, match=r"f line 6 is not valid UTF-8 \(byte 0xff\)"):
            list(source_text.numbered_lines(chunks, "f"))


def test_line_splitting_matches_the_whole_file_readers() -> None:
    """splitlines (Unicode breaks), split("\\n") and StringIO(newline="") give the same lines, numbered the same."""
    import io

    text = "a\r\nb\u2028c\n\nd\re\x0cf\n\r\ng"
    chunks = [text.encode()[i : i + 3] for i in range(0, len(text.encode()), 3)]
    assert [line for _, line in source_text.numbered_lines(chunks, "f")] == text.splitlines()
    assert [line for _, line in source_text.newline_lines(chunks, "f")] == text.split("\n")
    assert list(source_text.csv_lines(chunks, "f")) == list(io.StringIO(text, newline=""))


def test_an_s3_source_is_read_in_chunks_never_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The StreamingBody is read with read(amt) and closed; a read that fails names the URI."""

    class Body:
        def __init__(self, data: bytes) -> None:
            self.data, self.reads, self.closed = data, [], False

        def read(self, amt: int | None = None) -> bytes:
            assert amt is not None, "the whole object was read"
            self.reads.append(amt)
            chunk, self.data = self.data[:amt], self.data[amt:]
            return chunk

        def close(self) -> None:
            self.closed = True

    body = Body(b"x" * 10)
    monkeypatch.setattr(source_text, "CHUNK_BYTES", 4)
    assert b"".join(area._s3_chunks("s3://b/k", body)) == b"x" * 10
    assert body.reads == [4, 4, 4, 4] and body.closed

    class Broken(Body):
        def read(self, amt: int | None = None) -> bytes:
            raise ConnectionError("reset by peer")

    with pytest.raises(StepError, match="cannot read data.source s3://b/k: reset by peer"):
        list(area._s3_chunks("s3://b/k", Broken(b"")))


RECORDS = [("a", "1"), ("b", "1"), ("a", "1"), ("c", "1"), ("b", "0"), ("d", "0"), ("b", "1"), ("c", "1"), ("e", "0")]


def _deduplicated(directory: Path, partitions: int) -> tuple[list[tuple[str, str]], distinct.Counts, list[str]]:
    found = distinct.Distinct(directory, partitions, tally=True)
    for key, payload in RECORDS:
        found.add(key, payload)
    counts = found.finish()
    return list(found.kept()), counts, sorted(p.name for p in directory.iterdir())


def test_a_source_under_a_partition_is_deduplicated_in_memory_the_same_as_spilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records that stay under a partition's worth never touch the disk; spilled through many partitions (a batch
    per two records), the same records are kept, in the same order, with the same counts."""
    (tmp_path / "memory").mkdir()
    kept, counts, files = _deduplicated(tmp_path / "memory", 3)
    assert files == []
    assert kept == [("a", "1"), ("c", "1"), ("d", "0"), ("e", "0")]  # b came with two labels
    assert (counts.seen, counts.kept, counts.duplicates, counts.repeats, counts.conflicts) == (9, 4, 3, 4, 1)
    assert counts.conflict_examples == ["b"] and counts.tally == {"1": 2, "0": 2}
    monkeypatch.setattr(distinct, "PARTITION_BYTES", 6)
    (tmp_path / "spilled").mkdir()
    spilled, spilled_counts, files = _deduplicated(tmp_path / "spilled", 3)
    assert files == ["kept-0.pickle", "kept-1.pickle", "kept-2.pickle"]
    assert (spilled, spilled_counts) == (kept, counts)


def test_vocabulary_characters_are_counted_as_each_text_lower_cases_alone() -> None:
    """The train texts are lower-cased and counted a batch at once: a final sigma (its context ends at a text's
    end), a character that lower-cases to two, astral characters and a lone surrogate count as they do text by
    text."""
    texts = ["ΟΔΟΣ", "ΣΑ", "İstanbul", "Straße 𠀀😀", "x\ud800y", "ΑΣ", "Σ"]
    chars: Counter[str] = Counter()
    area._tally({}, {}, chars, list(texts))
    expected = Counter(ch for text in texts for ch in text.lower())
    assert chars - Counter({"\n": len(texts) - 1}) == expected
