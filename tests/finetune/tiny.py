"""A tiny DupMAE bi-encoder and a hand-made batch, shared by the gradient tests and the torchrun worker."""
from __future__ import annotations

import torch

from retromae_ir.encode.cards import EncoderCard
from retromae_ir.finetune.arguments import DataArguments, LossArguments
from retromae_ir.finetune.data import TrainExample
from retromae_ir.finetune.model import BiEncoder, load_encoder

EXAMPLES = [
    TrainExample("cells divide by mitosis", ["mitosis splits a cell in two"], ["the sun is a star", "rivers flow"],
                 [4.0], [1.0, -1.0]),
    TrainExample("vitamin d and bones", ["vitamin d helps calcium uptake"], ["stock markets fell", "cats sleep"],
                 [3.0], [0.5, 0.0]),
    TrainExample("what causes rain", ["clouds release water as rain"], ["proteins fold", "a chess opening"],
                 [2.0], [2.5, -3.0]),
    TrainExample("insulin and diabetes", ["insulin regulates blood sugar"], ["jazz music history", "the moon"],
                 [5.0], [0.0, 1.0]),
]


def tiny_card(checkpoint, kind: str = "dupmae") -> EncoderCard:
    return EncoderCard(name="tiny", checkpoint=str(checkpoint), kind=kind, dims=16, k=40, query_k=20,
                       max_query_length=16, max_passage_length=16)


def tiny_bi_encoder(checkpoint, stage: str = "2", kind: str = "dupmae") -> BiEncoder:
    """Deterministic (seeded W_cls, eval mode: no dropout) so two builds are identical."""
    data = DataArguments(train="unused.jsonl", group_size=3)
    loss = LossArguments(stage=stage, temperature=0.5, hard_label_weight=0.5)
    return BiEncoder(load_encoder(tiny_card(checkpoint, kind), seed=0), data, loss).eval()


def full_batch(model: BiEncoder) -> dict:
    return model.make_collator()(EXAMPLES, torch.Generator().manual_seed(0))


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
