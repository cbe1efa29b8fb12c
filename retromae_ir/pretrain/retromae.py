"""RetroMAE: encoder MLM + the enhanced one-layer decoder (two-stream attention, position-specific mask).

Spec: RetroMAE (unified sentence representation) section 2.1, Eqs. 4-7. The decoder reconstructs every
ordinary token of the ORIGINAL input from the encoder's [CLS] vector h:
  H1 = [h + p0, ..., h + pN]   (query stream)
  H2 = [h, e_x1 + p1, ..., e_xN + pN]   (context stream: unmasked token embeddings)
  attention: Q from H1, K/V from H2, row i sees a sampled set of whole words (never itself),
  plus position 0 for every row but row 0, and the text's [SEP] (which the authors' masks never cover).
Like the authors' code, both streams go through the encoder's embedding layer (positions, LayerNorm,
dropout), and predictions go through the encoder's tied MLM head. Total loss = L_mlm + L_dec.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.activations import ACT2FN

from retromae_ir.pretrain.base import EncoderOutput, PretrainModel, token_cross_entropy
from retromae_ir.pretrain.collate import EncoderMLMCollator, TokenTables
from retromae_ir.pretrain.masking import IGNORE_INDEX, sample_whole_words


def position_specific_mask(words: torch.Tensor, visible_ratio: float, generator: torch.Generator | None = None,
                           always_visible: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 7 as a bool [B, L, L] (True = may attend), built once per batch on ``words``' device.

    Row i sees an independently sampled ``visible_ratio`` of the ordinary tokens (whole words, never
    special tokens or padding), the ``always_visible`` positions ([B, L]: the [SEP], which the authors' code
    never masks), never itself, and position 0 ([CLS] slot, i.e. h) when i >= 1.
    Row 0 ([CLS], not a reconstruction target) falls back to position 0 only when it would see nothing.
    """
    batch, length = words.shape
    visible = sample_whole_words(words.unsqueeze(1).expand(batch, length, length), visible_ratio, generator)
    if always_visible is not None:
        visible |= always_visible.unsqueeze(1)
    visible &= ~torch.eye(length, dtype=torch.bool, device=words.device)
    visible[:, 1:, 0] = True
    # Row 0 is never a target; if its sample came out empty (very short text), let it see h rather than nothing (NaN).
    visible[:, 0, 0] = ~visible[:, 0].any(-1)
    return visible


class TwoStreamLayer(nn.Module):
    """One post-LN transformer layer whose queries come from H1 and keys/values from H2 (Eq. 5)."""

    def __init__(self, config):
        super().__init__()
        hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.ffn = nn.Sequential(nn.Linear(hidden, config.intermediate_size), ACT2FN[config.hidden_act],
                                 nn.Linear(config.intermediate_size, hidden))
        self.ffn_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.attention_dropout = config.attention_probs_dropout_prob
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=config.initializer_range)
                nn.init.zeros_(module.bias)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        return x.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)

    def forward(self, h1: torch.Tensor, h2: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(h1)), self._split(self.key(h2)), self._split(self.value(h2))
        attended = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=visible.unsqueeze(1), dropout_p=self.attention_dropout if self.training else 0.0)
        attended = attended.transpose(1, 2).reshape(h1.shape)
        x = self.attention_norm(h1 + self.dropout(self.attention_out(attended)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class RetroMAE(PretrainModel):
    """Encoder MLM + enhanced decoding of the whole input from the [CLS] vector."""

    name = "retromae"
    objective_version = 2  # 2: the decoder sees the [SEP] (2026-11-27); DupMAE inherits it

    def __init__(self, backbone, masking, method_args=None):
        super().__init__(backbone, masking, method_args)
        self.decoder = TwoStreamLayer(self.encoder.config)
        self.tables = TokenTables(self.tokenizer)

    def make_collator(self) -> EncoderMLMCollator:
        return EncoderMLMCollator(self.tokenizer, self.masking.encoder_mask_ratio)

    def decode(self, input_ids: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
        """Decoder vocabulary logits [B, L, V] for every position of the original ``input_ids``."""
        embeddings = self.encoder.bert.embeddings
        batch, length = input_ids.shape
        h1 = embeddings(inputs_embeds=cls.unsqueeze(1).expand(batch, length, cls.shape[-1]))
        h2 = torch.cat([cls.unsqueeze(1), embeddings(input_ids=input_ids)[:, 1:]], dim=1)
        visible = position_specific_mask(self.tables.words(input_ids), 1.0 - self.masking.decoder_mask_ratio,
                                         always_visible=input_ids == self.tokenizer.sep_token_id)
        return self.encoder.cls(self.decoder(h1, h2, visible))

    def losses(self, batch: dict, encoded: EncoderOutput) -> dict[str, torch.Tensor]:
        input_ids = batch["input_ids"]
        labels = torch.where(self.tables.ordinary(input_ids), input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        dec = token_cross_entropy(self.decode(input_ids, encoded.cls), labels)
        return {"loss": encoded.mlm_loss + dec, "mlm": encoded.mlm_loss.detach(), "dec": dec.detach()}
