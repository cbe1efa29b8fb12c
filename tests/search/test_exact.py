"""Exact hybrid equals brute force, and every wrong combination of index, card and queries is an error."""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from retromae_ir.encode import EncoderModel, load_card
from retromae_ir.encode.base import Encoded
from retromae_ir.encode.manifest import IndexMismatchError
from retromae_ir.search import BruteForceScorer, ExactHybridSearcher, HybridIndex


@pytest.fixture(scope="module")
def model(handful):
    """In the index's precision (`encode corpus --dtype auto`: bf16 on a CPU with AVX512_BF16), as queries must be."""
    from retromae_ir.encode.manifest import read_manifest

    return EncoderModel.from_card(handful[0], device="cpu", bf16=read_manifest(handful[1])["precision"] == "bf16")


@pytest.fixture(scope="module")
def queries(handful, model):
    """The six topics plus the six documents' own texts as queries (many near-ties)."""
    texts = [line.split("\t")[1] for line in handful[3].read_text().splitlines()]
    texts += [json.loads(line)["text"] for line in (handful[3].parent / "handful_corpus.jsonl").open()]
    return model.encode_query(texts)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
def test_exact_hybrid_equals_brute_force(handful, model, queries, mode):
    searcher = ExactHybridSearcher(handful[1], model, mode=mode, candidates=1000)
    brute = BruteForceScorer(searcher.index)
    exact_hits, brute_hits = searcher.search_encoded(queries, 6), brute.search(queries.dense, queries.sparse, 6, mode)
    for exact, reference in zip(exact_hits, brute_hits):
        if mode == "sparse":  # documents sharing no term have no sparse score: brute force lists them at 0
            reference = [hit for hit in reference if hit[1] > 0]
        assert [d for d, _ in exact] == [d for d, _ in reference]
        np.testing.assert_allclose([s for _, s in exact], [s for _, s in reference], rtol=1e-5, atol=1e-4)
        if mode == "dense":  # scored row by row on both sides: to the bit
            assert exact == reference


def test_the_dense_top_s_rows_are_read_once_in_hybrid_mode(handful, model, queries, monkeypatch):
    """Their exact scores from ``dense_top`` are reused, not read and scored again (over a scanned index each row
    is a read from disk): with every row nominated, the only reads are dense_top's, and the hits stay brute force's."""
    searcher = ExactHybridSearcher(handful[1], model, mode="hybrid", candidates=1000)
    read, vectors = [], searcher.index.dense_vectors
    monkeypatch.setattr(searcher.index, "dense_vectors", lambda rows: read.append(len(rows)) or vectors(rows))
    hits = searcher.search_encoded(queries, 6)
    assert read == [len(searcher.index)] * len(queries)
    brute = BruteForceScorer(searcher.index).search(queries.dense, queries.sparse, 6, "hybrid")
    assert [[d for d, _ in h] for h in hits] == [[d for d, _ in h] for h in brute]


def test_every_candidate_gets_its_exact_score_even_with_few_candidates(handful, model, queries):
    searcher = ExactHybridSearcher(handful[1], model, candidates=1)
    full = BruteForceScorer(searcher.index).scores(queries.dense, queries.sparse)
    position = {docid: i for i, docid in enumerate(searcher.index.docids)}
    for row, hits in zip(full, searcher.search_encoded(queries, 1)):  # the best of the union of two top-1 lists
        assert len(hits) == 1
        for docid, score in hits:
            assert score == pytest.approx(row[position[docid]], rel=1e-5, abs=1e-4)


def test_more_hits_than_candidates_raise_the_candidates(handful, model, queries):
    """Six hits at K' = 1 are brute force's six, not the union of two top-1 lists cut short (exit 0 before)."""
    searcher = ExactHybridSearcher(handful[1], model, candidates=1)
    brute = BruteForceScorer(searcher.index).search(queries.dense, queries.sparse, 6, "hybrid")
    for exact, reference in zip(searcher.search_encoded(queries, 6), brute):
        assert [d for d, _ in exact] == [d for d, _ in reference]
    with pytest.raises(ValueError, match="at least 1"):
        ExactHybridSearcher(handful[1], model, candidates=0)


def test_query_dimension_mismatch(handful, model, queries):
    searcher = ExactHybridSearcher(handful[1], model)
    with pytest.raises(IndexMismatchError, match="384-d"):
        searcher.search_encoded(Encoded(queries.dense[:, :100], queries.sparse))
    with pytest.raises(IndexMismatchError, match="vocabulary"):
        searcher.search_encoded(Encoded(queries.dense, queries.sparse[:, :100]))


@pytest.mark.parametrize("change, message", [({"scale": 50.0}, "scale"), ({"k": 32}, "k: index 64 vs card 32"),
                                             ({"dims": 128}, "dims"), ({"activation": "relu"}, "activation")])
def test_index_built_with_another_card(handful, change, message):
    card = dataclasses.replace(load_card(handful[0]), **change)
    with pytest.raises(IndexMismatchError, match=message):
        HybridIndex(handful[1], card)


def _copy(handful, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(handful[1], target, ignore=shutil.ignore_patterns(".work", "index"))
    shutil.copytree(handful[1] / "dense", target / "dense", dirs_exist_ok=True)
    return target


def test_missing_docid_file(handful, tmp_path):
    target = _copy(handful, tmp_path)
    (target / "dense" / "docid").unlink()
    with pytest.raises(IndexMismatchError, match="docid"):
        HybridIndex(target, handful[0])


def test_empty_index(handful, tmp_path):
    import faiss

    target = _copy(handful, tmp_path)
    faiss.write_index(faiss.IndexFlatIP(384), str(target / "dense" / "index"))
    (target / "dense" / "docid").write_text("")
    with pytest.raises(IndexMismatchError, match="empty"):
        HybridIndex(target, handful[0])


def test_an_index_replaced_while_it_opens_is_refused(handful, tmp_path, monkeypatch):
    """A merge into the folder while a search opens it (manifest unlinked, dense/ then sparse/ swapped) could leave
    the old faiss vectors beside the new OT store; counts alone pass when both hold as many documents."""
    from retromae_ir.io import OutputReplacedError
    from retromae_ir.search import index as index_module

    target = _copy(handful, tmp_path)
    HybridIndex(target, handful[0])  # opens as it is
    real = index_module.OTStore.open

    def merged_meanwhile(path):
        (target / "manifest.json").write_text((target / "manifest.json").read_text().replace("{", '{"merged": 1, ', 1))
        return real(path)

    monkeypatch.setattr(index_module.OTStore, "open", merged_meanwhile)
    with pytest.raises(OutputReplacedError, match="replaced by another process"):
        HybridIndex(target, handful[0])


def test_not_an_index(tmp_path, handful):
    with pytest.raises(IndexMismatchError, match="manifest"):
        HybridIndex(tmp_path, handful[0])


def test_sparse_mode_needs_a_sparse_card(handful, tmp_path):
    """A dense-only index searched in sparse mode fails up front."""
    target = _copy(handful, tmp_path)
    manifest = json.loads((target / "manifest.json").read_text())
    dense_card = dataclasses.replace(load_card(handful[0]), kind="cls-dense")
    manifest.update(card=dense_card.to_dict(), fingerprint=dense_card.fingerprint())
    (target / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="sparse side"):
        ExactHybridSearcher(target, dense_card, mode="sparse")


def test_dense_ties_at_the_cut_go_by_docid(tiny_bert_dir, tmp_path):
    """Duplicate documents have one vector: faiss breaks the tie at the k-th place by row, so the dense mode
    returned whichever duplicates faiss met first; brute force (and every other mode) cuts by docid."""
    from retromae_ir.search.retriever import EncoderRetriever

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    rows = [{"_id": f"d{i}", "title": "", "text": "the same passage"} for i in range(9, -1, -1)]  # rows d9 .. d0
    rows += [{"_id": "x1", "title": "", "text": "cells divide"}, {"_id": "x2", "title": "", "text": "the sun"}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False,
                                 bf16=False).build_index(corpus, "duplicates")
    searcher = ExactHybridSearcher(index_dir, str(card), mode="dense")
    encoded = searcher.model.encode_query(["the same passage", "cells divide"])
    brute = BruteForceScorer(searcher.index).search(encoded.dense, None, 3, "dense")
    exact = searcher.search_encoded(encoded, 3)
    for hits, reference in zip(exact, brute):
        assert [d for d, _ in hits] == [d for d, _ in reference]
        duplicates = [d for d, _ in hits if d.startswith("d")]  # at most two others can rank above the ten
        assert duplicates == [f"d{i}" for i in range(len(duplicates))]
    assert [d for d, _ in exact[0] if d.startswith("d")]  # the cut fell inside the tie
    every = [d for d, _ in searcher.search_encoded(encoded, 12)[0] if d.startswith("d")]
    assert every == [f"d{i}" for i in range(10)]


def test_documents_tied_at_the_candidate_cut_are_all_nominated(tmp_path):
    """K' = 1, two documents tied on the sparse side: argpartition nominated one of them, arbitrarily, and the
    other (the better by Eq. 12) was missed, exit 0. Every document tied at a side's cut is a candidate now."""
    import queue

    import faiss
    import scipy.sparse

    from retromae_ir.search.brute_force import top_hits
    from retromae_ir.search.dense_top import exact_top
    from retromae_ir.search.ot_store import OTStore

    dense = np.array([[0.0, 0.0], [0.5, 0.0], [0.9, 0.0]], np.float32)  # a, b, c
    sparse = scipy.sparse.csr_matrix(np.array([[1.0, 0], [1.0, 0], [0, 1.0]], np.float32))  # a and b tie

    class Index:
        docids, store, faiss_index = ["a", "b", "c"], OTStore.from_csr(sparse), faiss.IndexFlatIP(2)
        dense_top_is_exact = True

        def __len__(self):
            return 3

        def dense_top(self, queries, k):
            return exact_top(self.faiss_index.search, dense.__getitem__, queries, k, 3,
                             lambda: float(np.linalg.norm(dense, axis=1).max()))

        def check_queries(self, *args):
            pass

        def dense_vectors(self, rows):
            return dense[rows]

    index = Index()
    index.faiss_index.add(dense)
    searcher = object.__new__(ExactHybridSearcher)
    searcher.index, searcher.mode, searcher.candidates, searcher.threads = index, "hybrid", 1, 1
    searcher._buffers = queue.SimpleQueue()
    query = Encoded(np.array([[1.0, 0.0]], np.float32), scipy.sparse.csr_matrix(np.array([[1.0, 0.0]], np.float32)))
    brute = top_hits(dense @ query.dense[0] + (sparse @ query.sparse[0].T).toarray().ravel(), index.docids, 1)
    assert searcher.search_encoded(query, 1)[0] == brute == [("b", 1.5)]


def test_brute_force_scores_copies_of_a_document_alike_whatever_the_batch():
    """BLAS's matrix product rounded a row by its place and by the batch: two copies of a document (rows 7 and
    2999) scored a step apart for a third of the queries, so brute force (the documented reference) and the OT-weight
    sweep kept the later copy where the searchers keep the first by docid (exit 0)."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3000, 384)).astype(np.float32)
    vectors[2999] = vectors[7]

    class Index:
        dense, docids = vectors, [f"d{i:04d}" for i in range(3000)]

        def __len__(self):
            return 3000

        def check_queries(self, *args):
            pass

    brute = BruteForceScorer(Index())
    queries = rng.standard_normal((64, 384)).astype(np.float32)
    scores = brute.scores(queries, mode="dense")
    np.testing.assert_array_equal(scores[:, 7], scores[:, 2999])
    np.testing.assert_array_equal(brute.scores(queries[:1], mode="dense")[0], scores[0])  # a batch of one
    np.testing.assert_allclose(scores, queries @ vectors.T, rtol=1e-4, atol=1e-4)
    for hits in brute.search(queries, k=3000, mode="dense"):
        names = [docid for docid, _ in hits]
        assert names.index("d0007") + 1 == names.index("d2999")  # the copies side by side, the first by docid first
