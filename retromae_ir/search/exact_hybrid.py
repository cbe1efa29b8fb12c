"""Exact hybrid search (DupMAE Eq. 12) over a retromae_ir index.

Pyserini's fusion merges each side's top hits and gives a document missing on one side that side's minimum
score. Here the top K' of each side only nominate candidates; every candidate is then scored exactly, dense part
from the flat index's stored vectors, sparse part from the stored float OT vectors. The sparse top K' comes from
the inverted (term -> postings) view of those vectors, so it is exact too: only a document outside both sides'
top K' can be missed.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from retromae_ir.encode.base import Encoded, EncoderModel
from retromae_ir.search.brute_force import top_hits
from retromae_ir.search.index import MODES, HybridIndex


class ExactHybridSearcher:
    def __init__(self, index_dir: str | os.PathLike, encoder, mode: str = "hybrid", candidates: int = 1000,
                 threads: int = 1, device: str | None = None):
        """``encoder``: a card name/path/EncoderCard (the model is loaded) or a loaded EncoderModel."""
        import faiss

        card = encoder.card if isinstance(encoder, EncoderModel) else encoder
        self.index = HybridIndex(index_dir, card)
        self._model = encoder if isinstance(encoder, EncoderModel) else None
        self.device = device
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        if mode != "dense" and self.index.sparse is None:
            raise ValueError(f"mode {mode!r} needs a sparse side; card {self.index.card.name!r} has none")
        self.mode, self.candidates, self.threads = mode, candidates, max(1, threads)
        faiss.omp_set_num_threads(self.threads)

    @property
    def model(self) -> EncoderModel:
        if self._model is None:
            self._model = EncoderModel.from_card(self.index.card, device=self.device)
        return self._model

    def batch_search(self, queries: list[str], qids: list[str], k: int = 1000, batch_size: int = 64):
        """``{qid: [(docid, score), ...]}``, ``k`` hits per query, queries encoded ``batch_size`` at a time."""
        run = {}
        for start in range(0, len(queries), batch_size):
            encoded = self.model.encode_query(queries[start:start + batch_size], batch_size)
            for qid, hits in zip(qids[start:start + batch_size], self.search_encoded(encoded, k)):
                run[qid] = dict(hits)
        return run

    def search(self, query: str, k: int = 1000):
        return self.search_encoded(self.model.encode_query([query]), k)[0]

    def search_encoded(self, encoded: Encoded, k: int = 1000) -> list[list[tuple[str, float]]]:
        """Hits for a batch of encoded queries: candidates from each side's top K' (``candidates``), then exact
        Eq. 12 scores; at most ``k`` hits, and at most 2 K' (as Pyserini's fusion)."""
        self.index.check_queries(encoded.dense, encoded.sparse, self.mode)
        depth = self.candidates
        dense_ids = None
        if self.mode != "sparse":
            dense_scores, dense_ids = self.index.faiss_index.search(np.ascontiguousarray(encoded.dense), depth)
            if self.mode == "dense":
                return [[(self.index.docids[i], float(s)) for i, s in zip(ids, scores) if i >= 0][:k]
                        for ids, scores in zip(dense_ids, dense_scores)]
        sparse_scores = self._sparse_scores(encoded.sparse)
        return [self._rescore(b, encoded, sparse_scores[b], None if dense_ids is None else dense_ids[b], k, depth)
                for b in range(len(encoded))]

    def _sparse_scores(self, sparse):
        """Per query, the sparse dot with every document sharing a term (CSR rows, sorted indices)."""
        rows = np.array_split(np.arange(sparse.shape[0]), min(self.threads, sparse.shape[0]))

        def part(idx):
            scores = (sparse[idx] @ self.index.inverted).tocsr()
            scores.sort_indices()
            return [scores[i] for i in range(scores.shape[0])]

        with ThreadPoolExecutor(self.threads) as pool:
            return [row for chunk in pool.map(part, rows) for row in chunk]

    def _rescore(self, b, encoded, sparse_row, dense_ids, k, depth):
        top_sparse = sparse_row.indices[np.argsort(-sparse_row.data, kind="stable")[:depth]]
        if self.mode == "sparse":
            return top_hits(sparse_row.data, self.index.docids, k, sparse_row.indices)
        cands = np.union1d(dense_ids[dense_ids >= 0], top_sparse)
        exact = self.index.dense[cands] @ encoded.dense[b] + gather(sparse_row, cands)
        return top_hits(exact, self.index.docids, k, cands)


def gather(row, columns: np.ndarray) -> np.ndarray:
    """Values of a sorted-index CSR row at ``columns`` (0 where the row has no entry)."""
    out = np.zeros(len(columns), np.float32)
    if row.nnz:
        pos = np.searchsorted(row.indices, columns)
        valid = pos < row.nnz
        valid[valid] = row.indices[pos[valid]] == columns[valid]
        out[valid] = row.data[pos[valid]]
    return out
