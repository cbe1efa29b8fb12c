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


# query 3's first negative is query 0's positive, query 1 also counts query 2's positive as its own: with
# --mask-false-negatives those columns leave query 0's and query 1's pools (across processes under torchrun)
SHARED = [EXAMPLES[0], TrainExample(EXAMPLES[1].query, EXAMPLES[1].positives + EXAMPLES[2].positives,
                                    EXAMPLES[1].negatives, [3.0, 2.0], [0.5, 0.0]),
          EXAMPLES[2], TrainExample(EXAMPLES[3].query, EXAMPLES[3].positives,
                                    [EXAMPLES[0].positives[0], EXAMPLES[3].negatives[1]], [5.0], [0.0, 1.0])]
# name -> (stage, gradient-cache chunk, --mask-false-negatives, examples)
CASES = {"2": ("2", 0, False, EXAMPLES), "distill": ("distill", 1, False, EXAMPLES),
         "2-masked": ("2", 1, True, SHARED)}


def tiny_card(checkpoint, kind: str = "dupmae") -> EncoderCard:
    return EncoderCard(name="tiny", checkpoint=str(checkpoint), kind=kind, dims=16, k=40, query_k=20,
                       max_query_length=16, max_passage_length=16)


def tiny_bi_encoder(checkpoint, stage: str = "2", kind: str = "dupmae", mask: bool = False) -> BiEncoder:
    """Deterministic (seeded W_cls, eval mode: no dropout) so two builds are identical."""
    data = DataArguments(train="unused.jsonl", group_size=3)
    loss = LossArguments(stage=stage, temperature=0.5, hard_label_weight=0.5 if stage == "distill" else 0.0,
                         mask_false_negatives=mask)
    return BiEncoder(load_encoder(tiny_card(checkpoint, kind), seed=0), data, loss).eval()


def full_batch(model: BiEncoder, examples=EXAMPLES) -> dict:
    return model.make_collator()(examples, torch.Generator().manual_seed(0))


def gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
