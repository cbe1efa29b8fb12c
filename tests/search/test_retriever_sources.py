"""EncoderRetriever reuses an index only while the corpus and the checkpoint's weights are the ones it was built
from: a checkpoint directory trained again (same card, same fingerprint) is encoded again, and the chunks the
old weights left for resuming are not reused."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from retromae_ir.search.retriever import EncoderRetriever

from conftest import CORPUS


def dense_vectors(index_dir):
    import faiss

    index = faiss.read_index(str(index_dir / "dense" / "index"))
    return index.reconstruct_n(0, index.ntotal)


@pytest.mark.jvm
def test_retrained_checkpoint_is_encoded_again(tmp_path, tiny_bert_dir, monkeypatch):
    from transformers import BertForMaskedLM

    import retromae_ir.encode.corpus as corpus

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {checkpoint}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 32\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1)
    index_dir = retriever.build_index(CORPUS, "handful")
    before = dense_vectors(index_dir)

    calls = []
    original = corpus.encode_shard
    monkeypatch.setattr(corpus, "encode_shard", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1).build_index(
        CORPUS, "handful") == index_dir
    assert calls == []  # same sources: reused

    model = BertForMaskedLM.from_pretrained(checkpoint)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.mul_(2.0)
    model.save_pretrained(checkpoint)  # "trained again" into the same directory
    EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1).build_index(CORPUS, "handful")
    assert calls == [1]
    assert not np.allclose(dense_vectors(index_dir), before)


@pytest.mark.jvm
def test_int8_and_fp32_indexes_are_not_reused_for_each_other(tmp_path, tiny_bert_dir, monkeypatch):
    import json

    import retromae_ir.encode.corpus as corpus

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 32\n")
    calls = []
    original = corpus.encode_shard
    monkeypatch.setattr(corpus, "encode_shard", lambda *a, **k: calls.append(a[0].int8) or original(*a, **k))
    for int8 in (False, True, True, False):
        index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, int8=int8).build_index(
            CORPUS, "handful")
        assert json.loads((index_dir / "manifest.json").read_text())["int8"] is int8
    assert calls == [False, True, False]  # the second int8 build reused the int8 index, no other reuse
