"""--compile kernels (retromae_ir/encode/kernel_backbone.py, bert_kernels.c): BERT's layers on our AVX2 kernels
against transformers' own forward, on tiny random models built here; the vectors against eager's; what is refused."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

from retromae_ir import c_library
from retromae_ir.encode import EncoderModel
from retromae_ir.encode import kernel_backbone as kb
from retromae_ir.encode.first_token import first_token_only

pytestmark = pytest.mark.skipif(c_library.avx2_missing() is not None, reason="needs an x86-64 CPU with AVX2 and FMA")


def bert(layers=2, hidden=64, heads=2, intermediate=96, seed=0, **config) -> BertModel:
    """A random BERT with non-trivial LayerNorms and biases (ones and zeros would hide a forgotten one)."""
    torch.manual_seed(seed)
    model = BertModel(BertConfig(vocab_size=300, hidden_size=hidden, num_hidden_layers=layers,
                                 num_attention_heads=heads, intermediate_size=intermediate,
                                 max_position_embeddings=128, attn_implementation="eager", **config),
                      add_pooling_layer=False).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
    return model


def padded_batch(lengths, seed=1):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 300, (len(lengths), max(lengths)), generator=generator)
    mask = (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


# lengths: 1 (one token), rows that end mid-block (not multiples of 6, 8 or 16; 139 in all), one past 64 (several
# key panels)
LENGTHS = [13, 1, 67, 30, 16, 5, 7]


@pytest.mark.parametrize("threads, hidden, heads", [(1, 64, 2), (2, 64, 2), (2, 128, 2), (2, 48, 3)])
def test_every_row_equals_transformers_forward(threads, hidden, heads):
    """Heads of 32 (MiniLM's), 64 (BERT-base's) and 16 (the smallest the kernels take)."""
    model = bert(hidden=hidden, heads=heads)
    ids, mask = padded_batch(LENGTHS)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = kb.KernelBackbone(model)(input_ids=ids, attention_mask=mask).last_hidden_state
    finally:
        torch.set_num_threads(before)
    assert got.shape == expected.shape
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=2e-5, rtol=1e-5)
    assert (got[~real] == 0).all()


def test_a_trimmed_last_layer_gives_the_first_rows():
    """A [CLS]-pooled card's last layer computed for the first position only (first_token.py) stays trimmed: the
    keys and values of every token, the rest for each document's first."""
    model = bert(layers=3)
    ids, mask = padded_batch(LENGTHS)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :1]
    assert first_token_only(model.encoder, model.config)
    got = kb.KernelBackbone(model)(input_ids=ids, attention_mask=mask).last_hidden_state
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)


def test_large_scores_stay_finite_and_exact():
    """Softmax over scores far past exp's range (queries and keys scaled up): the row's max is subtracted first."""
    model = bert(layers=1, seed=3)
    with torch.no_grad():
        own = model.encoder.layer[0].attention.self
        own.query.weight.mul_(100.0)
        own.key.weight.mul_(100.0)
    ids, mask = padded_batch([40, 9])
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
    got = kb.KernelBackbone(model)(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=5e-5, rtol=1e-5)


def test_the_fused_gelu_is_the_exact_one():
    """The FFN's GELU in the product's epilogue (erf to 1.5e-7) against PyTorch's exact GELU, over the whole range
    a layer meets and past it: an identity product, so the epilogue is all that acts."""
    x = torch.linspace(-12.0, 12.0, 4800).view(-1, 16)
    identity = torch.nn.Linear(16, 16)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(16))
        identity.bias.zero_()
    got = kb.PackedProduct(identity)(x, gelu=True)
    torch.testing.assert_close(got, F.gelu(x), atol=2e-6, rtol=0)


@pytest.mark.parametrize("depth, rows", [(40, 23), (1536, 100)])  # 1536 deep: rows in 3 chunks of 42
def test_residual_and_layer_norm_fused_into_the_product(depth, rows):
    torch.manual_seed(4)
    linear, norm = torch.nn.Linear(depth, 32), torch.nn.LayerNorm(32, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        norm.bias.normal_(0.0, 0.5)
        x, residual = torch.randn(rows, depth), torch.randn(rows, 32)
        expected = norm(linear(x) + residual)
        plain = linear(x)
    product = kb.PackedProduct(linear)
    torch.testing.assert_close(product(x), plain, atol=1e-4, rtol=1e-5)
    got = product(x, out=residual.clone(), residual_norm=kb._norm(norm))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_what_the_product_would_misread_is_refused():
    product, x = kb.PackedProduct(torch.nn.Linear(24, 32)), torch.randn(5, 24)
    with pytest.raises(ValueError, match="40 outputs: the kernels take a multiple of 16"):
        kb.PackedProduct(torch.nn.Linear(24, 40))
    for bad in (x.double(), x.t().contiguous().t(), x[:, :20], x.view(1, 5, 24)):
        with pytest.raises(ValueError, match="the kernel takes fp32 CPU rows of 24 contiguous values"):
            product(bad)
    with pytest.raises(ValueError, match=r"out must be fp32 \[5, 32\]"):
        product(x, out=torch.empty(4, 32))
    with pytest.raises(ValueError, match=r"a LayerNorm over \(16,\) after 32 outputs"):
        product(x, out=torch.empty(5, 32), residual_norm=kb._norm(torch.nn.LayerNorm(16)))
    with pytest.raises(ValueError, match="heads of 8 over 32 outputs"):
        product.heads(x, 8)


def test_the_encoders_give_eager_vectors(tiny_bert_dir, tmp_path):
    """Through EncoderModel: DupMAE (every row: its OT head reads them) and a [CLS] dense card (last layer trimmed)
    give eager fp32's dense vectors and top-k terms."""
    texts = ["the cat sat on the mat", "", "protein folding in yeast cells under heat stress and cold shock", "a b"]
    cards = {"dupmae": "kind: dupmae\ndims: 32\nk: 8\nscale: 100\n", "dense": "kind: cls-dense\ndims: 32\n"}
    for name, fields in cards.items():
        card = tmp_path / f"{name}.yaml"
        card.write_text(f"checkpoint: {tiny_bert_dir}\nmax_passage_length: 32\n{fields}")
        eager = EncoderModel.from_card(card, device="cpu").encode_passage(texts)
        model = EncoderModel.from_card(card, device="cpu").compile_backbone("kernels")
        assert model.compiled == "kernels" and model.backbone_config.hidden_size == 32
        ours = model.encode_passage(texts, batch_size=3)
        np.testing.assert_allclose(ours.dense, eager.dense, atol=1e-5)
        if eager.sparse is not None:
            np.testing.assert_array_equal(ours.sparse.indptr, eager.sparse.indptr)
            np.testing.assert_array_equal(ours.sparse.indices, eager.sparse.indices)
            np.testing.assert_allclose(ours.sparse.data, eager.sparse.data, rtol=1e-5)


@pytest.mark.parametrize("change, message", [
    (dict(hidden_act="gelu_new"), "hidden_act 'gelu_new' \\(exact GELU only\\)"),
    (dict(hidden=40, heads=2), "hidden_size 40, not a multiple of 16; head size 20, not a multiple of 16"),
    (dict(intermediate=72), "intermediate_size 72, not a multiple of 16"),
    (dict(position_embedding_type="relative_key"), "position_embedding_type 'relative_key'")])
def test_what_the_kernels_would_compute_otherwise_is_refused(change, message):
    with pytest.raises(ValueError, match=f"--compile kernels runs BERT encoders only; this one has .*{message}"):
        kb.KernelBackbone(bert(layers=1, **change))


def test_another_family_is_refused():
    from transformers import RobertaConfig, RobertaModel

    model = RobertaModel(RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=64))
    with pytest.raises(ValueError, match="model_type 'roberta'"):
        kb.KernelBackbone(model)


def test_batches_it_cannot_take_are_refused():
    backbone = kb.KernelBackbone(bert(layers=1))
    ids, mask = padded_batch([4, 6])
    with pytest.raises(ValueError, match="right-padded batches of non-empty texts"):
        backbone(input_ids=ids, attention_mask=mask.flip(1))  # left padding
    with pytest.raises(ValueError, match="right-padded batches of non-empty texts"):
        backbone(input_ids=ids, attention_mask=mask * torch.tensor([[0], [1]]))  # an empty row
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ValueError, match="fp32 only"):
        backbone(input_ids=ids, attention_mask=mask)
    with pytest.raises(ValueError, match="takes input_ids and attention_mask only, not token_type_ids"):
        backbone(input_ids=ids, attention_mask=mask, token_type_ids=torch.ones_like(ids))
    assert backbone(input_ids=ids, attention_mask=mask, token_type_ids=None).last_hidden_state.shape == (2, 6, 64)


def test_bf16_cpus_without_avx2_and_no_compiler_are_refused(tiny_bert_dir, tmp_path, monkeypatch):
    """Each a ValueError naming the way out, which the encode command prints as one line (exit 2)."""
    card = tmp_path / "dense.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    with pytest.raises(ValueError, match="--compile kernels runs fp32 only"):
        EncoderModel.from_card(card, device="cpu", bf16=True).compile_backbone("kernels")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    kb.kernels.cache_clear()
    try:
        with pytest.raises(ValueError, match="needs an x86-64 CPU with AVX2 and FMA: PyTorch's CPU capability "
                                             "here is DEFAULT"):
            EncoderModel.from_card(card, device="cpu").compile_backbone("kernels")
        monkeypatch.undo()
        monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("CC", "false")
        kb.kernels.cache_clear()
        with pytest.raises(ValueError, match="could not build or load its C kernels .*use --compile openvino"):
            EncoderModel.from_card(card, device="cpu").compile_backbone("kernels")
        assert not list((tmp_path / "cache").rglob("*.so"))
    finally:
        kb.kernels.cache_clear()
