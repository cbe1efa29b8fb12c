"""A flat index's exact top k: faiss nominates on its fast route, rows are scored again as brute force scores
them, and a rounding bound decides whether a query must be searched again deeper."""
from __future__ import annotations

import faiss
import numpy as np
import pytest

from retromae_ir.flat_index import blas_sized
from retromae_ir.search.brute_force import top_positions
from retromae_ir.search.dense_top import dense_scores, exact_top, rounding_bound


@pytest.fixture
def one_thread():
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _index(vectors):
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index


def _max_norm(vectors):
    return lambda: float(np.linalg.norm(vectors, axis=1).max())


def test_the_rounding_bound_holds_between_faiss_s_blas_route_and_row_by_row():
    rng = np.random.default_rng(0)
    vectors = (rng.standard_normal((3000, 768)) * rng.uniform(0.1, 10, (3000, 1))).astype(np.float32)
    queries = rng.standard_normal((200, 768)).astype(np.float32)
    blas, rows = _index(vectors).search(queries, 3000)
    exact = np.take_along_axis(dense_scores(vectors, queries), rows, 1)
    if (blas == exact).all():
        pytest.skip("this BLAS rounds as row by row does: nothing to bound")
    bound = rounding_bound(768, np.linalg.norm(queries, axis=1), _max_norm(vectors)())
    assert (np.abs(blas.astype(np.float64) - exact) <= bound[:, None]).all()
    assert bound[0] == pytest.approx(2.02 * 768 * 2.0 ** -24 / (1 - 768 * 2.0 ** -24) *
                                     np.linalg.norm(queries[0]) * _max_norm(vectors)(), rel=1e-6)


def test_copies_that_blas_scores_apart_tie_and_the_cut_goes_by_row_order_as_brute_force(one_thread):
    """runs/flat-index-mmap/blas_copies.py's set-up: faiss's BLAS route scores some of 40 copied rows a step
    apart from their originals (with 1 thread); rescored, every copy ties with its original, and each query's top
    k is brute force's (ties at the cut by row, standing in for docid order)."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((2048, 768)).astype(np.float32)
    copies = list(range(1023, 983, -1))
    vectors[copies] = vectors[:40]
    queries = rng.standard_normal((200, 768)).astype(np.float32)
    queries[:40] = vectors[:40] + 0.01 * rng.standard_normal((40, 768)).astype(np.float32)  # copies at the top
    index = _index(vectors)
    blas, rows = index.search(queries, 2048)
    scored = [dict(zip(r.tolist(), s.tolist())) for s, r in zip(blas, rows)]
    if all(score[o] == score[c] for score in scored for o, c in zip(range(40), copies)):
        pytest.skip("this BLAS scores the copies alike (OpenBLAS with 1 thread did not)")
    searched = []

    def search(batch, width):
        searched.append(len(batch))
        return index.search(blas_sized(batch), width)

    found = exact_top(search, vectors.__getitem__, queries, 1, 2048, _max_norm(vectors))
    assert searched[0] == 200  # one search of the batch, on faiss's BLAS route
    brute = dense_scores(vectors, queries)
    for q, (scores, nominated) in enumerate(found):
        np.testing.assert_array_equal(scores, brute[q][nominated])
        best = nominated[top_positions(scores, list(range(2048)), 1, nominated)]
        assert best.tolist() == top_positions(brute[q], list(range(2048)), 1).tolist()
        if q < 40:
            assert {q, copies[q]} <= set(nominated[scores == scores.max()].tolist())
            assert best.tolist() == [q]


def test_a_query_whose_kth_score_is_within_the_bound_of_the_last_nominee_is_searched_again_deeper():
    """100 rows within a few rounding steps of each other: nothing can prove the top 1 among them short of
    scoring all, so the query is searched again twice as deep until it holds every row; a clear winner settles
    the other query in the first search."""
    rng = np.random.default_rng(1)
    base = rng.standard_normal(64).astype(np.float32)
    vectors = np.repeat(base[None], 100, 0)
    vectors[:, 0] += np.arange(100, dtype=np.float32) * np.spacing(base[0]) * 4
    vectors[99] = base * 3  # far ahead for the query `base`
    queries = np.stack([base, -base]).astype(np.float32)
    index, searched = _index(vectors), []

    def search(batch, width):
        searched.append((len(batch), width))
        return index.search(batch, width)

    found = exact_top(search, vectors.__getitem__, queries, 1, 100, _max_norm(vectors))
    assert searched == [(2, 17), (1, 34), (1, 68), (1, 100)]
    brute = dense_scores(vectors, queries)
    assert len(found[1][1]) == 100 and len(found[0][1]) == 17
    for q, (scores, nominated) in enumerate(found):
        np.testing.assert_array_equal(scores, brute[q][nominated])
        best = set(np.flatnonzero(brute[q] == brute[q].max()).tolist())  # rows rounding to one score tie
        assert set(nominated[scores == scores.max()].tolist()) == best


def test_k_past_the_rows_and_k_zero():
    vectors = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    index = _index(vectors)
    found = exact_top(index.search, vectors.__getitem__, vectors[:2], 9, 5, _max_norm(vectors))
    assert [sorted(rows.tolist()) for _, rows in found] == [[0, 1, 2, 3, 4]] * 2
    assert [len(rows) for _, rows in exact_top(index.search, vectors.__getitem__, vectors[:2], 0, 5,
                                               _max_norm(vectors))] == [0, 0]


def test_another_index_type_keeps_faiss_s_scores_and_searches_a_tie_at_the_cut_again_deeper():
    """An IVF index (one list, probed: exact here) over ten rows and their copies: at k = 1 each query's row and
    its copy tie, so the query is searched again twice as deep and both are kept, with faiss's scores."""
    from retromae_ir.search.index import HybridIndex

    vectors = np.random.default_rng(3).standard_normal((20, 8)).astype(np.float32)
    vectors[10:] = vectors[:10]
    ivf = faiss.index_factory(8, "IVF1,Flat", faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors)
    ivf.add(vectors)
    searched = []

    class Counted:
        ntotal = 20

        def search(self, queries, k):
            searched.append((len(queries), k))
            return ivf.search(queries, k)

    index = object.__new__(HybridIndex)
    index.faiss_index, index._flat, index._scan = Counted(), None, None
    assert index.queries_per_search == 1
    found = index.dense_top(vectors[:3], 1)
    assert searched == [(3, 2), (1, 4), (1, 4), (1, 4)]
    for query, (scores, rows) in enumerate(found):
        assert {query, query + 10} <= set(rows[scores == scores[0]].tolist())
        np.testing.assert_array_equal(scores, ivf.search(vectors[query:query + 1], 4)[0][0])


def test_past_stream_rows_a_query_is_scored_against_every_row_a_block_at_a_time(monkeypatch):
    """A query of zeros ties every row at 0 (its bound is 0: nothing settles it), so it is scored against every
    row at once; a query among near-equal rows is, past STREAM_ROWS (32 here), without a deeper search: both in
    blocks of STREAM_BLOCK_BYTES (32 rows of 64 floats here), read once for both; a query that settles is not."""
    import retromae_ir.search.dense_top as dense_top

    monkeypatch.setattr(dense_top, "STREAM_ROWS", 32)
    monkeypatch.setattr(dense_top, "STREAM_BLOCK_BYTES", 32 * 4 * 64)
    rng = np.random.default_rng(4)
    base = rng.standard_normal(64).astype(np.float32)
    vectors = np.repeat(base[None], 100, 0)
    vectors[:, 0] += np.arange(100, dtype=np.float32) * np.spacing(base[0]) * 4
    queries = np.stack([np.zeros(64, np.float32), -base, base * 0 + rng.standard_normal(64).astype(np.float32)])
    vectors[7] = queries[2] * 5  # the third query's clear winner
    index, searched, read = _index(vectors), [], []

    def search(batch, width):
        searched.append((len(batch), width))
        return index.search(batch, width)

    def rows_of(ids):
        read.append(len(ids))
        return vectors[ids]

    found = exact_top(search, rows_of, queries, 1, 100, _max_norm(vectors))
    assert searched == [(2, 17)]  # not the query of zeros
    assert read == [17, 17, 32, 32, 32, 4]  # the two others' nominees, then the blocks for the first two
    brute = dense_scores(vectors, queries)
    assert sorted(found[0][1].tolist()) == list(range(100)) and (found[0][0] == 0).all()
    for q, (scores, rows) in enumerate(found):
        np.testing.assert_array_equal(scores, brute[q][rows])
        assert set(rows[scores == scores.max()].tolist()) == set(np.flatnonzero(brute[q] == brute[q].max()))
    assert found[2][1][np.argmax(found[2][0])] == 7


def test_an_index_with_vectors_that_are_not_finite_is_an_error():
    vectors = np.random.default_rng(5).standard_normal((40, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="not finite"):
        exact_top(_index(vectors).search, vectors.__getitem__, vectors[:2], 1, 40, lambda: float("nan"))


def test_a_query_that_is_not_finite_is_an_error():
    """faiss returns no rows for it: it would have had no dense hits, exit 0."""
    vectors = np.random.default_rng(6).standard_normal((40, 8)).astype(np.float32)
    queries = vectors[:3].copy()
    queries[1, 4] = np.inf
    with pytest.raises(ValueError, match="query 1 of the batch has a dense vector that is not finite"):
        exact_top(_index(vectors).search, vectors.__getitem__, queries, 2, 40, _max_norm(vectors))
