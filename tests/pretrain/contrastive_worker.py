"""One of two gloo processes for test_contrastive_ddp.py: its half of a fixed batch through a shared linear
"encoder", the contrastive loss, backward, and the gradient averaged over the processes as DDP averages it."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from retromae_ir.pretrain.contrastive import info_nce


def fixed_batch():
    """Rows 0 and 4, and 3 and 7, are segments of one document each: a pair split across the two processes."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 5, generator=generator)
    documents = torch.tensor([0, 1, 2, 3, 0, 5, 6, 3])
    return weight, torch.randn(8, 6, generator=generator), torch.randn(8, 6, generator=generator), documents


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    weight, anchors, positives, documents = fixed_batch()
    weight.requires_grad_(True)
    rows = slice(rank * 8 // world, (rank + 1) * 8 // world)
    loss = info_nce(anchors[rows] @ weight, positives[rows] @ weight, 0.1, documents[rows])
    loss.backward()
    dist.all_reduce(weight.grad)
    torch.save({"loss": loss.item(), "grad": weight.grad / world}, out / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
