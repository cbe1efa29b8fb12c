"""Second-stage contrastive loss (RetroMAE unified sentence representation, section 2.2, Eqs. 8-9 (2)).

Two spans of one document are positives, the other positives in the (global) batch are negatives:
L_ctr = -log exp(sim(h_i, h_i+)/tau) / sum_j exp(sim(h_i, h_j+)/tau), added to a method's loss with a weight.
The sum leaves out the positives of the anchor's own document's other segments: the examples are single segments,
so two of one document can share a batch, and one's positive (often the other segment itself) is not a negative.
The anchor h_i is the [CLS] vector of the method's own (masked) encoder pass; the positive h_i+ is the [CLS]
vector of an unmasked span of the same document: another segment of it when it has one, else a random
contiguous half of the anchor segment. sim is cosine; the paper gives no temperature, 0.05 is the default.
Negatives are gathered from all processes, so data parallelism does not shrink the negative pool.

``with_contrastive(RetroMAE, args)`` builds the subclass; it works for any method whose examples are the segments.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.distributed as dist

from retromae_ir.pretrain.collate import Segment, pad_batch
from retromae_ir.pretrain.data import SegmentExamples, document_runs
from retromae_ir.training.distributed import gather_with_grad


TEMPERATURE = 0.05  # the paper gives none


@dataclass
class ContrastiveArguments:
    contrastive_weight: float = field(default=0.0, metadata={
        "help": "weight of the contrastive loss (Eq. 9 (2) of the two-stage paper uses 1); 0 disables it"})
    temperature: float = field(default=TEMPERATURE, metadata={"help": "contrastive temperature tau (cosine "
                                                                      "similarity)"})

    def __post_init__(self):
        if self.contrastive_weight < 0 or self.temperature <= 0:
            raise ValueError("--contrastive-weight must be >= 0 and --temperature > 0")
        if self.temperature != TEMPERATURE and self.contrastive_weight == 0:  # accepted and ignored before
            raise ValueError("--temperature is the contrastive loss's, and --contrastive-weight is 0 (off)")


def info_nce(anchors: torch.Tensor, positives: torch.Tensor, temperature: float,
             documents: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 8 with cosine similarity over every process's batch: row i's positive is ``positives[i]``, the other
    (gathered) rows its negatives, except rows of the same ``documents`` entry (a document number per row). Each
    process computes the same loss over the pooled anchors and positives, with a
    gradient to its own rows only; DDP averages the W processes' gradients, so the gradient is scaled by W (the
    value stays the loss): the gradient of one process on the combined batch. (Until 2026-11-25 each process took
    its own anchors' loss only, which never pushed its positives away from the other processes' anchors.)"""
    all_anchors, _ = gather_with_grad(anchors)
    all_positives, _ = gather_with_grad(positives)
    all_anchors = torch.nn.functional.normalize(all_anchors.float(), dim=-1)
    all_positives = torch.nn.functional.normalize(all_positives.float(), dim=-1)
    scores = all_anchors @ all_positives.T / temperature
    if documents is not None:
        all_documents, _ = gather_with_grad(documents)
        same = all_documents[:, None] == all_documents[None, :]
        scores = scores.masked_fill(same & ~torch.eye(len(same), dtype=torch.bool, device=same.device), -torch.inf)
    loss = torch.nn.functional.cross_entropy(scores, torch.arange(scores.shape[0], device=scores.device))
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    return loss + (world - 1) * (loss - loss.detach())  # value: the loss; gradient: W times its own rows' share


@dataclass(frozen=True)
class NumberedSegment(Segment):
    """A segment with its row in the corpus's segments, where its document's other segments are found."""

    row: int


class NumberedSegments(SegmentExamples):
    """The corpus's segments, each with its row: the contrastive method's examples."""

    def example(self, row: int, segment: Segment) -> NumberedSegment:
        return NumberedSegment(segment.docid, segment.index, segment.input_ids, row)


class PositiveSpanCollator:
    """Wraps a method's collator and adds ``positive_input_ids`` / ``positive_attention_mask`` and each row's
    ``document`` (its number in corpus order, the same in every process). A document's segments are found by
    their rows (``data.document_runs``), not in a per-document list of every segment: that held the whole
    corpus's tokens as Python tuples, about ten times the flat table (20 GB at MS MARCO's 600M tokens)."""

    def __init__(self, collator, tokenizer, segments: Sequence[Segment]):
        self.collator = collator
        self.tokenizer = tokenizer
        self.segments = segments
        self.run_of, self.bounds = document_runs(segments)

    def positive(self, segment: NumberedSegment, generator: torch.Generator) -> tuple[int, ...]:
        """Another segment of the same document, else a random contiguous half of this one."""
        run = self.run_of[segment.row]
        others = [row for row in range(self.bounds[run], self.bounds[run + 1]) if row != segment.row]
        if others:
            return self.segments[others[int(torch.randint(len(others), (1,), generator=generator))]].input_ids
        ids = segment.input_ids
        half = max(1, len(ids) // 2)
        start = int(torch.randint(len(ids) - half + 1, (1,), generator=generator))
        return ids[start:start + half]

    def __call__(self, segments: Sequence[NumberedSegment], generator: torch.Generator) -> dict[str, torch.Tensor]:
        batch = self.collator(segments, generator)
        ids, mask = pad_batch([self.positive(s, generator) for s in segments], self.tokenizer)
        documents = torch.tensor([int(self.run_of[s.row]) for s in segments], dtype=torch.long)
        return {**batch, "positive_input_ids": ids, "positive_attention_mask": mask, "document": documents}


def with_contrastive(method_cls: type, args: ContrastiveArguments) -> type:
    """A subclass of ``method_cls`` whose total loss adds ``args.contrastive_weight * ctr``."""

    class Contrastive(method_cls):
        contrastive = args
        segments: Sequence[Segment] = ()

        def make_examples(self, segments: Sequence[Segment]) -> Sequence[Segment]:
            examples = super().make_examples(segments)
            if examples is not segments:
                raise ValueError(f"the contrastive loss needs a method trained on plain segments; "
                                 f"{method_cls.name!r} builds its own examples")
            self.segments = segments
            return NumberedSegments(segments)

        def make_collator(self):
            return PositiveSpanCollator(super().make_collator(), self.tokenizer, self.segments)

        def forward(self, batch: dict) -> dict[str, torch.Tensor]:
            encoded = self.encode(batch)
            losses = self.losses(batch, encoded)
            positive = self.encoder.bert(input_ids=batch["positive_input_ids"],
                                         attention_mask=batch["positive_attention_mask"]).last_hidden_state[:, 0]
            ctr = info_nce(encoded.cls, positive, self.contrastive.temperature, batch["document"])
            losses["loss"] = losses["loss"] + self.contrastive.contrastive_weight * ctr
            losses["ctr"] = ctr.detach()
            return losses

    Contrastive.__name__ = Contrastive.__qualname__ = f"Contrastive{method_cls.__name__}"
    return Contrastive
