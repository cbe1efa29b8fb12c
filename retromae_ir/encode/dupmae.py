"""DupMAE (RetroMAE v2): [CLS] dense vector plus the top-k ordinary-token (OT) vector (paper Eq. 10-12)."""
from __future__ import annotations

import logging

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from retromae_ir.encode.base import EncoderModel, load_projection
from retromae_ir.encode.packed_linear import PackedLinear
from retromae_ir.encode.representation import (max_pool_logits, ordinary_token_mask, pool,
                                               sparse_representation, top_k)
from retromae_ir.mlm_head import init_identity_head

logger = logging.getLogger(__name__)


class DupMAEEncoderModel(EncoderModel):
    """Masked-LM checkpoint: the encoder gives [CLS] -> W_cls; its tied LM head gives the OT vector."""

    def __init__(self, card, mlm, tokenizer, projection):
        super().__init__(card, tokenizer, projection)
        self.mlm = mlm

    @classmethod
    def from_checkpoint(cls, card):
        path = card.checkpoint_path()
        mlm, info = AutoModelForMaskedLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
        missing = init_identity_head(mlm, info)
        if missing:
            logger.warning("%s has no trained MLM head (%d missing weights): using the identity head over the tied "
                           "word embeddings (retromae_ir.mlm_head); fine for development, not a trained DupMAE",
                           path, len(missing))
        projection = load_projection(path, mlm.config.hidden_size, card.dims)
        return cls(card, mlm, AutoTokenizer.from_pretrained(path), projection)

    @property
    def lm_head(self) -> torch.nn.Module:
        return self.mlm.cls if hasattr(self.mlm, "cls") else self.mlm.lm_head

    def _backbone(self):
        return self.mlm, self.mlm.base_model_prefix  # base_model is a read-only property over this attribute

    def _pack_outside_backbone(self):
        """The LM head runs outside the compiled transformer, on the ordinary tokens' packed rows
        (``max_pool_logits``): :class:`PackedLinear` copies of its decoder (tiled there) and of its transform's
        dense layer put both on oneDNN too (the transform's ran on MKL's ``addmm`` at about 220 GFLOP/s on AMD's
        AVX-512 EPYC, runs/encode-first-token/profile-openvino-dupmae-minilm.log: 1% of the head's FLOPs). Not
        under bf16 autocast: 512 scifact documents, bf16, packed decoder 40.1 docs/s against eager's 40.7."""
        head = getattr(self.lm_head, "predictions", self.lm_head)
        if self.bf16 or not PackedLinear.available(self.device):  # aten's bf16 linear is oneDNN's already
            return
        if type(getattr(head, "decoder", None)) is torch.nn.Linear:
            head.decoder = PackedLinear.of(head.decoder)
        transform = getattr(head, "transform", None)
        if type(getattr(transform, "dense", None)) is torch.nn.Linear:
            transform.dense = PackedLinear.of(transform.dense)

    def represent(self, input_ids, attention_mask, k=None):
        hidden = self.mlm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        dense = self._dense(pool(hidden, attention_mask, self.card.pooling))
        tokens = ordinary_token_mask(input_ids, attention_mask, self.special_ids)
        sparse = sparse_representation(max_pool_logits(self.lm_head, hidden, tokens), self.card.activation,
                                       self.card.sparse_weight)
        return dense, top_k(sparse, k)
