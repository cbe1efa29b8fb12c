"""The dense side's scores as every searcher computes them, and each query's exact top k of a flat index whichever
route faiss took to find it.

faiss scores a batch of 167 or more 768-d queries (128,000 query floats) with one BLAS product, 6-10 times faster
than pair by pair, but BLAS rounds a score by the row's place in its block and by the batch, so two copies of a
document can score a step apart (runs/flat-index-mmap/blas_copies.txt) and the docid rule for ties breaks.
:func:`exact_top` lets faiss take its fast route to nominate rows, then scores them again row by row
(:func:`dense_scores`, brute force's own rounding) and proves from a bound on the rounding that no row left out
could reach the k-th score; where it cannot, the query is searched again twice as deep.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

UNIT_ROUNDOFF = 2.0 ** -24  # float32
STREAM_ROWS = 16384  # deeper than this (and 4 k), a query is scored against every row a block at a time
STREAM_BLOCK_BYTES = 64 << 20  # the rows read at a time then


def dense_scores(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """[B, N] inner products of each query with each row of ``vectors``, a row at a time (einsum, not BLAS's
    matrix product, whose rounding depends on a row's place in the matrix and on the batch): two copies of a
    document score exactly alike, so a tie between them goes by docid on every path."""
    scores = np.empty((len(queries), len(vectors)), dtype=np.result_type(vectors, queries))
    for row, query in enumerate(queries):
        scores[row] = np.einsum("ij,j->i", vectors, query)
    return scores


def rounding_bound(dims: int, query_norms: np.ndarray, max_row_norm: float) -> np.ndarray:
    """How far two float32 sums of the same ``dims`` products, in any order, can lie apart, per query: each is
    within gamma_d * sum|q_i x_i| <= gamma_d * |q| |x| of the exact inner product, gamma_d = d u / (1 - d u)
    (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), so twice that; 1% over it for the rounding of
    the norms themselves. Measured errors are far smaller (1.2e-7 |q| |x| at 768-d against the bound's 9.2e-5:
    runs/flat-index-mmap/), which only makes a query searched again more often than it needs."""
    gamma = dims * UNIT_ROUNDOFF / (1 - dims * UNIT_ROUNDOFF)
    return 2.02 * gamma * np.asarray(query_norms, np.float64) * float(max_row_norm)


def exact_top(search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
              vectors: Callable[[np.ndarray], np.ndarray], queries: np.ndarray, k: int, rows: int,
              max_row_norm: Callable[[], float]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(scores, rows) of each query: rows nominated by ``search`` (faiss's (scores, rows) of a batch's top n, on
    any route) scored again by :func:`dense_scores` over ``vectors(rows)``, holding every row whose score reaches
    the k-th (ties included), unordered. A row left out scores at most the last nominated row's faiss score plus
    the rounding bound; while the k-th score is not above that, the query is searched again twice as deep (the
    queries still unsettled together: over a scanned index, one read of the file); past ``STREAM_ROWS`` rows (a
    tie that long), and at once for a query of zeros (every row ties at 0), it is scored against every row
    instead, a block at a time, so memory stays bounded. A query that is not finite is an error. ``max_row_norm``
    is asked after the first search (a scan measures it on the way)."""
    k = min(k, rows)
    if k <= 0:
        return [(np.empty(0, np.float32), np.empty(0, np.int64)) for _ in queries]
    if not np.isfinite(queries).all():  # faiss returns no rows for such a query: it would get no hits, exit 0
        raise ValueError(f"query {int(np.argmin(np.isfinite(queries).all(axis=1)))} of the batch has a dense vector "
                         f"that is not finite (NaN or infinity)")
    found: list = [None] * len(queries)
    nonzero = queries.any(axis=1)
    zeros = np.flatnonzero(~nonzero).tolist()  # every row ties at 0 for them: no bound settles them
    pending = np.flatnonzero(nonzero).tolist()
    width, bounds = min(rows, k + max(16, k // 4)), None
    while pending and width <= max(STREAM_ROWS, 4 * k):
        scores, ids = search(queries[pending], width)
        if bounds is None:
            norm = max_row_norm()
            if not np.isfinite(norm):
                raise ValueError("the dense index holds vectors that are not finite (NaN or infinity)")
            bounds = rounding_bound(queries.shape[1], np.linalg.norm(queries.astype(np.float64), axis=1), norm)
        unsettled = []
        for q, nominated, faiss_scores in zip(pending, ids, scores):
            kept = nominated >= 0
            nominated = nominated[kept]
            exact = dense_scores(vectors(nominated), queries[q][None])[0]
            exhausted = width >= rows or len(nominated) < width  # faiss returned every row it has
            if not exhausted and not _settled(exact, float(faiss_scores[kept][-1]), k, bounds[q]):
                unsettled.append(q)
            found[q] = (exact, nominated)
        pending, width = unsettled, min(rows, 2 * width)
    streamed = zeros + pending  # a query of zeros, or a tie past STREAM_ROWS rows: every row scored
    if streamed:
        for q, top in zip(streamed, _streamed_top(vectors, queries[streamed], k, rows)):
            found[q] = top
    return found


def _streamed_top(vectors, queries: np.ndarray, k: int, rows: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each query's rows reaching its k-th score, every row scored by :func:`dense_scores`, ``STREAM_BLOCK_BYTES``
    of rows at a time (read once for all the queries), keeping only the rows that can still reach the k-th."""
    kept = [(np.empty(0, np.float32), np.empty(0, np.int64)) for _ in queries]
    step = max(1, STREAM_BLOCK_BYTES // (4 * queries.shape[1]))
    for start in range(0, rows, step):
        ids = np.arange(start, min(rows, start + step))
        scored = dense_scores(vectors(ids), queries)
        for q, (scores, rows_kept) in enumerate(kept):
            scores, rows_kept = np.concatenate([scores, scored[q]]), np.concatenate([rows_kept, ids])
            if len(scores) > k:
                reach = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
                scores, rows_kept = scores[reach], rows_kept[reach]
            kept[q] = (scores, rows_kept)
    return kept


def _settled(exact: np.ndarray, last_nominated: float, k: int, bound: float) -> bool:
    """Whether the k-th exact score is above anything a row left out can score (``last_nominated`` + ``bound``)."""
    kth = np.partition(exact, len(exact) - k)[len(exact) - k]
    return float(kth) > last_nominated + bound
