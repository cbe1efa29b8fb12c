"""DupMAE (RetroMAE v2): RetroMAE's [CLS] decoding plus OT (ordinary-token) bag-of-words decoding.

Spec: DupMAE section 3.2, Eqs. 6-9. The encoder's last-layer token states are projected to the vocabulary by
the tied MLM head (W^O, Eq. 6) -- the MLM logits the encoder pass already computed, so no extra projection --
and max-pooled per vocabulary entry (Eq. 7). L_BoW is the cross-entropy of softmax(pooled) against the set of
input tokens (Eq. 8). Total = L_mlm + L_dec + w * L_BoW (Eq. 9 has w = 1, the default; the authors' code uses
w = 0.1, ``--bow-weight 0.1``).

Choices, both documented in docs/pretraining.md:
* Eq. 8 sums over set(X); we average over the set (a uniform soft target summing to 1; the authors' code weights
  each distinct token by 1/len(X)), so the term is on the scale of the other cross-entropies whatever the length.
* Pooling runs over every non-special, non-padding position (the authors' code pools [SEP] too). Eq. 6 excludes
  the positions the encoder masked: ``--bow-exclude-masked``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from retromae_ir.pretrain.base import EncoderOutput
from retromae_ir.pretrain.masking import IGNORE_INDEX
from retromae_ir.pretrain.retromae import RetroMAE


@dataclass
class DupMAEArguments:
    bow_weight: float = field(default=1.0, metadata={"help": "weight w of L_BoW (paper Eq. 9: 1; authors' code: 0.1)"})
    bow_exclude_masked: bool = field(default=False, metadata={
        "help": "max-pool only over tokens the encoder saw unmasked (paper Eq. 6) instead of all ordinary tokens"})

    def __post_init__(self):
        if self.bow_weight < 0:
            raise ValueError(f"--bow-weight must be >= 0, got {self.bow_weight}")
        if self.bow_exclude_masked and self.bow_weight == 0:  # read by the L_BoW term only
            raise ValueError("--bow-exclude-masked shapes the L_BoW term, and --bow-weight is 0")


def bow_target(input_ids: torch.Tensor, ordinary: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B, V] uniform distribution over the set of ordinary input token ids of each row."""
    target = torch.zeros(input_ids.shape[0], vocab_size, device=input_ids.device)
    target.scatter_(1, input_ids, ordinary.float())
    return target / target.sum(-1, keepdim=True).clamp(min=1.0)


def ot_vector(logits: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """Eq. 7: token-wise max of the [B, L, V] logits over the positions where ``pool`` [B, L] is True."""
    return logits.float().masked_fill(~pool.unsqueeze(-1), float("-inf")).amax(dim=1)


def bow_loss(ot: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Eq. 8 (averaged over the set, see module doc), mean over the rows with a target and a pooled position (a row
    without one is -inf throughout; a NaN row stays, so a diverged model's loss is nan, not a bow of 0)."""
    valid = (target.sum(-1) > 0) & ~torch.isneginf(ot).all(-1)
    if not bool(valid.any()):
        return ot.nan_to_num(0.0, 0.0, 0.0).sum() * 0.0
    ot, target = ot[valid], target[valid]
    return -(target * torch.log_softmax(ot, dim=-1)).sum(-1).mean()


class DupMAE(RetroMAE):
    """RetroMAE + OT bag-of-words decoding of the encoder's ordinary-token embeddings."""

    name = "dupmae"
    Arguments = DupMAEArguments

    def losses(self, batch: dict, encoded: EncoderOutput) -> dict[str, torch.Tensor]:
        losses = super().losses(batch, encoded)
        input_ids = batch["input_ids"]
        ordinary = self.tables.ordinary(input_ids)
        pool = ordinary & (batch["encoder_labels"] == IGNORE_INDEX) if self.method_args.bow_exclude_masked else ordinary
        bow = bow_loss(ot_vector(encoded.logits, pool), bow_target(input_ids, ordinary, encoded.logits.shape[-1]))
        losses["loss"] = losses["loss"] + self.method_args.bow_weight * bow
        losses["bow"] = bow.detach()
        return losses
