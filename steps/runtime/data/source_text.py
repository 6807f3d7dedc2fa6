"""A data file as a stream of text lines, never whole in memory: byte chunks (a local file read piece by piece, an S3
StreamingBody read by `read(amt)`) become UTF-8 lines, numbered the way the readers number them.

Each block of whole `\\n`-ended lines (a chunk's) is decoded at once, the first with an optional BOM; a bad byte is
reported with its line number, as a whole-file decode would report it. The line splittings match what the in-memory
readers did with the decoded file: `str.splitlines()` (classification's JSON lines), `str.split("\\n")` (pairs' JSON
lines, the People's Daily format) and `io.StringIO(text, newline="")` (what the csv module reads: `\\r`, `\\n` and
`\\r\\n` end a line).
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


def byte_blocks(chunks: Chunks) -> Iterator[bytes]:
    """The bytes in blocks of whole `\\n`-ended lines, about a chunk each (the last block may end without `\\n`)."""
    pending: list[bytes] = []
    for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
        end = chunk.rfind(b"\n") + 1
        if not end:
            pending.append(chunk)
            continue
        yield b"".join([*pending, chunk[:end]]) if pending else chunk[:end]
        pending = [chunk[end:]] if end < len(chunk) else []
    if pending:
        yield b"".join(pending)


def decoded_blocks(chunks: Chunks, name: str) -> Iterator[str]:
    """The UTF-8 text of each block of whole lines (a BOM at the start dropped), decoded at once; StepError naming
    the line of a bad byte (a UTF-8 sequence never spans a `\\n`, so a block decodes exactly when its lines do)."""
    encoding = "utf-8-sig"
    number = 1  # the block's first line
    for block in byte_blocks(chunks):
        try:
            yield block.decode(encoding)
        except UnicodeDecodeError:
            _bad_line(block, number, encoding, name)
        number += block.count(b"\n")
        encoding = "utf-8"


def _bad_line(block: bytes, number: int, encoding: str, name: str) -> None:
    """Raise the StepError of the first line of `block` (line `number` onwards) that is not UTF-8."""
    for at, line in enumerate(block.split(b"\n"), start=number):
        try:
            line.decode(encoding)
        except UnicodeDecodeError as exc:
            raise StepError(
                f"{name} line {at} is not valid UTF-8 (byte 0x{line[exc.start]:02x}). Re-save the file as UTF-8."
            ) from None
        encoding = "utf-8"


def numbered_lines(chunks: Chunks, name: str) -> Iterator[tuple[int, str]]:
    """(number, line) as `text.splitlines()` of the decoded file numbers them (every Unicode line break ends one:
    a block ends with a `\\n`, so splitting block by block splits the same)."""
    number = 0
    for text in decoded_blocks(chunks, name):
        lines = text.splitlines()
        yield from enumerate(lines, number + 1)
        number += len(lines)


def newline_lines(chunks: Chunks, name: str) -> Iterator[tuple[int, str]]:
    """(number, line) of each `\\n`-ended line of the decoded file, without its `\\n` (as `text.split("\\n")` numbers
    them; no empty line after a final `\\n`)."""
    number = 0
    for text in decoded_blocks(chunks, name):
        lines = text.split("\n")
        if not lines[-1]:
            lines.pop()
        yield from enumerate(lines, number + 1)
        number += len(lines)


def csv_lines(chunks: Chunks, name: str) -> Iterator[str]:
    """The lines a csv reader reads from `io.StringIO(decoded, newline="")`, line ends kept."""
    for text in decoded_blocks(chunks, name):
        yield from _CSV_LINE.findall(text)
