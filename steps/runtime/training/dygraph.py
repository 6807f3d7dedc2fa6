"""Paddle's dygraph kernels for training on CPU.

In Paddle 3.3 (the locked version) a `transpose` (and `slice`, `split`, ...) in dygraph returns a strided view
(`FLAGS_use_stride_kernel`, on by default), and the next op that needs its input contiguous — the
`reshape` after each attention transpose in every ERNIE layer, forward and backward — copies it
with the CPU `strided_copy` / `contiguous` kernels (paddle/phi/kernels/cpu/strided_copy_kernel.cc,
contiguous_kernel.cc): one element at a time, with an integer division and modulo
per dimension per element. On `make run`'s model (hidden 128, batch 32 of ~62 tokens) that is
~3.7 ms per copy against ~0.1-0.2 ms for the dense transpose kernel the flag off selects, and
~35 % of a training step (docs/training.md "Throughput"). The results are bit-identical either way
(tests/test_dygraph.py): only where the copy happens changes.

On a GPU the strided kernels are CUDA kernels and nothing here was measured, so they stay as
Paddle sets them. A `FLAGS_use_stride_kernel` in the environment is the user's choice and wins.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

STRIDE_FLAG = "FLAGS_use_stride_kernel"


@contextmanager
def dense_kernels_on_cpu(use_gpu: bool) -> Iterator[bool]:
    """Paddle's strided views off while the block trains on CPU (True), as they were after it; on a GPU, or with
    the flag in the environment, nothing changes (False)."""
    if use_gpu or STRIDE_FLAG in os.environ:
        yield False
        return
    import paddle

    before = paddle.get_flags([STRIDE_FLAG])[STRIDE_FLAG]
    paddle.set_flags({STRIDE_FLAG: False})
    try:
        yield True
    finally:
        paddle.set_flags({STRIDE_FLAG: before})
