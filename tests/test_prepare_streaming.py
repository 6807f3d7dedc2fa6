"""prepare-data in bounded memory: the same data area as the in-memory prepare-data of 7837109, byte for byte, and a
peak that does not grow with the corpus.

tests/prepare_data_7837109.json holds the sha256 of every file 7837109's prepare-data wrote for each case of
tests/generated_corpora.py (regenerate by running `generated_corpora.prepared_digests` against a `git archive
7837109` export, with PYTHONPATH at that export).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from fixtures_ernie import TINY_OVERRIDES
from generated_corpora import CASES, prepared_digests

from paddle_mlops_core.config import load_config
from steps.runtime.data import area, distinct, source_text, tasks
from steps.runtime.runner import StepError

GOLDEN = json.loads((Path(__file__).parent / "prepare_data_7837109.json").read_text(encoding="utf-8"))
CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "pipeline.yaml")


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith(("sentiment-builtin", "ner-builtin"))])
def test_the_area_is_byte_identical_to_the_in_memory_prepare(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Duplicates, conflicts, 1 vs "1", empties, CSV quoting across lines, CRLF, chunked NER sentences and caps,
    deduplicated through many small partitions (the merge of their outputs keeps first-occurrence order)."""
    monkeypatch.setattr(distinct, "PARTITION_BYTES", 4096)
    assert prepared_digests(case, tmp_path) == GOLDEN[case]


@pytest.mark.parametrize("case", ["sentiment-builtin", "sentiment-builtin-capped", "ner-builtin-capped"])
def test_the_built_in_corpora_are_byte_identical(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distinct, "PARTITION_BYTES", 256 << 10)
    assert prepared_digests(case, tmp_path) == GOLDEN[case]


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
