"""How documents are grouped into forward passes: longest first, so a batch pads little, and on a CPU no more
tokens per pass than keep the widest activation (the FFN's ``[tokens, intermediate_size]``) inside the last-level
cache.

Why the token cap: a GEMM whose output overflows that cache runs at the speed of memory, not of the cores. On
AMD's AVX-512 EPYC (32 MiB L3, 2 threads) MiniLM's FFN-in product (384 -> 1536, oneDNN) runs at 500 GFLOP/s up to
5,120 tokens (30 MiB of output) and at 310 from 6,144 tokens on; a batch of 64 documents of 256 tokens is 16,384
(``benchmarks/gemm_routes.py --tokens``; docs/encoders.md). Half the cache is the budget, leaving the rest to the
product's inputs and weights. A GPU keeps the caller's batch size."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from retromae_ir.hardware import last_level_cache_bytes

FALLBACK_CPU_TOKENS = 4096  # where the cache size is unknown: MiniLM's knee on a 32 MiB L3, with room


def cpu_token_budget(width: int, cache_bytes: int | None, element_bytes: int = 4) -> int:
    """Tokens per forward pass whose ``[tokens, width]`` activation fills half of a ``cache_bytes`` cache."""
    if cache_bytes is None:
        return FALLBACK_CPU_TOKENS
    return max(1, cache_bytes // 2 // (width * element_bytes))


def token_budget(device: torch.device, width: int) -> int | None:
    """The cap on tokens per forward pass on ``device`` for a transformer whose widest activation has ``width``
    columns; None (no cap) off the CPU."""
    return cpu_token_budget(width, last_level_cache_bytes()) if device.type == "cpu" else None


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> Iterator[np.ndarray]:
    """Indices into ``lengths``, longest first, in batches of at most ``batch_size`` documents whose padded size
    (documents x longest length) stays within ``max_tokens`` (a document longer than that goes alone)."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    order = np.argsort([-length for length in lengths], kind="stable")
    start = 0
    while start < len(order):
        longest = max(1, lengths[order[start]])
        rows = batch_size if max_tokens is None else max(1, min(batch_size, max_tokens // longest))
        yield order[start:start + rows]
        start += rows
