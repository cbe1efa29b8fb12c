"""Corpus encoding: shards + merge give the single-process index, a rerun resumes, bad input leaves no index."""
from __future__ import annotations

import numpy as np
import pytest

from retromae_ir.encode import EncoderModel
from retromae_ir.encode.corpus import encode_shard, merge, read_corpus, shard_range
from retromae_ir.encode.manifest import IndexMismatchError, read_manifest

DOCS = [f"document {i} about {'cats' if i % 2 else 'proteins'} and topic {i * 7}" for i in range(11)]
IDS = [f"doc{i}" for i in range(11)]


@pytest.fixture(scope="module")
def dense_model(tiny_bert_dir, tmp_path_factory):
    card = tmp_path_factory.mktemp("card") / "tiny-dense.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 16\n")
    return EncoderModel.from_card(card, device="cpu")


def test_shard_ranges_cover_the_corpus_once():
    for total, shards in [(11, 3), (5, 5), (3, 4)]:
        ranges = [shard_range(total, i, shards) for i in range(shards)]
        assert ranges[0][0] == 0 and ranges[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    with pytest.raises(ValueError):
        shard_range(10, 2, 2)


def _vectors(index):
    import faiss

    flat = faiss.read_index(str(index / "dense" / "index"))
    return (index / "dense" / "docid").read_text().split(), flat.reconstruct_n(0, flat.ntotal)


def test_two_shards_merge_into_the_single_process_index(dense_model, tmp_path):
    encode_shard(dense_model, IDS, DOCS, tmp_path / "one", chunk_size=4)
    merge(tmp_path / "one", dense_model.card, dense_model.vocab)
    with pytest.raises(IndexMismatchError, match="shard 1 of 2 is not finished"):
        encode_shard(dense_model, IDS, DOCS, tmp_path / "two", 0, 2, chunk_size=4)
        merge(tmp_path / "two", dense_model.card, dense_model.vocab, shard_num=2)
    encode_shard(dense_model, IDS, DOCS, tmp_path / "two", 1, 2, chunk_size=4)
    merge(tmp_path / "two", dense_model.card, dense_model.vocab, shard_num=2)
    one, two = _vectors(tmp_path / "one"), _vectors(tmp_path / "two")
    assert one[0] == two[0] == IDS
    np.testing.assert_allclose(one[1], two[1], atol=1e-5)
    assert read_manifest(tmp_path / "two")["documents"] == 11


def test_rerun_encodes_only_missing_chunks(dense_model, tmp_path, monkeypatch):
    folder = encode_shard(dense_model, IDS, DOCS, tmp_path, chunk_size=4)
    chunks = sorted(folder.glob("chunk-*.npz"))
    assert len(chunks) == 3
    chunks[1].unlink()
    calls = []
    original = dense_model.encode_passage
    monkeypatch.setattr(dense_model, "encode_passage",
                        lambda texts, *a, **kw: calls.append(len(texts)) or original(texts, *a, **kw))
    encode_shard(dense_model, IDS, DOCS, tmp_path, chunk_size=4)
    assert calls == [4]


def test_empty_corpus_is_an_error_and_writes_no_index(tmp_path, capsys):
    from retromae_ir.encode.__main__ import main

    empty = tmp_path / "corpus.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        read_corpus(empty)
    with pytest.raises(SystemExit) as exit_:
        main(["corpus", "--encoder", "minilm-cls", "--corpus", str(empty), "--output", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "empty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_chunks_of_another_corpus_are_not_resumed_onto(dense_model, tmp_path):
    first = encode_shard(dense_model, IDS, DOCS, tmp_path, chunk_size=4)
    second = encode_shard(dense_model, IDS[:-1] + ["other"], DOCS, tmp_path, chunk_size=4)
    assert first != second and len(list(second.glob("chunk-*.npz"))) == 3
