"""A checkpoint saved in bf16 trains in fp32: transformers loads weights in the dtype they were saved in, and AdamW
on bf16 weights rounds most fine-tuning updates away (exit 0, a model barely trained)."""
import pytest
import torch
from transformers import AutoModelForMaskedLM


@pytest.fixture(scope="module")
def bf16_checkpoint(tiny_bert_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("bf16-checkpoint")
    AutoModelForMaskedLM.from_pretrained(tiny_bert_dir, dtype=torch.bfloat16).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    assert AutoModelForMaskedLM.from_pretrained(folder).dtype == torch.bfloat16  # what the loaders were given
    return folder


@pytest.mark.parametrize("kind", ["dupmae", "cls-dense"])
def test_encoders_load_a_bf16_checkpoint_in_fp32(bf16_checkpoint, tmp_path, kind):
    from retromae_ir.encode import EncoderModel

    card = tmp_path / "card.yaml"
    card.write_text(f"checkpoint: {bf16_checkpoint}\nkind: {kind}\ndims: 32\npooling: cls\nnormalize: false\n")
    model = EncoderModel.from_card(str(card), device="cpu")
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}


def test_pretraining_and_the_cross_encoder_load_a_bf16_checkpoint_in_fp32(bf16_checkpoint):
    from retromae_ir.pretrain.backbone import load_backbone
    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments

    cross = CrossEncoder.load(CrossEncoderArguments(str(bf16_checkpoint), max_length=32))
    assert {parameter.dtype for parameter in cross.parameters()} == {torch.float32}
    backbone = load_backbone(str(bf16_checkpoint))
    assert {parameter.dtype for parameter in backbone.model.parameters()} == {torch.float32}
