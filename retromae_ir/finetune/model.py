"""The bi-encoder being fine-tuned: an ``EncoderModel`` (the retrieval code) plus the stage's loss.

Training calls the same ``represent`` (pooling, W_cls, OT max-pool, activation, top-k) and the same
``representation.score`` (Eq. 12: dense dot + sparse dot; dense only for RetroMAE / MASTER cards) that encoding
and search use, so what is optimised is exactly what is retrieved with.

A saved checkpoint is the Hugging Face model (``BertForMaskedLM`` with its LM head for DupMAE cards, the encoder
for dense cards), the tokenizer, ``projection.safetensors`` (W_cls, when there is one), ``retromae_ir.json``, and
``card.yaml``: the input card pointing at this directory, so ``--encoder DIR/card.yaml`` works downstream.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

from retromae_ir.encode import MODEL_CLASSES, EncoderModel
from retromae_ir.encode.base import PROJECTION_FILE
from retromae_ir.encode.cards import OWN_CARD, EncoderCard
from retromae_ir.encode.representation import score
from retromae_ir.finetune.arguments import DataArguments, LossArguments
from retromae_ir.finetune.data import GroupCollator
from retromae_ir.finetune.losses import contrastive_loss, default_temperature, distillation_loss, false_negatives
from retromae_ir.io import atomic_write
from retromae_ir.training.distributed import gather_with_grad
from retromae_ir.truncation import check_max_length

METADATA_FILE = "retromae_ir.json"


def load_encoder(card: EncoderCard, seed: int = 0, attention_dropout: float | None = None) -> EncoderModel:
    """The card's EncoderModel in train mode; a fresh W_cls [dims, hidden] (orthogonal, seeded) when the
    checkpoint has none and the card's dims differ from the hidden size; ``attention_dropout`` (None: the
    checkpoint's) set on every self-attention layer. Seeded throughout: two runs of one seed save the same bytes
    (a dense card over an MLM checkpoint saved a pooler drawn from whatever the global generator held)."""
    from transformers import AutoConfig

    path = card.checkpoint_path()
    hidden = AutoConfig.from_pretrained(path).hidden_size
    fresh = card.dims != hidden and not (Path(path) / PROJECTION_FILE).is_file()
    torch.manual_seed(seed)  # what loading draws fresh (an MLM checkpoint's unused pooler), saved with the weights
    model = MODEL_CLASSES[card.kind].from_checkpoint(dataclasses.replace(card, dims=hidden) if fresh else card)
    if fresh:
        layer = torch.nn.Linear(hidden, card.dims, bias=False)
        torch.nn.init.orthogonal_(layer.weight, generator=torch.Generator().manual_seed(seed))
        model.projection = layer
        model.card = card
    if attention_dropout is not None:
        set_attention_dropout(hf_model(model), attention_dropout)
    return model.train()


def set_attention_dropout(module: torch.nn.Module, probability: float) -> int:
    """Set the dropout of every self-attention layer's probabilities (BERT-style: a ``*SelfAttention`` module whose
    ``dropout`` is an ``nn.Dropout``; its SDPA path reads ``dropout.p``) and return how many were set. The
    config is left alone, so a saved checkpoint keeps its own value. A model with no such layer is an error:
    the option would silently do nothing."""
    layers = [m for m in module.modules() if type(m).__name__.endswith("SelfAttention")
              and isinstance(getattr(m, "dropout", None), torch.nn.Dropout)]
    if not layers:
        raise ValueError(f"--attention-dropout: {type(module).__name__} has no BERT-style self-attention layer")
    for layer in layers:
        layer.dropout.p = probability
    return len(layers)


def hf_model(encoder: EncoderModel) -> torch.nn.Module:
    """The transformers module of an EncoderModel (masked LM for DupMAE, encoder otherwise)."""
    return encoder.mlm if hasattr(encoder, "mlm") else encoder.backbone


def write_card(directory: Path, card: EncoderCard, description: str) -> Path:
    """``DIR/card.yaml``: ``card`` over the checkpoint beside it (``checkpoint: .``, which ``load_card`` reads as
    the card's folder: the output stays whole when moved or copied)."""
    directory = Path(directory).resolve()
    fields = dataclasses.replace(card, name=directory.name, checkpoint=".", description=description).to_dict()
    with atomic_write(directory / OWN_CARD) as handle:
        yaml.safe_dump(fields, handle, sort_keys=False)
    return directory / OWN_CARD


class BiEncoder(torch.nn.Module):
    """``forward``: representations of a batch's queries and passages; ``loss``: the stage's objective on the
    representations of all processes' batches (gathered, gradient to the local rows)."""

    gathers = True

    def __init__(self, encoder: EncoderModel, data: DataArguments, loss: LossArguments):
        super().__init__()
        self.encoder = encoder
        self.data = data
        if loss.temperature is None:
            loss = dataclasses.replace(loss, temperature=default_temperature(encoder.card))
        for flag, weight in (("--sparse-loss-weight", loss.sparse_loss_weight),
                             ("--dense-loss-weight", loss.dense_loss_weight)):
            if weight > 0 and not (encoder.card.sparse and encoder.card.sparse_weight > 0):
                raise ValueError(f"{flag} needs a card with an OT side (DupMAE) and a positive sparse_weight (on a "
                                 f"dense card Eq. 12 is the dense side and the stage loss already trains it); card "
                                 f"{encoder.card.name!r} is kind {encoder.card.kind!r}, sparse_weight "
                                 f"{encoder.card.sparse_weight}")
        self.loss_args = loss
        self.name = f"{encoder.card.kind} stage {loss.stage}"

    @property
    def card(self) -> EncoderCard:
        return self.encoder.card

    @property
    def tokenizer(self):
        return self.encoder.tokenizer

    def make_collator(self) -> GroupCollator:
        lengths = {name: getattr(self.data, name) or getattr(self.card, name)
                   for name in ("max_query_length", "max_passage_length")}
        for name, length in lengths.items():
            check_max_length(self.tokenizer, length, f"--{name.replace('_', '-')}")
        return GroupCollator(self.tokenizer, self.data.group_size, lengths["max_query_length"],
                             lengths["max_passage_length"], self.loss_args.distill,
                             keys=self.loss_args.mask_false_negatives)

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        outputs = {}
        for side, k in (("query", self.card.query_k), ("passage", self.card.k)):
            dense, sparse = self.encoder.represent(batch[f"{side}_input_ids"], batch[f"{side}_attention_mask"], k)
            outputs[f"{side}_dense"] = dense
            if sparse is not None:
                outputs[f"{side}_sparse"] = sparse
        return outputs

    @staticmethod
    def gathered(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every process's representations (gradient to the local rows), in fp32 (under bf16 autocast the
        representations come in bf16)."""
        return {key: gather_with_grad(value)[0].float() for key, value in outputs.items()}

    def scores(self, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 12 between every (gathered) query and every (gathered) passage: [Q, Q*G]."""
        return self.eq12(self.gathered(outputs))

    @staticmethod
    def eq12(every: dict[str, torch.Tensor]) -> torch.Tensor:
        return score(every["query_dense"], every["passage_dense"], every.get("query_sparse"),
                     every.get("passage_sparse"))

    def raw_ot_scores(self, every: dict[str, torch.Tensor]) -> torch.Tensor:
        """The raw OT dot between every gathered query and passage: the OT part of Eq. 12 divided by the card's
        ``sparse_weight`` (folded into the vectors as sqrt(lambda) on each side)."""
        return score(None, None, every["query_sparse"], every["passage_sparse"]) / self.card.sparse_weight

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict) -> dict[str, torch.Tensor]:
        """The stage's objective; its parts are logged beside ``loss`` when there is more than one. The
        representations are gathered once for every term."""
        args = self.loss_args
        every = self.gathered(outputs)
        scores = self.eq12(every)
        group = scores.shape[1] // scores.shape[0]
        pool = self.pool_mask(batch, group) if args.mask_false_negatives else None

        def in_pool(matrix: torch.Tensor) -> torch.Tensor:
            return matrix if pool is None else matrix.masked_fill(pool, float("-inf"))

        parts = {"ce": contrastive_loss(in_pool(scores), group, args.temperature)}
        total = parts["ce"]
        if args.distill:
            teacher = gather_with_grad(batch["teacher"])[0]
            parts["kl"] = distillation_loss(scores, teacher, group, args.temperature, args.teacher_temperature)
            total = parts["kl"] + args.hard_label_weight * parts["ce"]
        if args.dense_loss_weight > 0:
            dense = score(every["query_dense"], every["passage_dense"], None, None)
            parts["ce_dense"] = contrastive_loss(in_pool(dense), group, args.temperature)
            total = total + args.dense_loss_weight * parts["ce_dense"]
        if args.sparse_loss_weight > 0:
            parts["ce_sparse"] = contrastive_loss(in_pool(self.raw_ot_scores(every)), group, args.sparse_temperature)
            total = total + args.sparse_loss_weight * parts["ce_sparse"]
        logged = {key: value.detach() for key, value in parts.items()} if len(parts) > 1 else {}
        return {"loss": total, **logged}

    @staticmethod
    def pool_mask(batch: dict, group: int) -> torch.Tensor:
        """[Q, Q*G] over every process's batch: True where a pool passage is one of the query's positives (its own
        or a same-text twin's; not its target): this process's rows, from its queries' positive keys against every
        passage's key, then gathered (each process's positives list may be of another length)."""
        passage_keys = gather_with_grad(batch["passage_keys"])[0]
        positive_keys = batch["positive_keys"]
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        mine = false_negatives(passage_keys, positive_keys, group, rank * positive_keys.shape[0])
        return gather_with_grad(mine.to(torch.uint8))[0].bool()

    def after_save(self, directory: Path) -> None:
        write_card(directory, self.card, f"{self.name} fine-tuning of {self.card.checkpoint} on "
                   f"{self.data.train or self.data.qrels}")

    def save(self, directory: str | Path, metadata: dict) -> None:
        """Write the checkpoint files (see the module docstring) into a fresh ``directory``; the card is written by
        the caller once the directory has its final name."""
        from safetensors.torch import save_file

        directory = Path(directory)
        hf_model(self.encoder).save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        if self.encoder.projection is not None:
            state = {k: v.detach().contiguous().cpu() for k, v in self.encoder.projection.state_dict().items()}
            save_file(state, str(directory / PROJECTION_FILE))
        with atomic_write(directory / METADATA_FILE) as handle:
            json.dump({"method": f"finetune-{self.loss_args.stage}", "card": self.card.to_dict(),
                       "data": dataclasses.asdict(self.data), "loss": dataclasses.asdict(self.loss_args),
                       **metadata}, handle, indent=2, default=str)
