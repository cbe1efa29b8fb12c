"""Exact hybrid search (DupMAE Eq. 12) over a retromae_ir index.

Pyserini's fusion merges each side's top hits and gives a document missing on one side that side's minimum
score. Here the top K' of each side only nominate candidates; every candidate is then scored exactly, dense part
from the flat index's stored vectors, sparse part from the OT store (float16 weights, memory-mapped). The sparse
side is scored term at a time over the query's posting lists, which gives every document sharing a term its exact
sparse score: the sparse top K' is exact, and so is the sparse part of every dense candidate. Only a document
outside both sides' top K' can be missed.

Queries are searched one at a time (``threads`` of them side by side), so the memory a search needs beyond the
index is one float32 accumulator of N documents per thread, whatever the batch size.
"""
from __future__ import annotations

import os
import queue
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm import tqdm

from retromae_ir.encode.base import Encoded, EncoderModel
from retromae_ir.encode.manifest import check_card, check_precision, manifest_precision
from retromae_ir.search.brute_force import top_hits, top_positions
from retromae_ir.search.dense_top import dense_scores
from retromae_ir.search.index import MODES, HybridIndex

# Bumped in the commit that changes what a search returns for the same index and queries, so cached runs
# (``EncoderRetriever.run_key``) and a chain's recorded metrics made before are made again. 1: ties at every cut
# go by docid (brute_force.top_hits); 2: every document tied at a side's K'-th score is a candidate (2026-11-25);
# 3: K' is at least the hits asked for (a run of 2,000 hits at K' 1,000 was cut to the union of two top 1,000s).
# (4, 7953492 until 5f5c6d3, padded a flat index's batch to faiss's BLAS size: withdrawn, BLAS can score two
# copies of a document apart.) 5: a flat index's batches are padded to faiss's BLAS size again, its nominees scored
# again row by row, exactly as brute force, with a rounding bound proving the top k (search/dense_top.py): the
# dense mode's scores are now brute force's to the bit, no longer faiss's.
SEARCH_VERSION = 5


class ExactHybridSearcher:
    def __init__(self, index_dir: str | os.PathLike, encoder, mode: str = "hybrid", candidates: int = 1000,
                 threads: int = 1, device: str | None = None):
        """``encoder``: a card name/path/EncoderCard (the model is loaded) or a loaded EncoderModel."""
        import faiss

        self._model = encoder if isinstance(encoder, EncoderModel) else None
        if self._model is not None:  # checked against the weights it was loaded from, not the folder's files now
            self.index = HybridIndex(index_dir, encoder.card, self._model.checkpoint_digests())
            check_precision(self.index.manifest, self._model, index_dir)
        else:
            self.index = HybridIndex(index_dir, encoder)
        self.device = device
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        if mode != "dense" and self.index.store is None:
            raise ValueError(f"mode {mode!r} needs a sparse side; card {self.index.card.name!r} has none")
        if candidates < 1:
            raise ValueError(f"candidates (K') must be at least 1, got {candidates}")
        self.mode, self.candidates, self.threads = mode, candidates, max(1, threads)
        self._buffers: queue.SimpleQueue = queue.SimpleQueue()  # float32 [N] accumulators, one per running query
        faiss.omp_set_num_threads(self.threads)

    @property
    def model(self) -> EncoderModel:
        """Queries are encoded in the precision the documents were (the manifest's: fp32, bf16 autocast, int8),
        by the weights that encoded them: checked again once loaded, since loading a hub name may download a newer
        revision than the cache held when the index was opened (or the only one, into an empty cache)."""
        if self._model is None:
            precision = manifest_precision(self.index.manifest)
            device = self.device or ("cpu" if precision == "int8" else None)  # int8 runs on the CPU only
            model = EncoderModel.from_card(self.index.card, device=device, bf16=precision == "bf16")
            check_card(self.index.manifest, model.card, str(self.index.directory), model.checkpoint_digests())
            self._model = model.quantize_int8() if precision == "int8" else model
        return self._model

    def batch_search(self, queries: list[str], qids: list[str], k: int = 1000, batch_size: int = 64):
        """``{qid: [(docid, score), ...]}``, ``k`` hits per query, queries encoded ``batch_size`` at a time (a
        progress bar by queries: a dev set of thousands is minutes on a CPU) and searched
        :meth:`queries_at_once`: MS MARCO's 6,980 dev queries are two reads of a flat index file too large for
        memory, not 110."""
        run, step = {}, self.queries_at_once(batch_size)
        with tqdm(total=len(queries), desc=f"search {self.mode}", unit="query") as progress:
            for start in range(0, len(queries), step):
                batch = queries[start:start + step]
                encoded = Encoded.concat([self.model.encode_query(batch[at:at + batch_size], batch_size)
                                          for at in range(0, len(batch), batch_size)])
                for qid, hits in zip(qids[start:start + step], self.search_encoded(encoded, k)):
                    run[qid] = dict(hits)
                progress.update(len(batch))
        return run

    def queries_at_once(self, batch_size: int) -> int:
        """How many queries a search takes at once when they come ``batch_size`` at a time: at least as many as
        a dense search should take (``HybridIndex.queries_per_search``: 4,096 where each search reads the whole
        index file, 167 at 768-d where faiss's BLAS route starts)."""
        return max(batch_size, self.index.queries_per_search)

    def search(self, query: str, k: int = 1000):
        return self.search_encoded(self.model.encode_query([query]), k)[0]

    def search_encoded(self, encoded: Encoded, k: int = 1000) -> list[list[tuple[str, float]]]:
        """Hits for a batch of encoded queries: candidates from each side's top K' (``candidates``; documents tied
        at a side's K'-th score are nominated too, up to 4 K' a side), then exact Eq. 12 scores; at most ``k``
        hits. K' is raised to ``k`` where it is lower, so that the candidates can fill ``k`` hits."""
        self.index.check_queries(encoded.dense, encoded.sparse, self.mode)
        depth = max(self.candidates, k)
        dense_top = None
        if self.mode == "dense":  # the index's own top k (not capped at K'), ties at the cut by docid as elsewhere
            return [top_hits(scores, self.index.docids, k, ids)
                    for scores, ids in self.index.dense_top(encoded.dense, k)]
        if self.mode == "hybrid":  # each query's top K' rows, ties at the cut by docid, with their exact scores
            dense_top = []
            for scores, ids in self.index.dense_top(encoded.dense, depth):
                chosen = top_positions(scores, self.index.docids, depth, ids, keep_ties=True)
                dense_top.append((ids[chosen], scores[chosen] if self.index.dense_top_is_exact else None))
        sparse = encoded.sparse.tocsr()

        def one(b: int):
            start, end = sparse.indptr[b], sparse.indptr[b + 1]
            return self._search_one(encoded.dense[b], sparse.indices[start:end], sparse.data[start:end],
                                    None if dense_top is None else dense_top[b], k, depth)

        if self.threads == 1 or len(encoded) == 1:
            return [one(b) for b in range(len(encoded))]
        with ThreadPoolExecutor(min(self.threads, len(encoded))) as pool:
            return list(pool.map(one, range(len(encoded))))

    def _search_one(self, dense_query, terms, values, dense_top, k: int, depth: int):
        """``dense_top``: (rows, their exact dense scores or None) of the query's dense top K' (hybrid mode)."""
        scores = self._accumulator()
        try:
            self.index.store.accumulate(terms, values, scores)
            if self.mode == "sparse":
                matched = np.flatnonzero(scores > 0)  # documents sharing a term with the query
                return top_hits(scores[matched], self.index.docids, k, matched)
            matched = np.flatnonzero(scores > 0)
            top_sparse = matched[top_positions(scores[matched], self.index.docids, depth, matched, keep_ties=True)]
            cands = np.union1d(dense_top[0], top_sparse)
            exact = self._dense_part(dense_query, cands, *dense_top) + scores[cands]
            return top_hits(exact, self.index.docids, k, cands)
        finally:
            self._buffers.put(scores)

    def _dense_part(self, dense_query, cands: np.ndarray, dense_rows: np.ndarray, known) -> np.ndarray:
        """The dense scores of ``cands`` (sorted), row by row as brute force: those of ``dense_rows`` as ``known``
        (already scored so by ``HybridIndex.dense_top``: their rows are not read again, which over a scanned index
        is a read from disk each), the others' now. Not BLAS: a [2K', d'] matrix-vector product is too small for
        BLAS's threads, which only contend with the query threads (8x slower measured on 2 busy cores)."""
        if known is None:
            return dense_scores(self.index.dense_vectors(cands), dense_query[None])[0]
        part = np.empty(len(cands), np.float32)
        at = np.searchsorted(cands, dense_rows)
        part[at] = known
        rest = np.ones(len(cands), bool)
        rest[at] = False
        if rest.any():
            part[rest] = dense_scores(self.index.dense_vectors(cands[rest]), dense_query[None])[0]
        return part

    def _accumulator(self) -> np.ndarray:
        try:
            scores = self._buffers.get_nowait()
        except queue.Empty:
            return np.zeros(len(self.index), np.float32)
        scores.fill(0)
        return scores
