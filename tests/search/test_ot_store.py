"""The OT store: float16 term-major postings written in two passes, read memory-mapped; exact search over it equals
brute force at its stored precision; an index written before it (sparse/vectors.npz) is still read, the same."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from retromae_ir.encode.base import Encoded
from retromae_ir.encode.cards import EncoderCard
from retromae_ir.encode.manifest import IndexMismatchError, write_manifest
from retromae_ir.search import BruteForceScorer, ExactHybridSearcher, HybridIndex
from retromae_ir.search import ot_store
from retromae_ir.search.index import store_manifest_field
from retromae_ir.search.ot_store import OTStore, StoreFormatError, write_ot_store


def random_ot(rng, rows: int, vocab: int, k: int, zipf: float = 1.0) -> scipy.sparse.csr_matrix:
    """Up to ``k`` distinct terms a row, frequent terms by a Zipf-like law, weights in (0.05, 3); some rows empty."""
    p = 1.0 / np.arange(1, vocab + 1) ** zipf
    p /= p.sum()
    indptr, indices, data = [0], [], []
    for row in range(rows):
        n = 0 if row % 17 == 5 else int(rng.integers(1, k + 1))
        terms = rng.choice(vocab, size=n, replace=False, p=p)
        indices.append(terms)
        data.append(rng.uniform(0.05, 3.0, n).astype(np.float32))
        indptr.append(indptr[-1] + n)
    return scipy.sparse.csr_matrix((np.concatenate(data), np.concatenate(indices), indptr), shape=(rows, vocab))


def as_float16(matrix):
    out = matrix.copy()
    out.data = out.data.astype(np.float16).astype(np.float32)
    return out


def test_round_trip_is_exact_and_memory_mapped(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    matrix = random_ot(rng, 300, 500, 40)
    monkeypatch.setattr(ot_store, "ROWS_PER_PASS", 7)  # many scatter passes per chunk
    chunks = [matrix[0:100], matrix[100:101], matrix[101:300]]
    meta = write_ot_store(tmp_path / "ot", lambda: iter(chunks), 500)
    assert meta["documents"] == 300 and meta["postings"] == matrix.nnz and meta["vocab"] == 500
    store = OTStore.open(tmp_path / "ot")
    assert isinstance(store.docs.base, np.memmap) and isinstance(store.weights.base, np.memmap)
    assert store.docs.dtype == np.int32 and store.weights.dtype == np.float16 and store.offsets.dtype == np.int64
    expected = matrix.tocsc()
    expected.sort_indices()
    np.testing.assert_array_equal(store.offsets, expected.indptr)
    np.testing.assert_array_equal(store.docs, expected.indices)  # document rows ascending per term
    np.testing.assert_array_equal(store.weights, expected.data.astype(np.float16))  # float16, bit for bit
    assert (store.to_csr().T != as_float16(matrix)).nnz == 0
    memory = OTStore.from_csr(matrix)  # the in-memory store of an old index holds the same arrays
    for name in ("offsets", "docs", "weights"):
        np.testing.assert_array_equal(getattr(memory, name), getattr(store, name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ot"]  # no temporary folder left


def test_accumulate_equals_scipy_bit_for_bit(tmp_path):
    rng = np.random.default_rng(1)
    matrix = random_ot(rng, 400, 300, 30)
    write_ot_store(tmp_path / "ot", lambda: [matrix], 300)
    store = OTStore.open(tmp_path / "ot")
    assert store._files is not None  # postings read from the files, not through the mapping
    memory = OTStore.from_csr(matrix)
    queries = random_ot(rng, 20, 300, 25)
    reference = (queries @ store.to_csr()).toarray()
    for q in range(20):
        row = queries[q]
        np.testing.assert_array_equal(store.scores(row.indices, row.data), reference[q])
        np.testing.assert_array_equal(memory.scores(row.indices, row.data), reference[q])


def mapped_rss_kib(folder) -> int:
    """Resident KiB of this process's mappings of the files in ``folder`` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line: range perms offset dev inode [path]
                inside = len(fields) == 6 and fields[5].startswith(str(folder))
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
def test_scoring_leaves_no_store_page_in_the_resident_set(tmp_path):
    rng = np.random.default_rng(3)
    matrix = random_ot(rng, 5000, 200, 60)  # about 1.1 MB of postings
    write_ot_store(tmp_path / "ot", lambda: [matrix], 200)
    store = OTStore.open(tmp_path / "ot")
    every_term = np.arange(200)
    scores = store.scores(every_term, np.ones(200, np.float32))  # reads the whole store
    np.testing.assert_array_equal(scores, OTStore.from_csr(matrix).scores(every_term, np.ones(200, np.float32)))
    assert mapped_rss_kib(tmp_path / "ot") == 0
    store.to_csr()  # reads the weights (284 KiB) through the mapping, which pages them in: the probe sees it
    assert mapped_rss_kib(tmp_path / "ot") >= 280


def test_a_store_truncated_after_opening_is_named(tmp_path):
    write_ot_store(tmp_path / "ot", lambda: [scipy.sparse.csr_matrix(np.ones((3, 4), np.float32))], 4)
    store = OTStore.open(tmp_path / "ot")
    path = tmp_path / "ot" / "weights.npy"
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 4)
    with pytest.raises(StoreFormatError, match="weights.npy ends before posting 12 .*encode the corpus again"):
        store.scores(np.arange(4), np.ones(4, np.float32))


def test_duplicates_are_summed_and_bad_weights_refused(tmp_path):
    duplicated = scipy.sparse.csr_matrix((np.array([1.0, 2.0, 4.0], np.float32), np.array([3, 3, 1]), [0, 2, 3]),
                                         shape=(2, 5))
    assert not duplicated.has_canonical_format
    write_ot_store(tmp_path / "ot", lambda: [duplicated], 5)
    assert OTStore.open(tmp_path / "ot").to_csr().T.toarray()[0, 3] == 3.0
    too_big = scipy.sparse.csr_matrix(np.array([[0, 1e5]], np.float32))
    with pytest.raises(ValueError, match="float16"):
        write_ot_store(tmp_path / "big", lambda: [too_big], 2)
    with pytest.raises(ValueError, match="vocabulary of 2, expected 3"):
        write_ot_store(tmp_path / "vocab", lambda: [too_big], 3)
    assert not (tmp_path / "big").exists() and not (tmp_path / "vocab").exists()


def test_a_failed_write_leaves_nothing(tmp_path):
    calls = []

    def chunks():
        calls.append(1)
        yield scipy.sparse.csr_matrix(np.ones((2, 4), np.float32))
        if len(calls) == 2:
            raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed"):
        write_ot_store(tmp_path / "ot", chunks, 4)
    assert list(tmp_path.iterdir()) == []


def test_a_newer_or_damaged_store_is_refused(tmp_path):
    write_ot_store(tmp_path / "ot", lambda: [scipy.sparse.csr_matrix(np.ones((2, 4), np.float32))], 4)
    meta = json.loads((tmp_path / "ot" / "store.json").read_text())
    (tmp_path / "ot" / "store.json").write_text(json.dumps({**meta, "version": 2}))
    with pytest.raises(StoreFormatError, match="version 2.*upgrade retromae_ir"):
        OTStore.open(tmp_path / "ot")
    (tmp_path / "ot" / "store.json").write_text(json.dumps(meta))
    (tmp_path / "ot" / "weights.npy").unlink()
    with pytest.raises(StoreFormatError, match="weights.npy is missing"):
        OTStore.open(tmp_path / "ot")


# A synthetic index (no Lucene side: the exact searcher reads only dense/ and sparse/ot/).
DIMS, VOCAB = 32, 2000


def synthetic_index(root, documents: int = 3000, seed: int = 0):
    import faiss

    rng = np.random.default_rng(seed)
    card = EncoderCard(name="synthetic", checkpoint="synthetic/none", kind="dupmae", dims=DIMS, pooling="cls",
                       normalize=False, k=60)
    dense = rng.standard_normal((documents, DIMS)).astype(np.float32) * 0.3
    sparse = random_ot(rng, documents, VOCAB, 60)
    (root / "dense").mkdir(parents=True)
    index = faiss.IndexFlatIP(DIMS)
    index.add(dense)
    faiss.write_index(index, str(root / "dense" / "index"))
    (root / "dense" / "docid").write_text("".join(f"doc-{i}\n" for i in range(documents)))
    write_ot_store(root / "sparse" / "ot", lambda: [sparse[i:i + 1000] for i in range(0, documents, 1000)], VOCAB)
    write_manifest(root, card, documents=documents, sparse_store=store_manifest_field())
    queries = Encoded(dense[:40] + rng.standard_normal((40, DIMS)).astype(np.float32) * 0.2,
                      random_ot(rng, 40, VOCAB, 30))
    return card, sparse, queries


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    return root, *synthetic_index(root)


def test_memory_mapped_search_gives_brute_force_top10(synthetic):
    root, card, _, queries = synthetic
    searcher = ExactHybridSearcher(root, card, candidates=100, threads=2)
    assert isinstance(searcher.index.store.docs.base, np.memmap)
    brute = BruteForceScorer(searcher.index)
    for mode in ("hybrid", "sparse"):
        searcher.mode = mode
        reference = brute.search(queries.dense, queries.sparse, 10, mode)
        for exact, expected in zip(searcher.search_encoded(queries, 10), reference):
            assert [d for d, _ in exact] == [d for d, _ in expected]
            np.testing.assert_allclose([s for _, s in exact], [s for _, s in expected], rtol=1e-6, atol=1e-6)


def test_dense_mode_returns_k_hits_whatever_k_prime(synthetic):
    """--mode dense --candidates 10 --hits 50: faiss's top 50, as brute force (K' nominates only for hybrid)."""
    root, card, _, queries = synthetic
    searcher = ExactHybridSearcher(root, card, mode="dense", candidates=10)
    reference = BruteForceScorer(searcher.index).search(queries.dense, queries.sparse, 50, "dense")
    for exact, expected in zip(searcher.search_encoded(queries, 50), reference):
        assert len(exact) == 50 and [d for d, _ in exact] == [d for d, _ in expected]


def test_brute_force_sparse_mode_returns_only_documents_sharing_a_term(synthetic):
    root, card, _, queries = synthetic
    brute = BruteForceScorer(HybridIndex(root, card))
    hits = brute.search(queries.dense, queries.sparse, 3000, "sparse")
    scores = brute.scores(queries.dense, queries.sparse, "sparse")
    assert [len(h) for h in hits] == [int((row > 0).sum()) for row in scores] and all(len(h) < 3000 for h in hits)


def test_brute_force_reads_the_stored_float16(synthetic):
    root, card, sparse, queries = synthetic
    index = HybridIndex(root, card)
    stored = BruteForceScorer(index).scores(queries.dense, queries.sparse, "sparse")
    np.testing.assert_array_equal(stored, (queries.sparse @ as_float16(sparse).T).toarray())
    assert not np.array_equal(stored, (queries.sparse @ sparse.T).toarray())  # float32 weights would differ


def test_docid_table(synthetic):
    root, card, _, _ = synthetic
    docids = HybridIndex(root, card).docids
    assert len(docids) == 3000 and docids[0] == "doc-0" and docids[np.int64(2999)] == "doc-2999"
    assert docids[-1] == "doc-2999" and docids[1:3] == ["doc-1", "doc-2"] and list(docids)[5] == "doc-5"
    with pytest.raises(IndexError):
        docids[3000]


def test_dense_vectors_are_a_view_of_the_faiss_index(synthetic):
    root, card, _, _ = synthetic
    index = HybridIndex(root, card)
    assert not index.dense.flags.owndata and not index.dense.flags.writeable
    np.testing.assert_array_equal(index.dense_vectors(np.array([5, 2])),
                                  index.faiss_index.reconstruct_batch(np.array([5, 2])))


def test_a_store_version_this_code_does_not_know_is_refused(synthetic, tmp_path):
    root, card, _, _ = synthetic
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["sparse_store"]["version"] = 99
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexMismatchError, match="upgrade retromae_ir"):
        HybridIndex(copy, card)


def test_an_index_written_before_the_store_is_read_the_same(handful, tmp_path, caplog):
    """The vectors.npz layout (float32 CSR, no ``sparse_store`` in the manifest) is read into memory, rounded to
    float16: the same hits and scores as the store written today."""
    card, index_dir, _, topics, _ = handful
    legacy = tmp_path / "legacy"
    shutil.copytree(index_dir, legacy, ignore=shutil.ignore_patterns("index", "collection"))
    shutil.copytree(index_dir / "dense", legacy / "dense", dirs_exist_ok=True)
    chunks = sorted(legacy.glob(".work/*/shard-0/chunk-*.npz"))
    rows = []
    for path in chunks:
        with np.load(path) as chunk:
            rows.append(scipy.sparse.csr_matrix((chunk["data"], chunk["indices"], chunk["indptr"]),
                                                shape=(len(chunk["docids"]), int(chunk["vocab"]))))
    shutil.rmtree(legacy / "sparse" / "ot")
    scipy.sparse.save_npz(legacy / "sparse" / "vectors.npz", scipy.sparse.vstack(rows, format="csr"))
    manifest = json.loads((legacy / "manifest.json").read_text())
    del manifest["sparse_store"]
    (legacy / "manifest.json").write_text(json.dumps(manifest))

    from retromae_ir.encode import EncoderModel

    model = EncoderModel.from_card(card, device="cpu", bf16=manifest["precision"] == "bf16")  # the index's
    queries = model.encode_query([line.split("\t")[1] for line in topics.read_text().splitlines()])
    with caplog.at_level(logging.WARNING):
        old = ExactHybridSearcher(legacy, model, candidates=2)
    assert "Encode it again" in caplog.text and not isinstance(old.index.store.docs.base, np.memmap)
    new = ExactHybridSearcher(index_dir, model, candidates=2)
    for name in ("offsets", "docs", "weights"):
        np.testing.assert_array_equal(getattr(old.index.store, name), getattr(new.index.store, name))
    assert old.search_encoded(queries, 6) == new.search_encoded(queries, 6)
    (legacy / "sparse" / "vectors.npz").unlink()
    with pytest.raises(IndexMismatchError, match="incomplete"):
        HybridIndex(legacy, card)


def test_top_hits_breaks_ties_at_the_cut_by_docid(synthetic):
    from retromae_ir.search.brute_force import top_hits

    scores = np.array([1, 3, 2, 2, 2, 0.5], np.float32)
    docids = ["f", "e", "d", "c", "b", "a"]
    assert top_hits(scores, docids, 3) == [("e", 3.0), ("b", 2.0), ("c", 2.0)]
    assert top_hits(scores[[0, 2, 4]], docids, 2, np.array([0, 2, 4])) == [("b", 2.0), ("d", 2.0)]
    many = np.ones(100, np.float32)  # more ties than 4 k: the first by docid, without sorting every hit
    assert top_hits(many, [f"{i:03d}" for i in range(99, -1, -1)], 3) == [("000", 1.0), ("001", 1.0), ("002", 1.0)]
    table = HybridIndex(synthetic[0], synthetic[1]).docids
    assert top_hits(scores, table, 2) == [("doc-1", 3.0), ("doc-2", 2.0)]
    assert table.take(np.array([4, 0])) == ["doc-4", "doc-0"]


@pytest.mark.parametrize("factory", ["SQfp16", "IVF8,Flat"])
def test_other_faiss_indexes_are_rescored_from_their_own_vectors(synthetic, tmp_path, factory):
    """A dense/index made by faiss.index_factory instead of the flat one: candidates are rescored from the vectors
    faiss reconstructs (float16 ones for SQfp16), and brute force reads the same, so exact stays exact at that
    precision; an IVF index searching every list nominates what the flat one does."""
    import faiss

    root, card, _, queries = synthetic
    copy = tmp_path / factory.replace(",", "-")
    shutil.copytree(root, copy)
    flat = faiss.read_index(str(root / "dense" / "index"))
    vectors = flat.reconstruct_n(0, flat.ntotal)
    index = faiss.index_factory(DIMS, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    if factory.startswith("IVF"):
        index.nprobe = index.nlist
    faiss.write_index(index, str(copy / "dense" / "index"))
    searcher = ExactHybridSearcher(copy, card, candidates=100)
    assert searcher.index._flat is None
    if factory == "SQfp16":
        stored = searcher.index.dense  # float16 values (faiss rounds some the other way than numpy)
        assert not np.array_equal(stored, vectors) and np.array_equal(stored, stored.astype(np.float16))
        np.testing.assert_allclose(stored, vectors, rtol=2 ** -10, atol=2 ** -24)
    reference = BruteForceScorer(searcher.index).search(queries.dense, queries.sparse, 10)
    for exact, expected in zip(searcher.search_encoded(queries, 10), reference):
        assert [d for d, _ in exact] == [d for d, _ in expected]
    # index_factory's default metric is L2: its distances were ranked as scores, highest first (exit 0)
    l2 = faiss.index_factory(DIMS, factory)
    l2.train(vectors)
    l2.add(vectors)
    faiss.write_index(l2, str(copy / "dense" / "index"))
    with pytest.raises(IndexMismatchError, match=r"dense/index measures METRIC_L2, not the inner product.*"
                                                 r"faiss.METRIC_INNER_PRODUCT"):
        ExactHybridSearcher(copy, card, candidates=100)
