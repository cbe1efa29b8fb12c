"""How documents are grouped into forward passes: longest first, so a batch pads little, and on a CPU no more
tokens per pass than keep the widest activation (the FFN's ``[tokens, intermediate_size]``) inside the last-level
cache.

Why the token cap: a GEMM whose output overflows that cache runs at the speed of memory, not of the cores. On
AMD's AVX-512 EPYC (32 MiB L3, 2 threads) MiniLM's FFN-in product (384 -> 1536, oneDNN) runs at 491-505 GFLOP/s
up to 5,120 tokens (30 MiB of output), 387-395 at 6,144-8,192 and 318 at 16,384, the 64 documents of 256 tokens
of a batch of 64 (``benchmarks/gemm_routes.py --tokens``; docs/encoders.md). Half the cache is the budget, leaving
the rest to the product's inputs and weights, with a floor of ``MIN_TOKENS`` (caps from 768 to 4,096 tokens
encoded at the same speed there). A GPU keeps the caller's batch size.

The cache counted is at most ``MAX_CACHE_BYTES``: a virtual machine's sysfs can report the host socket's L3, which
its few cores share with the host's others. On a 2-core Intel Xeon VM whose sysfs says 480 MiB, the same product
runs at 409-418 GFLOP/s up to 4,096 tokens and 259-280 at 8,192-16,384, and a cap taken from 480 MiB (none, in
effect) encoded 9% slower than caps of 1,024-4,096 tokens."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from retromae_ir.hardware import last_level_cache_bytes

FALLBACK_CACHE_BYTES = 32 << 20  # where sysfs names no shared cache: the L3 the cap was measured on
MAX_CACHE_BYTES = 32 << 20  # the most cache a budget counts: 4,096 tokens kept full speed on both CPUs measured
MIN_TOKENS = 1024  # four 256-token documents: below that, per-pass overheads grow and nothing is measured


def cpu_token_budget(width: int, cache_bytes: int | None, element_bytes: int = 4) -> int:
    """Tokens per forward pass whose ``[tokens, width]`` activation of ``element_bytes`` numbers fills half of a
    ``cache_bytes`` cache (``FALLBACK_CACHE_BYTES`` when unknown, at most ``MAX_CACHE_BYTES``), and at least
    ``MIN_TOKENS``."""
    cache = FALLBACK_CACHE_BYTES if cache_bytes is None else min(cache_bytes, MAX_CACHE_BYTES)
    return max(MIN_TOKENS, cache // 2 // (width * element_bytes))


def token_budget(device: torch.device, width: int, element_bytes: int = 4) -> int | None:
    """The cap on tokens per forward pass on ``device`` for a transformer whose widest activation has ``width``
    columns of ``element_bytes`` (2 under bf16 autocast); None (no cap) off the CPU."""
    if device.type != "cpu":
        return None
    return cpu_token_budget(width, last_level_cache_bytes(), element_bytes)


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
