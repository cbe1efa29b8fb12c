"""Dense-only retrievers: RetroMAE / MASTER / any [CLS] encoder, and the mean-pooled MiniLM baseline."""
from __future__ import annotations

import torch
from transformers import AutoModel, AutoTokenizer

from retromae_ir.encode.base import EncoderModel, load_projection
from retromae_ir.encode.first_token import first_token_only
from retromae_ir.encode.representation import pool


class DenseEncoderModel(EncoderModel):
    """Pooled hidden state (``cls`` or ``mean``) times W_cls when the checkpoint has one."""

    def __init__(self, card, backbone, tokenizer, projection):
        super().__init__(card, tokenizer, projection)
        self.backbone = backbone

    @classmethod
    def from_checkpoint(cls, card):
        path = card.checkpoint_path()
        backbone = AutoModel.from_pretrained(path, dtype=torch.float32)  # trained in fp32 whatever it was saved in
        projection = load_projection(path, backbone.config.hidden_size, card.dims)
        return cls(card, backbone, AutoTokenizer.from_pretrained(path), projection)

    def _backbone(self):
        return self, "backbone"

    def _trim_for_inference(self):
        """[CLS] pooling reads one row of the last layer: compute that row only (:mod:`first_token`)."""
        if self.card.pooling == "cls":
            self.first_token_last_layer = first_token_only(getattr(self.backbone, "encoder", None),
                                                           self.backbone.config)

    def represent(self, input_ids, attention_mask, k=None):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self._dense(pool(hidden, attention_mask, self.card.pooling)), None

