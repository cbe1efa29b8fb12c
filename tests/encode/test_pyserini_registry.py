"""Our encoders inside Pyserini: registered first in its encoder maps, usable by name from its CLIs."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from retromae_ir.encode import EncoderModel


@pytest.fixture(scope="module")
def tiny_card(tiny_bert_dir, tmp_path_factory):
    card = tmp_path_factory.mktemp("card") / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 8\nscale: 100\n"
                    "max_query_length: 16\nmax_passage_length: 32\n")
    return card


def test_encoder_maps_list_ours_first_and_resolve_names(tiny_card):
    import pyserini.encode as encode
    from pyserini.encode.__main__ import init_encoder
    from pyserini.search.faiss.__main__ import init_query_encoder

    from retromae_ir.encode import pyserini_registry as registry

    assert list(encode.document_encoder_class_map)[:2] == [registry.SPARSE_PREFIX, registry.DENSE_PREFIX]
    assert list(encode.query_encoder_class_map)[:2] == [registry.SPARSE_PREFIX, registry.DENSE_PREFIX]
    document = init_encoder(f"retromae_ir:{tiny_card}", None, "cpu", "cls", False, None, False, False)
    query = init_query_encoder(f"retromae_ir:{tiny_card}", None, None, None, None, "cpu", 16, "cls", False, None)
    assert isinstance(document, registry.RetroMAEDocumentEncoder)
    assert isinstance(query, registry.RetroMAEQueryEncoder)
    model = EncoderModel.from_card(tiny_card, device="cpu")
    np.testing.assert_allclose(query.encode("a cat"), model.encode_query(["a cat"]).dense[0], atol=1e-5)
    np.testing.assert_allclose(document.encode(texts=["a cat", "a dog"]), model.encode_passage(["a cat", "a dog"]).dense,
                               atol=1e-5)
    # Pyserini's JSONL reader gives an empty title as None: the text alone, as `encode corpus` encodes it
    np.testing.assert_allclose(document.encode(texts=["a cat", "a dog"], titles=[None, "pets"]),
                               model.encode_passage(["a cat", "pets a dog"]).dense, atol=1e-5)
    sparse = registry.RetroMAESparseDocumentEncoder(f"retromae_ir-sparse:{tiny_card}")
    assert sparse.encode(texts=["a cat"], titles=[None]) == sparse.encode(texts=["a cat"])
    with pytest.raises(ValueError, match="no sparse side"):
        registry.RetroMAESparseQueryEncoder(f"retromae_ir-sparse:{_dense_card(tiny_card)}")


def _dense_card(tiny_card):
    path = tiny_card.with_name("tiny-dense.yaml")
    path.write_text(tiny_card.read_text().replace("kind: dupmae", "kind: cls-dense"))
    return path


@pytest.mark.slow
def test_pyserini_encode_cli_runs_our_sparse_document_encoder(tiny_card, tmp_path):
    """``python -m pyserini.encode`` with the documented command on a BEIR-layout corpus (``_id``, ``title``,
    ``text``) writes our impacts of title + text, as ``encode corpus`` encodes them: Pyserini reads and passes
    only ``text`` unless ``--fields title text`` is given on both its input and encoder sides."""
    docs = [("d0", "cats", "the cat sat on the mat"), ("d1", "", "proteins fold in yeast"),
            ("d2", "games", "chess openings")]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    done = subprocess.run([sys.executable, "-m", "pyserini.encode", "input", "--corpus", str(corpus),
                           "--fields", "title", "text", "output", "--embeddings", str(tmp_path / "out"),
                           "encoder", "--encoder", f"retromae_ir-sparse:{tiny_card}", "--fields", "title", "text",
                           "--device", "cpu", "--batch-size", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    written = [json.loads(line) for line in (tmp_path / "out" / "embeddings.jsonl").open()]
    from retromae_ir.data.readers import joined
    from retromae_ir.encode.pyserini_registry import sparse_dicts

    model = EncoderModel.from_card(tiny_card, device="cpu")
    expected = sparse_dicts(model, model.encode_passage([joined(t, x) for _, t, x in docs]).sparse)
    assert [w["id"] for w in written] == ["d0", "d1", "d2"]
    for record, vector in zip(written, expected):
        assert record["vector"].keys() == vector.keys()
        assert all(abs(record["vector"][t] - w) <= 1 for t, w in vector.items())  # float noise at a .5 boundary


def test_the_dense_and_sparse_names_of_one_card_share_one_model(monkeypatch):
    """Pyserini's hybrid CLI builds `retromae_ir:CARD` and `retromae_ir-sparse:CARD`: one checkpoint load, not two."""
    from retromae_ir.encode import pyserini_registry
    from retromae_ir.encode.base import EncoderModel

    loads = []
    monkeypatch.setattr(EncoderModel, "from_card", classmethod(lambda cls, card, device: loads.append(card) or card))
    pyserini_registry._loaded.cache_clear()
    try:
        dense = pyserini_registry._model("retromae_ir:some-card", "cpu")
        sparse = pyserini_registry._model("retromae_ir-sparse:some-card", "cpu")
        assert dense is sparse and loads == ["some-card"]
    finally:
        pyserini_registry._loaded.cache_clear()


def test_pyserini_options_our_encoders_would_not_apply_are_refused(monkeypatch):
    """--query-prefix and --fp16 reached our encoders through ``**kwargs`` and were dropped: the run
    looked as if made with them. The defaults Pyserini always passes (prefix None, fp16 False) are accepted."""
    from types import SimpleNamespace

    from retromae_ir.encode import pyserini_registry as registry

    card = SimpleNamespace(sparse=True, name="c", kind="dupmae")
    model = SimpleNamespace(card=card, encode_passage=lambda texts, batch: SimpleNamespace(dense=len(texts)))
    monkeypatch.setattr(registry, "_model", lambda name, device: model)
    registry.RetroMAEQueryEncoder("retromae_ir:c", device="cpu", prefix=None, fp16=False)
    with pytest.raises(ValueError, match="--query-prefix 'query: ' would not be applied"):
        registry.RetroMAEQueryEncoder("retromae_ir:c", device="cpu", prefix="query: ", fp16=False)
    with pytest.raises(ValueError, match="--fp16 would not be applied"):
        registry.RetroMAESparseQueryEncoder("retromae_ir-sparse:c", device="cpu", fp16=True)
    registry.RetroMAEQueryEncoder("retromae_ir:c", device="cpu", tokenizer_name=None)  # faiss's default
    with pytest.raises(ValueError, match="--tokenizer 'bert-base-cased' would not be applied"):
        registry.RetroMAEQueryEncoder("retromae_ir:c", device="cpu", tokenizer_name="bert-base-cased")
    documents = registry.RetroMAEDocumentEncoder("retromae_ir:c", device="cpu")
    assert documents.encode(texts=["a", "b"], fp16=False, max_length=512, add_sep=False) == 2
    with pytest.raises(ValueError, match="--fp16 would not be applied"):
        documents.encode(texts=["a"], fp16=True, max_length=512, add_sep=False)
    with pytest.raises(ValueError, match="--add-sep .* would not be applied"):  # joined with a space, exit 0
        documents.encode(texts=["a"], titles=["t"], fp16=False, max_length=512, add_sep=True)
