"""A checkpoint without an MLM head starts pre-training from the same identity head the DupMAE encoder gives it."""
from __future__ import annotations

import torch

from retromae_ir.encode.cards import load_card
from retromae_ir.encode.dupmae import DupMAEEncoderModel
from retromae_ir.pretrain.backbone import load_backbone


def test_pretraining_and_encoder_share_the_identity_head(minilm_path):
    backbone = load_backbone(minilm_path)
    assert "cls.predictions.transform.dense.weight" in backbone.new_head_keys
    head = backbone.model.cls.predictions
    assert torch.equal(head.transform.dense.weight, torch.eye(384))
    assert torch.count_nonzero(head.transform.dense.bias) == 0 and torch.count_nonzero(head.bias) == 0
    assert torch.equal(head.transform.LayerNorm.weight, torch.ones(384))
    assert head.decoder.weight.data_ptr() == backbone.model.bert.embeddings.word_embeddings.weight.data_ptr()

    encoder = DupMAEEncoderModel.from_checkpoint(load_card("dupmae-minilm"))
    hidden = torch.randn(2, 5, 384)
    with torch.no_grad():
        assert torch.allclose(backbone.model.cls(hidden), encoder.lm_head(hidden))
