"""Command-line arguments as dataclasses (parsed by ``transformers.HfArgumentParser``).

Each group is one concern; a method adds its own group through ``PretrainModel.Arguments``.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelArguments:
    method: str = field(metadata={"help": "pre-training method: retromae, dupmae or master"})
    model: str | None = field(default=None, metadata={
        "help": "BERT-family encoder: hub name, local directory, or one of our checkpoints to continue "
                "(its decoders.safetensors is loaded too). Default: the packaged all-MiniLM-L6-v2"})


@dataclass
class DataArguments:
    corpus: str = field(metadata={"help": "BEIR corpus.jsonl, an MS MARCO collection .tsv, JSONL with a 'text' "
                                          "field, or plain text (one doc a line)"})
    max_length: int = field(default=128, metadata={"help": "tokens per segment, [CLS] and [SEP] included"})
    tokenized_cache: str | None = field(default=None, metadata={
        "help": "tokenised-corpus file: read if it exists (and matches tokenizer + max length), else written"})


@dataclass
class MaskingArguments:
    encoder_mask_ratio: float = field(default=0.3, metadata={"help": "encoder whole-word MLM ratio (paper: 0.15-0.3)"})
    decoder_mask_ratio: float = field(default=0.5, metadata={
        "help": "share of tokens each decoder row may NOT see (paper: 0.5-0.9)"})

    def __post_init__(self):
        for name in ("encoder_mask_ratio", "decoder_mask_ratio"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(self, name)}")
