"""Length-grouped batch sampler for data-parallel training (serving's dynamic batching is in serving.py).

Padding every batch to its longest text wastes most of the compute on a corpus whose texts vary
from 5 to 128 characters. Each epoch shuffles the data, sorts it by length inside windows of
`window` global batches, cuts global batches (`batch_size × world` examples), shuffles their
order, and gives each rank its slice of every global batch. So all ranks see similar lengths at
the same step (no rank waits on another at the all-reduce), and the union of the ranks' batches
at a step is the same for any world size with the same global batch: 2 processes × b train the
same steps as 1 process × 2b.

Memory: the lengths as given and one int32 order of the rows per epoch, sorted in place (6 bytes a row with the
trainer's uint16 lengths); iterating yields each batch from that order as it goes, no list of them is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


class LengthGroupedBatchSampler:
    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
        window: int = 50,
        drop_last: bool = False,
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside 0..{num_replicas - 1}")
        self.lengths = np.asarray(lengths)  # kept as given (the trainer's: uint16 from the split index)
        self.batch_size = batch_size
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = seed
        self.window = window
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.num_replicas

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.global_batch if self.drop_last else -(-n // self.global_batch)

    def global_batches(self) -> list[np.ndarray]:
        """This epoch's global batches (identical on every rank): views into one int32 order of the rows."""
        return list(self._global_batches())

    def _global_batches(self) -> Iterator[np.ndarray]:
        rng = np.random.default_rng((self.seed, self.epoch))
        order = np.arange(len(self.lengths), dtype=np.int32)
        rng.shuffle(order)
        span = self.global_batch * self.window
        for start in range(0, len(order), span):  # sorted by length inside each window, in place
            chunk = order[start : start + span]
            chunk[:] = chunk[np.argsort(self.lengths[chunk], kind="stable")]
        batches = np.arange(len(self), dtype=np.int32)
        rng.shuffle(batches)
        for b in batches:
            yield order[b * self.global_batch : (b + 1) * self.global_batch]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._global_batches():
            # a short last batch still gives every rank at least one example when it can
            per_rank = -(-len(batch) // self.num_replicas)
            part = batch[self.rank * per_rank : (self.rank + 1) * per_rank]
            if len(part) == 0:
                part = batch[-1:]
            yield part.tolist()
