"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU) by test_distributed.py: each process takes half of the
hand-made batch, gathers the pool, back-propagates through DDP and saves the loss and the averaged gradients."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from tiny import CASES, full_batch, gradients, tiny_bi_encoder  # noqa: E402

from retromae_ir.finetune.gradcache import forward_backward, split_batch  # noqa: E402


def main(checkpoint: str, output: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {}
    for name, (stage, chunk, mask, examples) in CASES.items():
        model = tiny_bi_encoder(checkpoint, stage, mask=mask)
        wrapped = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
        local = split_batch(full_batch(model, examples), 4 // world)[rank]
        losses = forward_backward(wrapped, local, model.loss, chunk, loss_scale=world, no_sync=wrapped.no_sync)
        results[name] = {"losses": {k: v.item() for k, v in losses.items()}, "grads": gradients(model)}
    torch.save(results, Path(output) / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
