"""A retromae_ir index directory (see retromae_ir/encode/corpus.py) loaded for exact scoring, with every check that
turns a wrong combination into an error instead of a silently wrong ranking.

What stays in memory is the docids in one bytes block with their offsets (16 bytes a document plus the file's
size) and the faiss index's structure; its vectors are memory-mapped (``flat_index.read_index``: the page cache
holds them as memory allows, and the dense vectors are read through a view of them, never copied; a flat index
larger than that memory is searched a block at a time, ``flat_index.FlatScan``), and the OT
weights stay on disk in the store (``retromae_ir.search.ot_store``). An index written before the store existed
(``sparse/vectors.npz``, float32) is still read: its vectors are rounded to float16 into an in-memory store, so
it scores exactly as the same index written today, but it needs them all in memory (a warning says to encode it
again, which redoes only the merge while the chunk cache under DIR/.work is there).
"""
from __future__ import annotations

import json
import logging
import os
from functools import cached_property
from pathlib import Path

import numpy as np

from retromae_ir.data.docids import DocidTable
from retromae_ir.encode.cards import EncoderCard, load_card
from retromae_ir.encode.manifest import MANIFEST, IndexMismatchError, check_card, manifest_text
from retromae_ir.flat_index import (blas_rows, blas_sized, flat_view, largest_squared_norm, read_index,
                                    scan_if_too_big)
from retromae_ir.io import check_unchanged
from retromae_ir.search.dense_top import exact_top
from retromae_ir.search.ot_store import STORE, VERSION, OTStore, StoreFormatError

logger = logging.getLogger(__name__)
MODES = ("hybrid", "dense", "sparse")
STORE_FOLDER = "ot"  # DIR/sparse/ot/
LEGACY_VECTORS = "vectors.npz"
SCAN_QUERIES = 4096  # queries a search takes at once where each search reads the whole dense index file


def store_manifest_field() -> dict:
    """The manifest's ``sparse_store`` entry for an index whose sparse side is a memory-mapped store."""
    return {"store": STORE, "version": VERSION, "path": f"sparse/{STORE_FOLDER}"}


def store_is_readable(entry: dict) -> bool:
    """Whether this code reads the sparse store a manifest's ``sparse_store`` entry describes."""
    return entry.get("store") == STORE and entry.get("version") == VERSION


def _metric_name(metric: int) -> str:
    import faiss

    names = {getattr(faiss, name): name for name in dir(faiss) if name.startswith("METRIC_")}
    return names.get(metric, f"metric {metric}")


class HybridIndex:
    """docids, the faiss index and its stored vectors [N, d'], and (DupMAE) the OT store."""

    def __init__(self, directory: str | os.PathLike, card: EncoderCard | str, digests: dict[str, str] | None = None):
        """``digests``: the checkpoint files' digests as a loaded model read them (``check_card``); by default the
        card's files as they are now."""
        import faiss

        self.directory = Path(directory)
        self.card = load_card(card)
        checked = manifest_text(self.directory)
        self.manifest = json.loads(checked)
        if self.manifest.get("scale") != self.card.scale:
            raise IndexMismatchError(f"{self.directory} was quantised with scale {self.manifest.get('scale')}, "
                                     f"the card {self.card.name!r} says {self.card.scale}")
        check_card(self.manifest, self.card, str(self.directory), digests)
        dense_dir = self.directory / "dense"
        for name in ("index", "docid"):
            if not (dense_dir / name).is_file():
                raise IndexMismatchError(f"{dense_dir / name} is missing: the dense index is incomplete")
        try:
            self.faiss_index = read_index(dense_dir / "index")
        except ValueError as exc:
            raise IndexMismatchError(str(exc)) from None
        self.docids = DocidTable((dense_dir / "docid").read_bytes())
        if self.faiss_index.ntotal == 0:
            raise IndexMismatchError(f"{dense_dir} is an empty index (0 vectors)")
        if self.faiss_index.metric_type != faiss.METRIC_INNER_PRODUCT:  # index_factory's default is L2: its
            raise IndexMismatchError(                                    # distances would rank as scores
                f"{dense_dir / 'index'} measures {_metric_name(self.faiss_index.metric_type)}, not the inner "
                f"product Eq. 12 adds: build it with faiss.index_factory(d, description, faiss.METRIC_INNER_PRODUCT)")
        if self.faiss_index.d != self.card.dims:
            raise IndexMismatchError(f"{dense_dir} holds {self.faiss_index.d}-d vectors, the card gives {self.card.dims}")
        if len(self.docids) != self.faiss_index.ntotal:
            raise IndexMismatchError(f"{dense_dir}: {len(self.docids)} docids for {self.faiss_index.ntotal} vectors")
        self._flat = flat_view(self.faiss_index)
        self._scan, self._norm = None, None
        if self._flat is not None:
            try:
                self._scan = scan_if_too_big(dense_dir / "index", self.faiss_index.d, self.faiss_index.ntotal)
            except ValueError as exc:
                raise IndexMismatchError(str(exc)) from None
        ivf = faiss.try_extract_index_ivf(self.faiss_index)
        if ivf is not None:
            ivf.make_direct_map()  # reconstruct_batch of an IVF index needs it
        self.store = self._open_store() if self.card.sparse else None
        # a merge into this folder meanwhile (it unlinks the manifest first) may have swapped one part, not another
        check_unchanged(self.directory / MANIFEST, checked)

    def _open_store(self) -> OTStore:
        sparse_dir = self.directory / "sparse"
        entry = self.manifest.get("sparse_store")
        if entry is not None:
            if not store_is_readable(entry):
                raise IndexMismatchError(f"{self.directory}: its sparse store is {entry}; this retromae_ir reads "
                                         f"{store_manifest_field()}: upgrade retromae_ir, or encode the corpus again")
            try:
                store = OTStore.open(self.directory / entry["path"])
            except StoreFormatError as exc:
                raise IndexMismatchError(str(exc)) from None
        else:
            store = self._legacy_store(sparse_dir / LEGACY_VECTORS)
        if store.documents != len(self.docids):
            raise IndexMismatchError(f"{store.where}: {store.documents} documents for {len(self.docids)} docids")
        return store

    def _legacy_store(self, path: Path) -> OTStore:
        import scipy.sparse

        if not path.is_file():
            raise IndexMismatchError(f"{self.directory / 'sparse' / STORE_FOLDER} is missing: the sparse side of "
                                     f"{self.directory} is incomplete")
        logger.warning("%s was written before the memory-mapped OT store: its float vectors are read into memory "
                       "(8 bytes a posting) and rounded to float16. Encode it again (the same `encode corpus` "
                       "command; only the merge is redone while %s/.work holds its chunks) to search it "
                       "memory-mapped.", self.directory, self.directory)
        return OTStore.from_csr(scipy.sparse.load_npz(path), str(path))

    def __len__(self) -> int:
        return len(self.docids)

    @property
    def vocab_size(self) -> int | None:
        return None if self.store is None else self.store.vocab

    @property
    def dense(self) -> np.ndarray:
        """All dense vectors [N, d'] (float32): a view of a flat index's own storage, a copy for other index types."""
        if self._flat is not None:
            return self._flat
        return self.faiss_index.reconstruct_n(0, self.faiss_index.ntotal)

    @property
    def scans_file(self) -> bool:
        """Whether each dense search reads the whole index file (a flat index larger than its memory)."""
        return self._scan is not None

    @property
    def queries_per_search(self) -> int:
        """How many queries a dense search should take at once: ``SCAN_QUERIES`` where each search reads the whole
        index file, as many as faiss scores with one BLAS product over a flat index in memory (167 at 768-d), one
        for other index types (their searches cost the same a query in any batch)."""
        if self._scan is not None:
            return SCAN_QUERIES
        return 1 if self._flat is None else blas_rows(self.faiss_index.d)

    def dense_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss's (scores, rows) of each query's top ``k``: from its mapped vectors, or for a flat index larger
        than the memory there is for it, from a scan of the file (``flat_index.FlatScan``). A flat index's batch
        is padded to faiss's BLAS size (``flat_index.blas_sized``): faster, and rounded otherwise than row by row,
        which :meth:`dense_top` corrects."""
        if self._flat is None:
            return self.faiss_index.search(queries, k)
        padded = blas_sized(np.ascontiguousarray(queries, dtype=np.float32))
        scores, rows = (self._scan or self.faiss_index).search(padded, k)
        return scores[:len(queries)], rows[:len(queries)]

    @property
    def dense_top_is_exact(self) -> bool:
        """Whether :meth:`dense_top`'s scores are brute force's (a flat index), not faiss's."""
        return self._flat is not None

    def dense_top(self, queries: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(scores, rows) of each query holding every row that reaches its k-th score, ties included, unordered
        (rows faiss pads with -1 left out). A flat index's are exact, scored row by row as brute force
        (``dense_top.exact_top``); another index type's are faiss's, a query whose k-th score continues past its
        last row searched again twice as deep until the tie ends (faiss breaks ties by row)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        rows = self.faiss_index.ntotal
        if self._flat is not None:
            return exact_top(self.dense_search, self.dense_vectors, queries, k, rows, self._max_row_norm)
        k = min(k, rows)
        width = max(1, min(k + 1, rows))
        found = list(zip(*self.faiss_index.search(queries, width)))
        for q, (scores, ids) in enumerate(found):
            deep = width
            while _tied_past(scores, ids, k, deep, rows):
                deep = min(2 * deep, rows)
                scores, ids = (part[0] for part in self.faiss_index.search(queries[q:q + 1], deep))
            found[q] = (scores[ids >= 0], ids[ids >= 0])
        return found

    def _max_row_norm(self) -> float:
        """The largest norm of the flat index's rows, for ``exact_top``'s rounding bound: measured by the scan
        (each search of a scanned index), else once over the mapped vectors, a block at a time."""
        if self._scan is not None:
            return self._scan.max_row_norm
        if self._norm is None:
            self._norm = float(np.sqrt(np.max([largest_squared_norm(self._flat[start:start + 65536])  # NaN stays
                                               for start in range(0, len(self._flat), 65536)])))
        return self._norm

    def dense_vectors(self, rows: np.ndarray) -> np.ndarray:
        """The dense vectors of ``rows`` [len(rows), d'] (reconstructed by faiss for a non-flat index; read row by
        row from the file where it is scanned)."""
        if self._scan is not None:
            return self._scan.read_rows(rows)
        if self._flat is not None:
            return self._flat[rows]
        return self.faiss_index.reconstruct_batch(np.asarray(rows, dtype=np.int64))

    @cached_property
    def inverted(self):
        """The OT store as a float32 scipy matrix [vocab, N] (term -> postings), built once on first use: brute force
        and sweeps over small corpora (8 bytes a posting in memory); None for a dense-only card."""
        return None if self.store is None else self.store.to_csr()

    @property
    def sparse(self):
        """The OT vectors [N, vocab] (float16 weights as float32), the transpose of :attr:`inverted`."""
        return None if self.store is None else self.inverted.T

    def check_queries(self, dense: np.ndarray, sparse, mode: str) -> None:
        """Query vectors must match the index's dimensions; sparse modes need a sparse side."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        if dense.ndim != 2 or dense.shape[1] != self.faiss_index.d:
            raise IndexMismatchError(f"query vectors have shape {dense.shape}, the index holds "
                                     f"{self.faiss_index.d}-d vectors")
        if mode != "dense":
            if self.store is None:
                raise IndexMismatchError(f"mode {mode!r} needs a sparse side; card {self.card.name!r} has none")
            if sparse is None or sparse.shape[1] != self.store.vocab:
                shape = None if sparse is None else sparse.shape
                raise IndexMismatchError(f"sparse query vectors have shape {shape}, the index vocabulary is "
                                         f"{self.store.vocab}")


def _tied_past(scores: np.ndarray, ids: np.ndarray, k: int, depth: int, rows: int) -> bool:
    """Whether a top-``depth`` list's k-th score continues to its last row, with rows left beyond it."""
    return k > 0 and depth < rows and ids[-1] >= 0 and scores[-1] == scores[k - 1]
