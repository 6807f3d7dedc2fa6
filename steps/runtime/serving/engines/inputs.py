"""What every engine is fed: a batch of token ids, and the named inputs a graph declares made from it."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

Batch = tuple[np.ndarray, np.ndarray]  # input_ids, token_type_ids


def feeds(names: Iterable[str], input_ids: np.ndarray, token_type_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The inputs the graph declares, as contiguous int64; one it does not declare is not fed (an export may
    drop token_type_ids)."""
    given = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    out = {}
    for name in names:
        if name not in given:
            raise ValueError(f"the model asks for an input {name!r}; only input_ids and token_type_ids are known")
        out[name] = np.ascontiguousarray(given[name], dtype=np.int64)
    return out
