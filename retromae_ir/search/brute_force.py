"""Exhaustive Eq. 12 scoring (the dense side row by row, the sparse side as a sparse matmul, over the whole corpus):
the reference the exact hybrid searcher is measured against; practical for small corpora (scores are a dense
[B, N] matrix, and the OT store is materialised as a float32 scipy matrix, 8 bytes a posting).

It reads the same stored precision as the exact searcher (the float16 OT weights of the store, the flat index's
float32 vectors), through another code path (scipy's sparse product instead of the store's posting-list loop),
so "exact" has one meaning: equal to this at the stored precision."""
from __future__ import annotations

import numpy as np

from retromae_ir.search.dense_top import dense_scores
from retromae_ir.search.index import HybridIndex


def top_hits(scores: np.ndarray, docids, k: int, candidates: np.ndarray | None = None):
    """The ``k`` best (docid, score) of one query, score descending, ties by docid (write_trec_run's order), also
    at the k-th place: every document tied with the k-th score competes by docid, so the hits do not depend on
    which other documents were scored."""
    best = top_positions(scores, docids, k, candidates)
    values = scores[best]
    order = np.argsort(-values, kind="stable")
    best, values = best[order], values[order]
    ids = best if candidates is None else candidates[best]
    names = docids.take(ids) if hasattr(docids, "take") else [docids[i] for i in ids.tolist()]
    hits = list(zip(names, values.tolist()))
    if (values[1:] == values[:-1]).any():  # equal scores: by docid
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
    return hits


def top_positions(scores: np.ndarray, docids, k: int, candidates: np.ndarray | None = None,
                  keep_ties: bool = False) -> np.ndarray:
    """Positions of the ``k`` best ``scores`` (unordered), documents tied with the k-th score cut by docid, so the
    set does not depend on the order the documents were scored in. ``keep_ties``: every document tied with the
    k-th score is kept while there are at most 4 k in all (the exact searcher's K' candidates: a document tied at
    the cut is in the top K' as much as the one kept)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    if k == len(scores):
        return np.arange(len(scores))
    kth = scores[np.argpartition(-scores, k - 1)[k - 1]]
    best = np.flatnonzero(scores > kth)
    tied = np.flatnonzero(scores == kth)
    if keep_ties and len(best) + len(tied) <= 4 * k:
        return np.concatenate([best, tied])
    return np.concatenate([best, _first_by_docid(tied, docids, candidates, k - len(best))])


def _first_by_docid(tied: np.ndarray, docids, candidates, n: int) -> np.ndarray:
    """The ``n`` positions of ``tied`` whose documents come first by docid (many documents tied at the cut)."""
    ids = tied if candidates is None else candidates[tied]
    order = sorted(range(len(tied)), key=lambda j: docids[ids[j]])[:n]
    return tied[np.array(order, dtype=np.int64)]


class BruteForceScorer:
    def __init__(self, index: HybridIndex):
        self.index = index

    def scores(self, dense: np.ndarray, sparse=None, mode: str = "hybrid") -> np.ndarray:
        """[B, N] Eq. 12 scores of every query against every document (or one side with ``mode``)."""
        self.index.check_queries(dense, sparse, mode)
        total = np.zeros((dense.shape[0], len(self.index)), dtype=np.float32)
        if mode != "sparse":
            total += dense_scores(self.index.dense, dense)
        if mode != "dense":
            total += (sparse @ self.index.inverted).toarray()
        return total

    def search(self, dense: np.ndarray, sparse=None, k: int = 1000, mode: str = "hybrid"):
        """The top ``k`` of every query; in sparse mode only documents sharing a term with it (score > 0), as the
        exact searcher returns, not zero-score documents in docid order."""
        scores = self.scores(dense, sparse, mode)
        if mode != "sparse":
            return [top_hits(row, self.index.docids, k) for row in scores]
        return [top_hits(row[matched], self.index.docids, k, matched)
                for row, matched in ((row, np.flatnonzero(row > 0)) for row in scores)]
