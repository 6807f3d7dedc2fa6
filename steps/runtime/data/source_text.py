"""A data file as a stream of text lines, never whole in memory: byte chunks (a local file read piece by piece, an S3
StreamingBody read by `read(amt)`) become UTF-8 lines, numbered the way the readers number them.

Each `\\n`-ended line is decoded alone (the first with an optional BOM), so a bad byte is reported with its line
number, as a whole-file decode would report it. The line splittings match what the in-memory readers did with the
decoded file: `str.splitlines()` (classification's JSON lines), `str.split("\\n")` (pairs' JSON lines, the People's
Daily format) and `io.StringIO(text, newline="")` (what the csv module reads: `\\r`, `\\n` and `\\r\\n` end a line).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from steps.runtime.runner import StepError

CHUNK_BYTES = 64 << 10  # what one read takes: its lines are split in memory at once
# What the csv module sees as a line in a StringIO(newline=""): up to and including \r\n, \r or \n.
_CSV_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
Chunks = bytes | Iterable[bytes]  # a whole file's bytes, or its bytes in pieces of any size


def file_chunks(path: Path) -> Iterator[bytes]:
    """A local file's bytes, CHUNK_BYTES at a time."""
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk


def byte_lines(chunks: Chunks) -> Iterator[bytes]:
    """The `\\n`-ended lines of the bytes (each with its `\\n`; the last one may have none)."""
    pending = b""
    for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line + b"\n"
    if pending:
        yield pending


def decoded_lines(chunks: Chunks, name: str) -> Iterator[str]:
    """Each `\\n`-ended line as UTF-8 text (a BOM at the start dropped); StepError naming the line of a bad byte."""
    encoding = "utf-8-sig"
    for number, line in enumerate(byte_lines(chunks), start=1):
        try:
            yield line.decode(encoding)
        except UnicodeDecodeError as exc:
            raise StepError(
                f"{name} line {number} is not valid UTF-8 (byte 0x{line[exc.start]:02x}). Re-save the file as UTF-8."
            ) from None
        encoding = "utf-8"


def numbered_lines(chunks: Chunks, name: str) -> Iterator[tuple[int, str]]:
    """(number, line) as `text.splitlines()` of the decoded file numbers them (every Unicode line break ends one)."""
    number = 0
    for line in decoded_lines(chunks, name):
        for piece in line.splitlines():
            number += 1
            yield number, piece


def newline_lines(chunks: Chunks, name: str) -> Iterator[tuple[int, str]]:
    """(number, line) as `text.split("\\n")` of the decoded file numbers them (only `\\n` ends one)."""
    for number, line in enumerate(decoded_lines(chunks, name), start=1):
        yield number, line.removesuffix("\n")


def csv_lines(chunks: Chunks, name: str) -> Iterator[str]:
    """The lines a csv reader reads from `io.StringIO(decoded, newline="")`, line ends kept."""
    for line in decoded_lines(chunks, name):
        yield from _CSV_LINE.findall(line)
