"""A [CLS]-pooled dense card computes the last layer for the first position only (retromae_ir/encode/first_token.py):
the vectors equal the full layer's on padded batches, under either attention mask format and every backend."""
import numpy as np
import pytest
import torch

from retromae_ir.encode import DenseEncoderModel, EncoderModel, load_card
from retromae_ir.encode.first_token import FirstTokenLayer, first_token_only

TEXTS = ["the cat sat on the mat", "protein folding in yeast cells under heat stress and a much longer tail of words",
         "", "a b c d e f g h i j k"]


@pytest.fixture(scope="module")
def cls_card(tiny_bert_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("cards") / "cls.yaml"
    path.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    return load_card(str(path))


def full_model(card, attention="sdpa"):
    model = DenseEncoderModel.from_checkpoint(card).eval()  # training's path: every layer in full
    model.backbone.config._attn_implementation = attention
    return model


@pytest.mark.parametrize("attention", ["sdpa", "eager"])  # a boolean mask, or an additive float mask
def test_the_first_row_equals_the_full_layer(cls_card, attention):
    torch.manual_seed(0)
    full = full_model(cls_card, attention)
    trimmed = EncoderModel.from_card(cls_card, device="cpu")
    trimmed.backbone.config._attn_implementation = attention
    assert isinstance(trimmed.backbone.encoder.layer[-1], FirstTokenLayer) and trimmed.first_token_last_layer
    assert not isinstance(trimmed.backbone.encoder.layer[0], FirstTokenLayer)
    assert trimmed.backbone.state_dict().keys() == full.backbone.state_dict().keys()
    for batch_size in (4, 1):  # padded batches, and single documents without padding
        expected = full.encode_passage(TEXTS, batch_size=batch_size).dense
        np.testing.assert_allclose(trimmed.encode_passage(TEXTS, batch_size=batch_size).dense, expected, atol=1e-6)
    ids = trimmed.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = trimmed.backbone(**ids).last_hidden_state
    assert hidden.shape[1] == 1  # the other rows are not computed


@pytest.mark.parametrize("backend", ["inductor", "openvino"])
def test_compiled_backends_run_the_trimmed_layer(cls_card, backend):
    expected = full_model(cls_card).encode_passage(TEXTS, batch_size=2).dense
    compiled = EncoderModel.from_card(cls_card, device="cpu").compile_backbone(backend)
    assert compiled.first_token_last_layer
    for batch_size in (2, 4):
        np.testing.assert_allclose(compiled.encode_passage(TEXTS, batch_size=batch_size).dense, expected, atol=1e-5)


def test_only_cls_pooled_dense_cards_are_trimmed(tiny_bert_dir, tmp_path):
    """Mean pooling reads every row, and DupMAE's OT side every position of the last layer."""
    for fields in ("kind: cls-dense\npooling: mean", "kind: dupmae\nk: 8"):
        card = tmp_path / "card.yaml"
        card.write_text(f"checkpoint: {tiny_bert_dir}\ndims: 32\n{fields}\n")
        model = EncoderModel.from_card(str(card), device="cpu")
        assert not any(isinstance(module, FirstTokenLayer) for module in model.modules())
        assert not model.first_token_last_layer


def tiny(kind: str, attention: str = "sdpa"):
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    config = AutoConfig.for_model(kind, vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, pad_token_id=1)
    config._attn_implementation = attention
    return AutoModel.from_config(config).eval()


def first_rows(model, trimmed: bool):
    if trimmed:
        assert first_token_only(model.encoder, model.config)
    ids = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 2, 1, 1]])
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=(ids != 1).long()).last_hidden_state[:, 0]


@pytest.mark.parametrize("kind", ["bert", "roberta", "xlm-roberta", "electra", "ernie"])
def test_the_layers_it_trims_give_the_full_first_row(kind):
    model = tiny(kind)
    full = first_rows(model, trimmed=False)
    torch.testing.assert_close(first_rows(model, trimmed=True), full, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["roberta-prelayernorm", "xlm-roberta-xl", "esm"])
def test_look_alike_layers_are_left_whole(kind):
    """Same attribute names, more work inside the attention (a LayerNorm, rotary embeddings): trimming them would
    give other vectors, so they are not trimmed."""
    model = tiny(kind)
    assert first_token_only(model.encoder, model.config) is False
    assert not any(isinstance(module, FirstTokenLayer) for module in model.modules())


def test_other_attention_implementations_are_left_whole():
    """Only eager's and sdpa's mask formats are handled (flex attention's block mask is not a tensor)."""
    model = tiny("bert", attention="flex_attention")
    assert first_token_only(model.encoder, model.config) is False
    with pytest.raises(ValueError, match="takes a .B, 1, L or 1, L. mask"):
        FirstTokenLayer(tiny("bert").encoder.layer[-1])(torch.zeros(1, 3, 32), torch.ones(1, 3))


def test_other_layers_are_left_alone():
    encoder = torch.nn.Module()
    encoder.layer = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    assert first_token_only(encoder, None) is False and isinstance(encoder.layer[0], torch.nn.Linear)
    assert first_token_only(None, None) is False
    with pytest.raises(TypeError, match="Linear is not a BERT-style encoder layer"):
        FirstTokenLayer(torch.nn.Linear(2, 2))
