"""The DupMAE representation on a tiny random BERT: top-k, activations, quantisation, padding invariance."""
import json

import numpy as np
import pytest
import torch

from retromae_ir.encode import EncoderModel, load_card
from retromae_ir.encode.packed_linear import PackedLinear
from retromae_ir.encode.cards import CardError
from retromae_ir.encode.representation import ACTIVATIONS, activation, quantize, top_k

TEXTS = ["the cat sat on the mat", "protein folding in yeast cells under heat stress", "", "a b c d e f g h i j k"]


def write_card(folder, **fields):
    path = folder / f"card-{abs(hash(tuple(sorted(fields.items()))))}.yaml"
    path.write_text("\n".join(f"{key}: {'null' if value is None else value}" for key, value in fields.items()))
    return path


@pytest.fixture(scope="module")
def tiny_card(tiny_bert_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cards")
    return write_card(folder, checkpoint=tiny_bert_dir, kind="dupmae", dims=32, k=8, query_k=None, scale=100,
                      max_query_length=16, max_passage_length=32)


@pytest.fixture(scope="module")
def tiny_model(tiny_card):
    torch.set_num_threads(1)
    return EncoderModel.from_card(tiny_card, device="cpu")


def test_top_k_keeps_exactly_the_k_largest():
    weights = torch.rand(5, 100)
    kept = top_k(weights, 7)
    for row, full in zip(kept, weights):
        nonzero = torch.nonzero(row).flatten()
        assert len(nonzero) == 7
        assert set(nonzero.tolist()) == set(full.topk(7).indices.tolist())
        assert torch.equal(row[nonzero], full[nonzero])
    assert torch.equal(top_k(weights, None), weights)
    with pytest.raises(ValueError):
        top_k(weights, 0)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_is_non_negative_and_commutes_with_max_pooling(name):
    logits = torch.randn(3, 7, 50) * 4
    act = activation(name)
    assert (act(logits) >= 0).all()
    assert torch.allclose(act(logits.amax(1)), act(logits).amax(1))


def test_quantisation_round_trip_within_half_a_step():
    weights = np.random.default_rng(0).random(1000).astype(np.float32) * 3
    for scale in (10.0, 100.0, 37.5):
        assert np.abs(quantize(weights, scale) / scale - weights).max() <= 0.5 / scale + 1e-6
    with pytest.raises(ValueError):
        quantize(weights, 0)


def test_passage_vectors_respect_k_and_are_non_negative(tiny_model):
    encoded = tiny_model.encode_passage(TEXTS, batch_size=2)
    assert encoded.dense.shape == (4, 32) and encoded.dense.dtype == np.float32
    counts = encoded.sparse.getnnz(axis=1)
    assert counts.tolist() == [8, 8, 0, 8]  # the empty text has no ordinary tokens
    assert (encoded.sparse.data > 0).all()
    query = tiny_model.encode_query(TEXTS[:2])
    assert (query.sparse.getnnz(axis=1) > 8).all()  # queries keep every positive entry by default


def test_batching_and_length_sorting_do_not_change_vectors(tiny_model):
    together = tiny_model.encode_passage(TEXTS, batch_size=4)
    for i, text in enumerate(TEXTS):
        alone = tiny_model.encode_passage([text], batch_size=1)
        np.testing.assert_allclose(alone.dense[0], together.dense[i], atol=1e-5)
        np.testing.assert_allclose(alone.sparse.toarray()[0], together.sparse.toarray()[i], atol=1e-5)


def test_special_tokens_do_not_reach_the_sparse_side(tiny_model):
    """Max pooling runs over ordinary tokens only: adding padding or a second [SEP] changes nothing."""
    ids = tiny_model.tokenizer(["cat sat"], return_tensors="pt")
    padded = torch.cat([ids["input_ids"], torch.zeros(1, 5, dtype=torch.long)], 1)
    mask = torch.cat([ids["attention_mask"], torch.zeros(1, 5, dtype=torch.long)], 1)
    with torch.no_grad():
        _, plain = tiny_model.represent(ids["input_ids"], ids["attention_mask"], None)
        _, with_pad = tiny_model.represent(padded, mask, None)
    torch.testing.assert_close(plain, with_pad, atol=1e-5, rtol=1e-5)


def test_projection_file_sets_the_dense_dimension(tiny_bert_dir, tmp_path):
    import shutil

    from safetensors.torch import save_file

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(tiny_bert_dir, checkpoint)
    weight = torch.randn(16, 32)
    save_file({"weight": weight}, str(checkpoint / "projection.safetensors"))
    model = EncoderModel.from_card(write_card(tmp_path, checkpoint=checkpoint, kind="dupmae", dims=16), device="cpu")
    encoded = model.encode_passage(["cat"])
    with torch.no_grad():
        ids = model.tokenizer(["cat"], return_tensors="pt")
        cls = model.mlm.base_model(**ids).last_hidden_state[:, 0]
    np.testing.assert_allclose(encoded.dense, (cls @ weight.T).numpy(), atol=1e-5)
    with pytest.raises(CardError, match="weight has shape"):
        EncoderModel.from_card(write_card(tmp_path, checkpoint=checkpoint, kind="dupmae", dims=8))


def test_without_projection_dims_must_equal_hidden_size(tiny_bert_dir, tmp_path):
    with pytest.raises(CardError, match="hidden size 32"):
        EncoderModel.from_card(write_card(tmp_path, checkpoint=tiny_bert_dir, kind="dupmae", dims=16))


def test_checkpoint_without_mlm_head_is_deterministic(tiny_bert_dir, tmp_path):
    """A plain BertModel (like the packaged MiniLM) gets the same head in every process, not a random one."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    checkpoint = tmp_path / "no-head"
    torch.manual_seed(1)
    BertModel(BertConfig.from_pretrained(tiny_bert_dir)).save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(checkpoint)
    card = write_card(tmp_path, checkpoint=checkpoint, kind="dupmae", dims=32)
    vectors = []
    for seed in (2, 3):
        torch.manual_seed(seed)
        vectors.append(EncoderModel.from_card(card, device="cpu").encode_passage(TEXTS[:2]).sparse.toarray())
    np.testing.assert_array_equal(*vectors)


def test_dense_kinds_have_no_sparse_side(tiny_bert_dir, tmp_path):
    model = EncoderModel.from_card(write_card(tmp_path, checkpoint=tiny_bert_dir, kind="mean-dense", dims=32,
                                              normalize="true"), device="cpu")
    encoded = model.encode_passage(TEXTS[:2])
    assert encoded.sparse is None
    np.testing.assert_allclose(np.linalg.norm(encoded.dense, axis=1), 1.0, atol=1e-5)
    assert load_card(model.card).sparse is False


def test_int8_quantises_every_linear_layer_and_keeps_the_representation_close(tiny_card, tiny_model):
    model = EncoderModel.from_card(tiny_card, device="cpu").quantize_int8()
    assert model.int8 and not any(type(m) is torch.nn.Linear for m in model.modules())
    texts = TEXTS[:2] + TEXTS[3:]
    fp32, int8 = tiny_model.encode_passage(texts), model.encode_passage(texts)
    cosine = (fp32.dense * int8.dense).sum(1) / np.linalg.norm(fp32.dense, axis=1) / np.linalg.norm(int8.dense, axis=1)
    assert cosine.min() > 0.9
    assert int8.sparse.shape == fp32.sparse.shape and (np.diff(int8.sparse.indptr) <= 8).all()


def test_int8_refuses_a_gpu_model(tiny_card):
    model = EncoderModel.from_card(tiny_card, device="meta")
    with pytest.raises(ValueError, match="CPU only, not meta"):
        model.quantize_int8()


def test_compiled_backbone_gives_the_eager_vectors(tiny_card, tiny_model):
    texts = TEXTS[:2] + TEXTS[3:]
    eager = tiny_model.encode_passage(texts)
    model = EncoderModel.from_card(tiny_card, device="cpu").compile_frozen()
    assert model.compiled and type(model.mlm.bert.compiled).__name__ == "OptimizedModule"
    assert isinstance(model.lm_head.predictions.decoder, PackedLinear)  # the head's decoder on oneDNN too,
    assert isinstance(model.lm_head.predictions.transform.dense, PackedLinear)  # and its transform's dense layer
    for _ in range(2):  # the second call reuses the compiled graph with other lengths (dynamic shapes)
        compiled = model.encode_passage(texts)
        np.testing.assert_allclose(compiled.dense, eager.dense, atol=1e-5)
        np.testing.assert_array_equal(compiled.sparse.indptr, eager.sparse.indptr)  # the same top-k terms
        np.testing.assert_array_equal(compiled.sparse.indices, eager.sparse.indices)
        np.testing.assert_allclose(compiled.sparse.data, eager.sparse.data, rtol=1e-5)
        texts = texts[:2]
        eager = tiny_model.encode_passage(texts)
    with pytest.raises(ValueError, match="int8 and --compile inductor do not combine"):
        model.quantize_int8()
    # the linear layers' weights are frozen into the graph, pre-packed: changing one no longer matters
    with torch.no_grad():
        model.mlm.bert.compiled.encoder.layer[0].intermediate.dense.weight.mul_(2.0)
    np.testing.assert_allclose(model.encode_passage(texts).dense, eager.dense, atol=1e-5)


def test_openvino_backbone_gives_the_eager_vectors(tiny_card, tiny_model, tiny_bert_dir, tmp_path):
    """--compile openvino: the transformer converted to OpenVINO (dynamic batch and length, padded batches), the OT
    head still PyTorch's; vectors and top-k terms equal eager fp32's, for DupMAE and a dense card."""
    from retromae_ir.encode.openvino_backbone import OpenVINOBackbone

    texts = TEXTS[:2] + TEXTS[3:]
    model = EncoderModel.from_card(tiny_card, device="cpu").compile_backbone("openvino")
    assert model.compiled == "openvino" and isinstance(model.mlm.bert, OpenVINOBackbone)
    assert model.backbone_config.hidden_size == tiny_model.backbone_config.hidden_size
    for batch in (texts, texts[:2], texts[2:3]):  # other batch sizes and lengths than the conversion's example
        eager, converted = tiny_model.encode_passage(batch), model.encode_passage(batch, batch_size=2)
        np.testing.assert_allclose(converted.dense, eager.dense, atol=1e-5)
        np.testing.assert_array_equal(converted.sparse.indptr, eager.sparse.indptr)
        np.testing.assert_array_equal(converted.sparse.indices, eager.sparse.indices)
        np.testing.assert_allclose(converted.sparse.data, eager.sparse.data, rtol=1e-5)
    with pytest.raises(ValueError, match="int8 and --compile openvino do not combine"):
        model.quantize_int8()
    card = tmp_path / "dense.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    eager = EncoderModel.from_card(card, device="cpu").encode_passage(texts)
    converted = EncoderModel.from_card(card, device="cpu").compile_backbone("openvino").encode_passage(texts)
    np.testing.assert_allclose(converted.dense, eager.dense, atol=1e-5)
    with pytest.raises(ValueError, match="unknown compile backend 'tvm'"):
        EncoderModel.from_card(card, device="cpu").compile_backbone("tvm")
    with pytest.raises(ValueError, match="runs on the CPU, not meta"):
        EncoderModel.from_card(card, device="meta").compile_backbone("openvino")


def test_a_left_padding_tokenizer_pads_on_the_right(tiny_bert_dir, tmp_path):
    """A checkpoint whose tokenizer config pads on the left put a pad where the [CLS] row is read, for every shorter
    text of a batch: its vector depended on its batch (exit 0). Now a text's vector is the same alone and beside a
    longer one, for the encoder and the cross-encoder."""
    import shutil

    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments

    left = tmp_path / "left"
    shutil.copytree(tiny_bert_dir, left)
    config = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    card = write_card(tmp_path, checkpoint=left, kind="cls-dense", dims=32, max_passage_length=32)
    model = EncoderModel.from_card(card, device="cpu")
    short, long = "jazz", "a much longer text about the history of jazz music in new orleans"
    np.testing.assert_allclose(model.encode_passage([short, long]).dense[0], model.encode_passage([short]).dense[0],
                               atol=1e-5)
    scorer = CrossEncoder.load(CrossEncoderArguments(str(left), max_length=32)).eval()
    assert scorer.score(["q", "q"], [short, long])[0] == pytest.approx(scorer.score(["q"], [short])[0], abs=1e-5)


def test_openvino_bf16_is_refused_where_the_cpu_plugin_lacks_it(tiny_card):
    """OpenVINO takes a bf16 hint it cannot honour silently and runs fp32: such an index was recorded as bf16
    (exit 0). Refused where the plugin lacks BF16, as on AVX2 CPUs; compiled where it has it."""
    import openvino as ov

    from retromae_ir.encode.openvino_backbone import check_bf16_support

    with pytest.raises(ValueError, match=r"needs a CPU that runs bf16 \(OpenVINO's CPU plugin offers FP32, INT8 here"):
        check_bf16_support(True, ["FP32", "INT8"])
    check_bf16_support(True, ["FP32", "BF16"])
    check_bf16_support(False, ["FP32"])
    model = EncoderModel.from_card(tiny_card, device="cpu", bf16=True)
    if "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        assert model.compile_backbone("openvino").compiled == "openvino"
    else:
        with pytest.raises(ValueError, match="--dtype bf16 with --compile openvino needs a CPU that runs bf16"):
            model.compile_backbone("openvino")


def test_openvino_keeps_one_copy_of_the_weights(tiny_bert_dir, tmp_path):
    """The converted graph holds the transformer's weights; the PyTorch module it came from is let go (it used to
    be kept for its config: the weights twice in memory), and its config still answers."""
    import gc
    import weakref

    card = tmp_path / "dense.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    model = EncoderModel.from_card(card, device="cpu")
    original = weakref.ref(model.backbone)
    model.compile_backbone("openvino")
    gc.collect()
    assert original() is None
    assert model.backbone_config.hidden_size == 32 and model.max_batch_tokens
    assert model.encode_passage(TEXTS[:2]).dense.shape == (2, 32)


def test_the_cli_refuses_compile_with_int8(capsys):
    from retromae_ir.encode.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["queries", "--encoder", "minilm-cls", "--output", "/nonexistent/out", "--topics", "/nonexistent/t.tsv",
              "--compile", "--dtype", "int8"])
    assert exit_.value.code == 2
    assert "--compile and --dtype int8 do not combine" in capsys.readouterr().err


def test_packed_linear_equals_the_linear():
    torch.manual_seed(0)
    linear = torch.nn.Linear(24, 70)
    x = torch.randn(9, 24)
    with torch.no_grad():
        torch.testing.assert_close(PackedLinear.of(linear)(x), linear(x), rtol=1e-5, atol=1e-5)
        no_bias = torch.nn.Linear(24, 70, bias=False)
        torch.testing.assert_close(PackedLinear.of(no_bias)(x), no_bias(x), rtol=1e-5, atol=1e-5)
        # bf16 rows (autocast's) against the fp32 packed weight: oneDNN refuses the pair, so aten's bf16 linear
        half = x.bfloat16()
        torch.testing.assert_close(PackedLinear.of(linear)(half),
                                   torch.nn.functional.linear(half, linear.weight.bfloat16(), linear.bias.bfloat16()))
        for layer in (linear, no_bias):  # slices of 32 outputs (the last one narrower), packed on their own
            tiles = PackedLinear.of(layer).column_tiles(32)
            assert [tile.out_features for tile in tiles] == [32, 32, 6]
            torch.testing.assert_close(torch.cat([tile(x) for tile in tiles], 1), layer(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["inductor", "openvino"])
def test_compiled_bf16_autocast_gives_the_eager_bf16_vectors(tiny_card, backend):
    """--compile under --dtype bf16 (auto's choice on CPUs with native bf16): the decoder stays aten's (bf16
    linear is oneDNN's there already), the backbone is compiled (OpenVINO's in its bf16 precision)."""
    if backend == "openvino":
        import openvino as ov

        if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            pytest.skip("OpenVINO's CPU plugin runs no bf16 here: refused (test_openvino_bf16_is_refused_...)")
    texts = TEXTS[:2] + TEXTS[3:]
    eager = EncoderModel.from_card(tiny_card, device="cpu", bf16=True).encode_passage(texts)
    model = EncoderModel.from_card(tiny_card, device="cpu", bf16=True).compile_backbone(backend)
    assert type(model.lm_head.predictions.decoder) is torch.nn.Linear
    compiled = model.encode_passage(texts)
    cosine = (eager.dense * compiled.dense).sum(1) / np.linalg.norm(eager.dense, axis=1) / np.linalg.norm(
        compiled.dense, axis=1)
    assert cosine.min() > 0.999
    overlap = [len(set(eager.sparse[i].indices) & set(compiled.sparse[i].indices)) / eager.sparse[i].nnz
               for i in range(len(texts))]
    assert min(overlap) >= 0.75 and np.mean(overlap) >= 0.9


@pytest.mark.parametrize("side", ["dense", "sparse"])
def test_a_non_finite_weight_is_refused_naming_the_text(tiny_card, side, monkeypatch):
    """faiss returns no NaN score: a NaN vector made its document unreachable (or its query hitless), exit 0."""
    model = EncoderModel.from_card(tiny_card, device="cpu")
    represent = model.represent

    def poisoned(input_ids, attention_mask, k):
        dense, sparse = represent(input_ids, attention_mask, k)
        row = (input_ids == model.tokenizer.convert_tokens_to_ids("jazz")).any(1)
        target = dense if side == "dense" else sparse
        target[row, 0] = float("nan")
        return dense, sparse

    monkeypatch.setattr(model, "represent", poisoned)
    with pytest.raises(ValueError, match=r"^text 2 of 3 \('jazz music history'\) and 0 other\(s\) of its batch "
                                         r"encoded to non-finite weights"):
        model.encode(["cells divide", "the sun is a star", "jazz music history"], 16, 8, batch_size=2)
