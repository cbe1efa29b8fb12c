"""Corpus encoding: shards + merge give the single-process index, a rerun resumes, bad input leaves no index."""
from __future__ import annotations

import shutil

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


def test_merge_refuses_an_old_finished_encoding_beside_an_unfinished_new_one(dense_model, tmp_path):
    """A changed corpus whose shard 1 has not run yet: merging used to rebuild the old corpus's index from the
    finished encoding beside it and exit 0. Now it names both and leaves the old index as it was."""
    for shard in (0, 1):
        encode_shard(dense_model, IDS, DOCS, tmp_path, shard, 2, chunk_size=4)
    merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=2)
    before = read_manifest(tmp_path)
    new_ids = [f"new{i}" for i in range(11)]
    unfinished = encode_shard(dense_model, new_ids, DOCS, tmp_path, 0, 2, chunk_size=4).parent
    with pytest.raises(IndexMismatchError, match=r"shard 1 of 2 is not finished .*finished but not merged") as error:
        merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=2)
    assert str(unfinished) in str(error.value)
    assert read_manifest(tmp_path) == before and _vectors(tmp_path)[0] == IDS
    encode_shard(dense_model, new_ids, DOCS, tmp_path, 1, 2, chunk_size=4)
    with pytest.raises(IndexMismatchError, match="2 finished encodings"):
        merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=2)


@pytest.mark.parametrize("newer", ["another shard count", "one process"])
def test_merge_refuses_an_older_encoding_when_one_of_other_documents_came_after_it(dense_model, tmp_path, newer):
    """Corpus A in 3 shards, then corpus B (2 shards, or one process) merged: `merge --shard-num 3` used to rebuild
    A's index over B's, exit 0 (only folders of the asked shard count were looked at). Now it names B."""
    for shard in range(3):
        encode_shard(dense_model, IDS, DOCS, tmp_path, shard, 3, chunk_size=4)
    new_ids, new_docs = IDS[:7], DOCS[:7]
    shards = 2 if newer == "another shard count" else 1
    for shard in range(shards):
        encode_shard(dense_model, new_ids, new_docs, tmp_path, shard, shards, chunk_size=4)
    merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=shards)
    before = read_manifest(tmp_path)
    with pytest.raises(IndexMismatchError, match=rf"7 documents.*{shards} shard\(s\)\) was started after .*--shard-num "
                                                 rf"{shards}\)"):
        merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=3)
    assert read_manifest(tmp_path) == before and _vectors(tmp_path)[0] == new_ids
    encode_shard(dense_model, IDS, DOCS, tmp_path, 0, 3, chunk_size=4)  # a shard of A run again: B stays the newer
    with pytest.raises(IndexMismatchError, match="was started after"):
        merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=3)
    # B's chunks removed (to free disk once merged): B's index is still the newer, so A is not put over it
    shutil.rmtree(next(p for p in (tmp_path / ".work").glob(f"*-of-{shards}")))
    with pytest.raises(IndexMismatchError, match=r"holds an index of other vectors \(7 documents, fp32\) written after "
                                                 r".*remove .*manifest.json"):
        merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=3)
    assert read_manifest(tmp_path) == before and _vectors(tmp_path)[0] == new_ids
    (tmp_path / "manifest.json").unlink()  # B's index given up: A is the one meant
    merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=3)
    assert _vectors(tmp_path)[0] == IDS
    merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=3)  # merging the same vectors again is no conflict


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


@pytest.fixture(scope="module")
def dupmae_model(tiny_bert_dir, tmp_path_factory):
    card = tmp_path_factory.mktemp("card") / "tiny-dupmae.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 12\nmax_passage_length: 16\n")
    return EncoderModel.from_card(card, device="cpu")


def test_merge_streams_shards_of_several_chunks_into_the_one_pass_sparse_index(dupmae_model, tmp_path):
    """merge reads the chunks one at a time (two shards of two chunks each here); the OT store and the
    JsonVectorCollection equal those of the whole corpus encoded at once, rows in corpus order."""
    import json

    from retromae_ir.encode.representation import impact_dicts
    from retromae_ir.search.ot_store import OTStore

    for shard in (1, 0):
        encode_shard(dupmae_model, IDS, DOCS, tmp_path, shard, 2, chunk_size=3)
    assert len(list((tmp_path / ".work").glob("*/shard-*/chunk-*.npz"))) == 4
    merge(tmp_path, dupmae_model.card, dupmae_model.vocab, shard_num=2)
    whole = dupmae_model.encode_passage(DOCS).sparse
    stored, expected = OTStore.open(tmp_path / "sparse" / "ot"), OTStore.from_csr(whole)
    for name in ("offsets", "docs", "weights"):
        np.testing.assert_array_equal(np.asarray(getattr(stored, name)), getattr(expected, name))
    lines = [json.loads(line) for line in (tmp_path / "sparse" / "collection" / "docs.jsonl").open()]
    assert [line["id"] for line in lines] == IDS
    assert [line["vector"] for line in lines] == impact_dicts(whole, dupmae_model.vocab, dupmae_model.card.scale)
    manifest = read_manifest(tmp_path)
    assert manifest["documents"] == 11 and manifest["sparse_postings"] == whole.nnz == 11 * 12
    assert _vectors(tmp_path)[0] == IDS


def test_a_resume_with_another_chunk_size_gives_the_corpus_once(dense_model, tmp_path):
    """Chunks are named by their first document: a run interrupted at chunk size 3 and resumed at 4 must not mix
    the two (that gave 12 rows for 11 documents); chunks that do not tile the corpus are refused at merge."""
    import shutil

    first = encode_shard(dense_model, IDS, DOCS, tmp_path / "out", chunk_size=3)
    (first / "DONE").unlink()  # interrupted after its chunks 0 and 3
    for chunk in sorted(first.glob("chunk-*.npz"))[2:]:
        chunk.unlink()
    second = encode_shard(dense_model, IDS, DOCS, tmp_path / "out", chunk_size=4)
    assert second != first
    merge(tmp_path / "out", dense_model.card, dense_model.vocab)  # the abandoned chunk size-3 attempt: no conflict
    assert _vectors(tmp_path / "out")[0] == IDS and read_manifest(tmp_path / "out")["documents"] == 11

    threes = encode_shard(dense_model, IDS, DOCS, tmp_path / "mixed", chunk_size=3)
    fours = encode_shard(dense_model, IDS, DOCS, tmp_path / "fours", chunk_size=4)
    shutil.copy(fours / "chunk-000000000004.npz", threes)  # overlaps documents 4-5 of chunk 3
    with pytest.raises(IndexMismatchError, match="starts at document 4, the chunks before it end at 6"):
        merge(tmp_path / "mixed", dense_model.card, dense_model.vocab, work=threes.parent)
    (threes / "chunk-000000000004.npz").unlink()
    (threes / "chunk-000000000009.npz").unlink()  # a gap at the end
    with pytest.raises(IndexMismatchError, match="hold 9 documents, the corpus has 11"):
        merge(tmp_path / "mixed", dense_model.card, dense_model.vocab, work=threes.parent)
    assert not (tmp_path / "mixed" / "dense").exists()


def test_a_work_folder_from_before_the_started_record_keeps_its_age(dense_model, tmp_path):
    """Old encoding A (no 'started' record), newer B; A's last shard run under this code must not make A the newer
    (its record is seeded from A's first sources.json, not from now)."""
    import os

    from retromae_ir.encode.corpus import STARTED

    encode_shard(dense_model, IDS, DOCS, tmp_path, 0, 2, chunk_size=4)
    old = next((tmp_path / ".work").glob("*-of-2"))
    (old / STARTED).unlink()  # as a folder written before the record
    os.utime(old / "sources.json", ns=(10**9, 10**9))  # long ago
    for shard in (0, 1):
        encode_shard(dense_model, IDS[:7], DOCS[:7], tmp_path, shard, 2, chunk_size=4)  # B, newer
    encode_shard(dense_model, IDS, DOCS, tmp_path, 1, 2, chunk_size=4)  # A finished now
    assert int((old / STARTED).read_text()) == 10**9
    with pytest.raises(IndexMismatchError, match="2 finished encodings"):  # both finished, same shard count
        merge(tmp_path, dense_model.card, dense_model.vocab, shard_num=2)


@pytest.mark.parametrize("vocab, message", [
    (["[PAD]", "cat", "cat"], r"tokens 1 and 2 are both 'cat': as Lucene terms of the sparse side their weights "
                              r"would become one term's"),
    (["[PAD]", "ice cream"], r"token 1 \('ice cream'\) cannot be a Lucene term"),  # split in documents only
    (["[PAD]", None], r"token 1 \(None\) cannot be a Lucene term"),
])
def test_a_vocabulary_lucene_cannot_hold_is_refused_before_the_index_is_touched(dupmae_model, tmp_path, vocab,
                                                                             message):
    """impact_dicts kept one of two ids' weights under one string (the exact searcher's store kept both), and a
    term with whitespace was split by Lucene's analyzer in documents but sent whole by queries: exit 0 both."""
    from retromae_ir.encode.representation import check_lucene_terms

    with pytest.raises(ValueError, match=message):
        check_lucene_terms(vocab, "tiny")
    encode_shard(dupmae_model, IDS, DOCS, tmp_path, chunk_size=4)
    with pytest.raises(ValueError, match="card tiny-dupmae's tokenizer: " + message):
        merge(tmp_path, dupmae_model.card, vocab)
    assert not (tmp_path / "dense").exists() and not (tmp_path / "sparse").exists()
    merge(tmp_path, dupmae_model.card, vocab, lucene=False)  # the exact searcher's store is read by term id


def test_the_vocabulary_is_checked_where_it_becomes_lucene_terms(dupmae_model, minilm_path, monkeypatch):
    from transformers import AutoTokenizer

    from retromae_ir.encode.base import vocab_of
    from retromae_ir.encode.representation import check_lucene_terms

    minilm = AutoTokenizer.from_pretrained(minilm_path)
    assert len(check_lucene_terms(vocab_of(minilm), "MiniLM")) == len(minilm) == 30522
    assert len(dupmae_model.lucene_terms) == len(dupmae_model.tokenizer)  # the tiny WordPiece vocabulary passes
    monkeypatch.setattr("retromae_ir.encode.base.vocab_of", lambda tokenizer: ["[PAD]", "a", "a"])
    for name in ("vocab", "lucene_terms"):  # functools.cached_property: read again, and forgotten afterwards
        monkeypatch.delitem(dupmae_model.__dict__, name, raising=False)
    assert dupmae_model.vocab == ["[PAD]", "a", "a"]  # read by id (the exact searcher): not checked
    with pytest.raises(ValueError, match="card tiny-dupmae's tokenizer: tokens 1 and 2 are both 'a'"):
        dupmae_model.lucene_terms


def test_the_dense_index_is_written_chunk_by_chunk_as_faiss_add_writes_it(tmp_path):
    """``write_dense`` writes the index file a chunk at a time (faiss built it in memory: 25.2 GiB for MS MARCO at
    768 dimensions) with the bytes ``add`` chunk by chunk and ``write_index`` write; chunks that hold another count
    than the documents recorded, or another width than the card's, are refused."""
    import faiss

    from retromae_ir.encode.cards import EncoderCard
    from retromae_ir.encode.corpus import write_dense

    card = EncoderCard(name="t", checkpoint="x", kind="cls-dense", dims=8)
    vectors = np.random.default_rng(0).standard_normal((11, 8)).astype(np.float32)
    chunks = [([f"d{i}" for i in range(start, min(start + 4, 11))], vectors[start:start + 4])
              for start in range(0, 11, 4)]
    (tmp_path / "ours").mkdir()
    assert write_dense(tmp_path / "ours", card, iter(chunks), 11) == 11
    added = faiss.IndexFlatIP(8)
    for _, dense in chunks:
        added.add(dense)
    faiss.write_index(added, str(tmp_path / "added"))
    assert (tmp_path / "ours" / "index").read_bytes() == (tmp_path / "added").read_bytes()
    assert (tmp_path / "ours" / "docid").read_text().split() == [f"d{i}" for i in range(11)]
    for recorded, message in ((12, "the 12 documents recorded: 11 rows, the index was opened for 12"),
                              (10, "the 10 documents recorded: more than the 10 rows")):
        (tmp_path / f"n{recorded}").mkdir()
        with pytest.raises(IndexMismatchError, match=message):
            write_dense(tmp_path / f"n{recorded}", card, iter(chunks), recorded)
    (tmp_path / "wide").mkdir()
    with pytest.raises(IndexMismatchError, match=r"card 't' \(8 dimensions\).*vectors of shape \(4, 9\) for a 8-d"):
        write_dense(tmp_path / "wide", card, iter([(["a"] * 4, np.zeros((4, 9), np.float32))]), 4)


def test_a_dense_vector_that_is_not_finite_is_refused_naming_its_document(tmp_path):
    """A NaN (or a float64 past float32's range, infinite once cast) in a document's vector: no search could rank
    it, so the merge stops naming the document, not as a width or count mismatch."""
    from retromae_ir.encode.cards import EncoderCard
    from retromae_ir.encode.corpus import write_dense
    from retromae_ir.flat_index import NonFiniteRowError

    card = EncoderCard(name="t", checkpoint="x", kind="cls-dense", dims=4)
    for bad in (np.nan, 1e39):
        vectors = np.ones((6, 4))
        vectors[5, 1] = bad
        chunks = [(["a", "b", "c"], vectors[:3]), (["d", "e", "f"], vectors[3:])]
        folder = tmp_path / str(bad)
        folder.mkdir()
        with pytest.raises(NonFiniteRowError, match=r"document 'f''s dense vector, .*index: row 5 is not finite"):
            write_dense(folder, card, iter(chunks), 6)
