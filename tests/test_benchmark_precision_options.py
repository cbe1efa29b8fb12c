"""The precision options of the two benchmark scripts: which encoder arguments ``--dtype``/``--device`` become, and
which inputs each step of ``benchmarks/encode_search.py`` asks for (no model is loaded here)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def precision_ndcg():
    return load_script("precision_ndcg")


@pytest.fixture(scope="module")
def encode_search():
    return load_script("encode_search")


PRECISION_ARGS = ["--folder", "F", "--encoder", "dupmae-minilm", "--index-root", "R", "--index-name", "scifact"]


def test_each_precision_becomes_explicit_retriever_arguments(precision_ndcg):
    """fp32 is bf16=False, not the hardware's pick (None); the compared index is NAME-<dtype>."""
    assert precision_ndcg.retriever_options("fp32") == {"bf16": False, "int8": False}
    assert precision_ndcg.retriever_options("fp32")["bf16"] is False
    assert precision_ndcg.retriever_options("bf16") == {"bf16": True, "int8": False}
    assert precision_ndcg.retriever_options("int8") == {"bf16": False, "int8": True}
    assert precision_ndcg.index_name_of("scifact", "fp32") == "scifact"
    assert precision_ndcg.index_name_of("scifact", "bf16") == "scifact-bf16"


def test_bf16_model_is_loaded_on_the_asked_device(precision_ndcg, monkeypatch):
    from retromae_ir.encode import EncoderModel

    calls = []
    monkeypatch.setattr(EncoderModel, "from_card", classmethod(lambda cls, card, device=None, bf16=False:
                                                               calls.append((card.name, device, bf16)) or "model"))
    options = precision_ndcg.retriever_options("bf16")
    retriever = precision_ndcg.EncoderRetriever("dupmae-minilm", mode="dense", device="cpu", lucene=False, **options)
    assert retriever.model == "model" and retriever.lucene is False
    assert calls == [("dupmae-minilm", "cpu", True)]


def test_precision_device_defaults_and_int8_stays_on_the_cpu(precision_ndcg, capsys):
    args = precision_ndcg.parse_args(PRECISION_ARGS)
    assert (args.dtype, args.device, args.lucene) == ("int8", "cpu", True)
    args = precision_ndcg.parse_args(PRECISION_ARGS + ["--dtype", "bf16", "--no-lucene"])
    assert args.device == ("cuda" if torch.cuda.is_available() else "cpu") and args.lucene is False
    with pytest.raises(SystemExit):
        precision_ndcg.parse_args(PRECISION_ARGS + ["--dtype", "int8", "--device", "cuda"])
    assert "--dtype int8 runs on the CPU only" in capsys.readouterr().err


def test_encode_step_alone_needs_no_index(encode_search, capsys):
    args = encode_search.parse_args(["--corpus", "c.jsonl", "--work", "W", "--skip", "precision", "search", "sizes"])
    assert (args.index, args.device, args.dtype) == (None, "cpu", "fp32")
    with pytest.raises(SystemExit):
        encode_search.parse_args(["--corpus", "c.jsonl", "--work", "W", "--skip", "precision", "sizes"])
    assert "the search step needs --index --queries --topics --qrels" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        encode_search.parse_args(["--work", "W", "--skip", "search", "sizes"])
    assert "the encode step needs --corpus" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_encode_search_refuses_cuda_without_a_gpu(encode_search, capsys):
    with pytest.raises(SystemExit):
        encode_search.parse_args(["--corpus", "c", "--work", "W", "--device", "cuda", "--skip", "search", "sizes"])
    assert "no CUDA device" in capsys.readouterr().err


def test_splade_logits_become_fp32_where_autocast_keeps_log_in_bf16(encode_search):
    """CPU autocast leaves log in bf16, which Pyserini's SPLADE then cannot turn into numpy: its logits are cast."""

    class Head(torch.nn.Module):
        def forward(self, input_ids):
            return {"logits": input_ids.to(torch.bfloat16)}

    head = Head()
    encode_search.fp32_logits(head)
    assert head(input_ids=torch.ones(2, 3))["logits"].dtype == torch.float32


def test_the_flop_count_is_the_work_that_runs():
    """``model_flops_per_doc`` by hand on a toy encoder (d 4, FFN 8, 2 layers, 3 tokens): per token and layer the
    projections are 2 (4 d^2 + 2 d f) = 256 FLOPs and attention 2 * 2 * 3 d = 48. Trimmed to the first token, the
    last layer keeps K and V for 3 tokens (192), Q, O and the FFN for one (192) and one attention row (48)."""
    from types import SimpleNamespace

    import numpy as np

    config = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=2, vocab_size=10)
    count = load_script("encode_search").model_flops_per_doc
    tokens = np.array([3])
    assert count(config, tokens, False).tolist() == [2 * 3 * (256 + 48)]
    assert count(config, tokens, False, first_token_last_layer=True).tolist() == [3 * (256 + 48) + 192 + 192 + 48]
    assert count(config, tokens, True, np.array([1])).tolist() == [2 * 3 * (256 + 48) + 2 * (16 + 40)]


def test_one_round_is_refused_it_leaves_the_first_system_cold(encode_search, capsys):
    with pytest.raises(SystemExit):
        encode_search.parse_args(["--corpus", "c.jsonl", "--work", "W", "--rounds", "1",
                                  "--skip", "precision", "search", "sizes"])
    assert "--rounds must be at least 2" in capsys.readouterr().err


def test_pyserini_work_is_counted_at_its_padded_lengths(encode_search):
    """Pyserini pads each batch of 64 to its longest document and runs every position: its GFLOP/s counted the
    real tokens (7% less work than ran on scifact)."""
    import numpy as np

    tokens = np.array([3, 5, 2, 7, 1])
    np.testing.assert_array_equal(encode_search.padded_lengths(tokens, 2), [5, 5, 7, 7, 1])
    np.testing.assert_array_equal(tokens, [3, 5, 2, 7, 1])  # the counts themselves untouched
