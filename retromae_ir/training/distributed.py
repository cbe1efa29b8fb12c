"""Cross-process helpers of the training loss: in-batch negatives see every process's batch."""
from __future__ import annotations

import torch
import torch.distributed as dist


def gather_with_grad(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All processes' ``x`` concatenated (this process's slice keeps its gradient) and this slice's offset."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x, 0
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.detach().contiguous())
    rank = dist.get_rank()
    parts[rank] = x
    return torch.cat(parts), rank * x.shape[0]
