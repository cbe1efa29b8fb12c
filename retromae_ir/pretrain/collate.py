"""Turning token segments into padded, encoder-masked batches: the part every method shares."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from retromae_ir.pretrain.masking import continuation_table, mlm_corrupt, sample_whole_words, special_table, word_ids


@dataclass(frozen=True)
class Segment:
    """One training segment: ``input_ids`` WITHOUT [CLS]/[SEP]; ``index`` is its order within document ``docid``."""

    docid: str
    index: int
    input_ids: tuple[int, ...]


class TokenTables:
    """Per-tokenizer lookups used to find words and special tokens in id tensors."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.special = special_table(tokenizer)
        self.continuation = continuation_table(tokenizer)
        self.vocab_size = len(self.special)

    def ordinary(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Bool mask of ordinary (non-special, non-padding) tokens."""
        return ~self.special.to(input_ids.device)[input_ids]

    def words(self, input_ids: torch.Tensor) -> torch.Tensor:
        return word_ids(input_ids, self.ordinary(input_ids), self.continuation)


def pad_batch(token_lists: Sequence[Sequence[int]], tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] ids [SEP] per row, right-padded: (input_ids, attention_mask)."""
    rows = [[tokenizer.cls_token_id, *ids, tokenizer.sep_token_id] for ids in token_lists]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, :len(row)] = 1
    return input_ids, attention_mask


class EncoderMLMCollator:
    """Pads segments and applies the encoder's whole-word MLM corruption (80/10/10).

    Batch keys: ``input_ids`` (original), ``attention_mask``, ``encoder_input_ids`` (corrupted),
    ``encoder_labels`` (original id at masked positions, -100 elsewhere).
    """

    def __init__(self, tokenizer, encoder_mask_ratio: float):
        self.tables = TokenTables(tokenizer)
        self.ratio = encoder_mask_ratio

    def __call__(self, segments: Sequence[Segment], generator: torch.Generator) -> dict[str, torch.Tensor]:
        tokenizer = self.tables.tokenizer
        input_ids, attention_mask = pad_batch([s.input_ids for s in segments], tokenizer)
        selected = sample_whole_words(self.tables.words(input_ids), self.ratio, generator)
        corrupted, labels = mlm_corrupt(input_ids, selected, tokenizer.mask_token_id, self.tables.vocab_size, generator)
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "encoder_input_ids": corrupted, "encoder_labels": labels}
