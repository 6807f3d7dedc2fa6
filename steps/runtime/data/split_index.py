"""The split index: each split file's rows found by number without reading the file (training reads its split so).

prepare-data writes, beside every `<split>.jsonl`, by one streaming scan of the file written:
- `<split>.offsets.npy`: int64 [n + 1], the byte offset of each row's line, the last one the file's size;
- `<split>.lengths.npy`: uint16 [n], each row's length in characters of the text(s) the model reads
  (`Task.vocab_texts`: the text, or both texts of a pair), at most 65,535. For Chinese text a character is a token,
  so this is the length the length-grouped sampler groups by (steps/runtime/training/sampler.py).

`SplitRows` reads rows by index with `os.pread` (two offsets, then the row's bytes), never mapping or reading
the whole file: what a reader holds does not grow with the split. An index that is missing, or that does not
describe the file beside it (its last offset is not the file's size), is a StepError saying to rerun prepare-data.
"""

from __future__ import annotations

import array
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from steps.runtime.runner import StepError

SPLITS = ("train", "dev", "test")
OFFSETS_DTYPE, LENGTHS_DTYPE = "int64", "uint16"
LENGTH_CAP = np.iinfo(np.uint16).max  # a row's length in the index, at most (the model reads far fewer tokens)
CHUNK = 1 << 16  # rows of the index held while scanning, then appended to the files
Texts = Callable[[dict[str, Any]], list[str]]


def offsets_path(split_file: Path) -> Path:
    return split_file.with_suffix(".offsets.npy")


def lengths_path(split_file: Path) -> Path:
    return split_file.with_suffix(".lengths.npy")


def write(data_dir: Path, texts: Texts, splits: Iterable[str] = SPLITS) -> None:
    """Write the index of every split file in `data_dir` (prepare-data, after the splits are written), streamed to
    disk in chunks: what prepare-data holds does not grow with the split."""
    for split in splits:
        split_file = data_dir / f"{split}.jsonl"
        if split_file.is_file():
            _write_index(split_file, texts, offsets_path(split_file), lengths_path(split_file))


def _write_index(split_file: Path, texts: Texts, offsets_file: Path, lengths_file: Path) -> None:
    """One scan of `split_file`; each array's values appended to a raw file chunk by chunk, then given its header."""
    with tempfile.TemporaryDirectory(prefix="split-index-", dir=offsets_file.parent) as scratch:
        raw_offsets, raw_lengths = Path(scratch) / "offsets", Path(scratch) / "lengths"
        offsets, lengths = array.array("q"), array.array("H")
        count, position = 0, 0
        with split_file.open("rb") as lines, raw_offsets.open("wb") as o, raw_lengths.open("wb") as n:
            for line in lines:
                if line.strip():
                    offsets.append(position)
                    # characters beyond LENGTH_CAP change nothing: the model reads max_seq_len tokens of a row
                    lengths.append(min(sum(len(t) for t in texts(json.loads(line))), LENGTH_CAP))
                    count += 1
                    if len(offsets) >= CHUNK:
                        o.write(offsets.tobytes())
                        n.write(lengths.tobytes())
                        del offsets[:], lengths[:]
                position += len(line)
            offsets.append(position)
            o.write(offsets.tobytes())
            n.write(lengths.tobytes())
        _with_header(raw_offsets, offsets_file, OFFSETS_DTYPE, count + 1)
        _with_header(raw_lengths, lengths_file, LENGTHS_DTYPE, count)


def _with_header(raw: Path, target: Path, dtype: str, count: int) -> None:
    """`target`: the .npy file of the `count` native `dtype` values in `raw`."""
    with target.open("wb") as out, raw.open("rb") as values:
        np.lib.format.write_array_header_1_0(
            out, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (count,)}
        )
        shutil.copyfileobj(values, out, 1 << 20)


def _rerun(split_file: Path, what: str) -> StepError:
    return StepError(f"{split_file}: {what}; rerun prepare-data into this workspace (it writes the split index)")


def _header(handle: Any, path: Path, dtype: str, split_file: Path) -> tuple[int, int]:
    """The (data offset, length) of the 1-d `dtype` array in the .npy file open as `handle`."""
    try:
        version = np.lib.format.read_magic(handle)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, found = read(handle)
    except (ValueError, OSError):
        raise _rerun(split_file, f"{path.name} is not a .npy array") from None
    if len(shape) != 1 or found != np.dtype(dtype):
        raise _rerun(split_file, f"{path.name} is {found} {shape}, not a 1-d {dtype} array")
    return handle.tell(), int(shape[0])


class SplitRows:
    """The rows of one split file by index (`keys`: what every row must have)."""

    def __init__(self, split_file: Path, keys: Sequence[str]) -> None:
        self.path, self.keys = split_file, tuple(keys)
        index = offsets_path(split_file)
        if not split_file.is_file():
            raise StepError(f"{split_file} does not exist; run prepare-data into this workspace first.")
        if not index.is_file() or not lengths_path(split_file).is_file():
            raise _rerun(split_file, f"no split index ({index.name}, {lengths_path(split_file).name})")
        with index.open("rb") as handle:
            self._start, count = _header(handle, index, OFFSETS_DTYPE, split_file)
        self._index = os.open(index, os.O_RDONLY)
        self._file = os.open(split_file, os.O_RDONLY)
        self.rows = count - 1
        size = os.fstat(self._file).st_size
        last = self._offsets(self.rows, self.rows + 1)[0] if count else -1
        if count < 1 or last != size:
            self.close()
            raise _rerun(split_file, f"{index.name} describes a file of {last} bytes, not this one of {size}")

    def __len__(self) -> int:
        return self.rows

    def close(self) -> None:
        for fd in (self._index, self._file):
            os.close(fd)
        self._index = self._file = -1

    def __del__(self) -> None:
        if getattr(self, "_file", -1) >= 0:
            self.close()

    def _offsets(self, first: int, end: int) -> np.ndarray:
        width = np.dtype(np.int64).itemsize
        raw = os.pread(self._index, (end - first) * width, self._start + first * width)
        return np.frombuffer(raw, dtype="<i8")

    def lengths(self) -> np.ndarray:
        """uint16 [rows]: each row's length in characters, at most LENGTH_CAP (read whole: the sampler needs every
        row's; 2 bytes a row)."""
        path = lengths_path(self.path)
        with path.open("rb") as handle:
            _, count = _header(handle, path, LENGTHS_DTYPE, self.path)
        if count != self.rows:
            raise _rerun(self.path, f"{path.name} has {count} rows, the offsets {self.rows}")
        return np.load(path)

    def row(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self.rows:
            raise IndexError(f"row {i} of {self.rows} in {self.path}")
        start, end = (int(v) for v in self._offsets(i, i + 2))
        raw = os.pread(self._file, end - start, start)
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            row = None
        if not isinstance(row, dict) or any(k not in row for k in self.keys):
            shape = "{" + ", ".join(repr(k) for k in self.keys) + "}"
            raise _rerun(self.path, f"row {i} (bytes {start}..{end}) is not a {shape} object")
        return row

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every row in order, one at a time."""
        return (self.row(i) for i in range(self.rows))

    def take(self, indices: Iterable[int]) -> list[dict[str, Any]]:
        """The rows at `indices`, in that order."""
        return [self.row(int(i)) for i in indices]
