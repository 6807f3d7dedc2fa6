"""The split index: each split file's rows found by number without reading the file (training reads its split so).

prepare-data writes, beside every `<split>.jsonl`, by one streaming scan of the file written:
- `<split>.offsets.npy`: int64 [n + 1], the byte offset of each row's line, the last one the file's size;
- `<split>.lengths.npy`: int32 [n], each row's length in characters of the text(s) the model reads
  (`Task.vocab_texts`: the text, or both texts of a pair). For Chinese text a character is a token, so this is
  the length the length-grouped sampler groups by (steps/runtime/training/sampler.py).

`SplitRows` reads rows by index with `os.pread` (two offsets, then the row's bytes), never mapping or reading
the whole file: what a reader holds does not grow with the split. An index that is missing, or that does not
describe the file beside it (its last offset is not the file's size), is a StepError saying to rerun prepare-data.
"""

from __future__ import annotations

import array
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from steps.runtime.runner import StepError

SPLITS = ("train", "dev", "test")
Texts = Callable[[dict[str, Any]], list[str]]


def offsets_path(split_file: Path) -> Path:
    return split_file.with_suffix(".offsets.npy")


def lengths_path(split_file: Path) -> Path:
    return split_file.with_suffix(".lengths.npy")


def scan(split_file: Path, texts: Texts) -> tuple[np.ndarray, np.ndarray]:
    """The offsets and lengths of `split_file`'s rows, read line by line (blank lines belong to the row before)."""
    offsets, lengths = array.array("q"), array.array("i")
    position = 0
    with split_file.open("rb") as lines:
        for line in lines:
            if line.strip():
                offsets.append(position)
                lengths.append(sum(len(t) for t in texts(json.loads(line))))
            position += len(line)
    offsets.append(position)
    return np.frombuffer(offsets, dtype=np.int64), np.frombuffer(lengths, dtype=np.int32)


def write(data_dir: Path, texts: Texts, splits: Iterable[str] = SPLITS) -> None:
    """Write the index of every split file in `data_dir` (prepare-data, after the splits are written)."""
    for split in splits:
        split_file = data_dir / f"{split}.jsonl"
        if split_file.is_file():
            offsets, lengths = scan(split_file, texts)
            np.save(offsets_path(split_file), offsets)
            np.save(lengths_path(split_file), lengths)


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
            self._start, count = _header(handle, index, "int64", split_file)
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
        """int32 [rows]: each row's length in characters (read whole: the sampler needs every row's)."""
        path = lengths_path(self.path)
        with path.open("rb") as handle:
            _, count = _header(handle, path, "int32", self.path)
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
