"""A cross-encoder (any Hugging Face encoder with a 1-logit classification head) trained group-wise.

Each query's group [d+, d-_1 .. d-_{G-1}] is scored jointly with the query; the loss is the cross-entropy of
the positive against its own group (``losses.listwise_loss``), the objective of the teachers RetroMAE / SimLM
use. It plugs into ``FinetuneTrainer`` like the bi-encoder (no gathering: the groups are independent).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import torch

from retromae_ir.cli import check_at_least_one
from retromae_ir.finetune.data import TrainExample, sample_group
from retromae_ir.finetune.losses import listwise_loss
from retromae_ir.io import InputChangedError, atomic_write, cached_checkpoint_key, checkpoint_key
from retromae_ir.packaged import default_model
from retromae_ir.truncation import check_max_length

METADATA_FILE = "retromae_ir.json"


@dataclass
class CrossEncoderArguments:
    model: str | None = field(default=None, metadata={
        "help": "Hugging Face encoder or a trained cross-encoder directory (default: the packaged all-MiniLM-L6-v2; "
                "a new head is initialised, seeded)"})
    max_length: int | None = field(default=None, metadata={
        "help": "tokens of query + passage (default: the length a trained cross-encoder was trained at, from its "
                "retromae_ir.json; else 256)"})

    def __post_init__(self):
        check_at_least_one(self, "max_length")


DEFAULT_MAX_LENGTH = 256


def trained_max_length(path: str) -> int:
    """The max length ``path`` was trained at (its ``retromae_ir.json``), else :data:`DEFAULT_MAX_LENGTH`: scoring
    a teacher trained at 128 tokens at 256 gave soft labels at a length it never saw."""
    metadata = Path(path) / METADATA_FILE
    if metadata.is_file():
        length = json.loads(metadata.read_text()).get("args", {}).get("max_length")
        if isinstance(length, int) and length > 0:
            return length
    return DEFAULT_MAX_LENGTH


class PairCollator:
    """Examples -> ``size`` groups of (query, passage) pairs, query-major, the positive first."""

    def __init__(self, tokenizer, group_size: int, max_length: int):
        self.tokenizer, self.group_size, self.max_length = tokenizer, group_size, max_length

    def pairs(self, queries: list[str], passages: list[str]) -> dict[str, torch.Tensor]:
        """Longest-first truncation cuts the (usually longer) passage first, and also cuts a query too long to
        leave the passage any room, where ``only_second`` would fail the whole batch."""
        return dict(self.tokenizer(queries, passages, truncation="longest_first", max_length=self.max_length,
                                   padding=True, return_tensors="pt"))

    def __call__(self, examples: Sequence[TrainExample], generator: torch.Generator) -> dict:
        groups = [sample_group(e, self.group_size, generator) for e in examples]
        batch = self.pairs([g.query for g in groups for _ in g.passages], [p for g in groups for p in g.passages])
        return {"size": len(groups), **batch}


class CrossEncoder(torch.nn.Module):
    gathers = False
    name = "cross-encoder"

    def __init__(self, model, tokenizer, args: CrossEncoderArguments, group_size: int = 1):
        super().__init__()
        tokenizer.padding_side = "right"  # BERT's classification head reads position 0, never a pad
        self.model, self.tokenizer, self.args, self.group_size = model, tokenizer, args, group_size
        self.weights_key = None  # the checkpoint's files as loaded (load): what its scores are keyed by
        check_max_length(tokenizer, args.max_length, "--max-length", pair=True)

    @classmethod
    def load(cls, args: CrossEncoderArguments, group_size: int = 1, seed: int = 0,
             trained: bool = False) -> "CrossEncoder":
        """The model of ``args`` (the packaged MiniLM by default) with a one-logit head: a new one for training,
        drawn with ``seed``. ``trained``: refuse a checkpoint whose head would be new (scoring with a random head
        gave soft labels of noise, and distillation trained on them)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = args.model or default_model()
        if args.max_length is None:
            args = replace(args, max_length=trained_max_length(path))
        torch.manual_seed(seed)  # a new classification head is drawn from the global RNG
        before = checkpoint_key(path) if Path(str(path)).is_dir() else None  # a hub name's: after it is fetched
        model, info = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32,
                                                                          output_loading_info=True)
        if trained and info["missing_keys"]:
            raise ValueError(f"{path} is not a trained cross-encoder: its classification head would be new "
                             f"({', '.join(sorted(info['missing_keys']))} missing); score with the output of "
                             f"`python -m retromae_ir.rerank train` or another cross-encoder checkpoint")
        loaded = cls(model, AutoTokenizer.from_pretrained(path), args, group_size)
        loaded.weights_key = cached_checkpoint_key(path)  # a hub name's once its tokenizer is fetched too
        if before is not None and loaded.weights_key != before:
            raise InputChangedError(f"{path} changed while it was loaded (trained again in place?); run again once "
                                    "it is settled")
        return loaded

    def make_collator(self) -> PairCollator:
        return PairCollator(self.tokenizer, self.group_size, self.args.max_length)

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        inputs = {k: v for k, v in batch.items() if torch.is_tensor(v)}
        return {"scores": self.model(**inputs).logits.squeeze(-1)}

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict) -> dict[str, torch.Tensor]:
        return {"loss": listwise_loss(outputs["scores"].view(batch["size"], -1))}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()
    def score(self, queries: list[str], passages: list[str]) -> list[float]:
        """Scores of (query, passage) pairs, one forward pass."""
        batch = self.make_collator().pairs(queries, passages)
        return self.model(**{k: v.to(self.device) for k, v in batch.items()}).logits.squeeze(-1).float().tolist()

    def save(self, directory: str | Path, metadata: dict) -> None:
        directory = Path(directory)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        with atomic_write(directory / METADATA_FILE) as handle:
            json.dump({"method": "cross-encoder", "args": asdict(self.args), "group_size": self.group_size,
                       **metadata}, handle, indent=2, default=str)

    def after_save(self, directory: Path) -> None:
        """Nothing beyond the checkpoint: a cross-encoder has no encoder card."""
