"""Exhaustive Eq. 12 scoring (dense matmul + sparse matmul over the whole corpus): the reference the exact
hybrid searcher is measured against; practical for small corpora (scores are a dense [B, N] matrix)."""
from __future__ import annotations

import numpy as np

from retromae_ir.search.index import HybridIndex


def top_hits(scores: np.ndarray, docids: list[str], k: int, candidates: np.ndarray | None = None):
    """The ``k`` best (docid, score) of one query, score descending, ties by docid (write_trec_run's order)."""
    k = min(k, len(scores))
    if k <= 0:
        return []
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    ids = best if candidates is None else candidates[best]
    hits = [(docids[i], float(s)) for i, s in zip(ids, scores[best])]
    return sorted(hits, key=lambda hit: (-hit[1], hit[0]))


class BruteForceScorer:
    def __init__(self, index: HybridIndex):
        self.index = index

    def scores(self, dense: np.ndarray, sparse=None, mode: str = "hybrid") -> np.ndarray:
        """[B, N] Eq. 12 scores of every query against every document (or one side with ``mode``)."""
        self.index.check_queries(dense, sparse, mode)
        total = np.zeros((dense.shape[0], len(self.index)), dtype=np.float32)
        if mode != "sparse":
            total += dense @ self.index.dense.T
        if mode != "dense":
            total += (sparse @ self.index.inverted).toarray()
        return total

    def search(self, dense: np.ndarray, sparse=None, k: int = 1000, mode: str = "hybrid"):
        scores = self.scores(dense, sparse, mode)
        return [top_hits(row, self.index.docids, k) for row in scores]
