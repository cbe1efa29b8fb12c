"""Pre-training's ``Trainer`` (schedule, seeded data order, checkpoints, exact resume, loss CSV/PNG, torchrun)
with the fine-tuning step: gathered in-batch negatives and gradient caching (``gradcache.forward_backward``).

A model trained here provides ``name``, ``gathers`` (whether its loss sees every process's batch),
``make_collator()``, ``forward(batch) -> {name: tensor}``, ``loss(outputs, batch) -> {"loss", ...}``,
``save(directory, metadata)`` and ``after_save(directory)`` (called once a checkpoint has its final path).

When the loss is computed on the gathered pool, every process computes the same full loss but its gradient
reaches only the local rows; DDP averages over the W processes, so the loss is scaled by W to give exactly the
gradient of the single-process loss on the combined batch (tests/finetune/test_distributed.py checks it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from retromae_ir.finetune.gradcache import forward_backward
from retromae_ir.training.trainer import Trainer, micro_seeds


class FinetuneTrainer(Trainer):
    """``reload(checkpoint_dir)`` builds a model of the same kind from a saved checkpoint (for --resume)."""

    job = "fine-tuning"

    def __init__(self, model: torch.nn.Module, examples: Sequence[Any], args, metadata: dict,
                 reload: Callable[[Path], torch.nn.Module], identity: dict | None = None):
        super().__init__(model, examples, args, metadata, identity)
        self.reload = reload

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.world_size == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        # dense cards leave BERT's pooler unused; gradient caching runs graph-less forwards
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)

    def load_model(self, checkpoint: Path) -> torch.nn.Module:
        return self.reload(checkpoint)

    def train_step(self) -> dict[str, float]:
        """One optimizer step on one batch (``batch_size`` queries per process), gradient-cached if asked."""
        collator_seed, torch_seed = micro_seeds(self.args.seed, self.step, self.rank)
        examples = [self.examples[i] for i in self.schedule.indices(self.step, self.rank, self.args.seed)]
        batch = self.collator(examples, torch.Generator().manual_seed(collator_seed))
        batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        torch.manual_seed(torch_seed)

        def autocast():
            return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.args.bf16)

        losses = forward_backward(self.wrapped, batch, self.model.loss, self.args.grad_cache_chunk,
                                  self.world_size if self.model.gathers else 1, autocast,
                                  self.wrapped.no_sync if self.world_size > 1 else None)
        return self.update({k: float(v) for k, v in losses.items()})

    def save_checkpoint(self) -> Path:
        path = super().save_checkpoint()
        if self.is_main:
            self.model.after_save(path)
        return path

    def train(self) -> Path:
        output = super().train()
        if self.is_main:
            self.model.after_save(output)
        return output
