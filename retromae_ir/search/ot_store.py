"""The OT (sparse) store: every document's OT weights in float16, term-major, memory-mapped for exact Eq. 12.

    DIR/sparse/ot/store.json    {"store": "retromae_ir-ot", "version": 1, "documents", "vocab", "postings", ...}
    DIR/sparse/ot/offsets.npy   int64 [vocab + 1]: term t's postings are [offsets[t], offsets[t + 1])
    DIR/sparse/ot/docs.npy      int32 [postings]: document rows (the order of dense/docid), ascending per term
    DIR/sparse/ot/weights.npy   float16 [postings]: the OT weights, rounded once to float16 when written

6 bytes a posting plus 8 bytes a vocabulary entry: 2,304 bytes a document at k = 384. A query reads the posting
lists of its terms and nothing else, with positional reads (``os.pread``) into memory it frees when the query is
done: the store's pages stay in the kernel's page cache (shared, dropped under pressure) and never enter the
process's resident set, which a memory-mapped read would grow to the whole store as queries touch it (1.8 GiB of
file-backed RSS after 200 queries at 1M documents, 20 GB at MS MARCO's 8.8M). The arrays are also memory-mapped
(``numpy.load(mmap_mode="r")``) for reading the whole store at once (``to_csr``: brute force, sweeps, tests).

Why term-major and not document-major: the exact searcher needs each side's exact top K' (the sparse top K' is
what finds a document the dense side missed), and that takes the term -> postings view; accumulating a query's
posting lists term at a time gives every document's exact sparse score at once, the dense side's candidates
included, so a document-major copy (doc -> terms) would only duplicate the bytes. Why float16 and not Lucene's
integer impacts: with Eq. 12's weight folded into the vectors (representation.py), trained OT weights are small
(0.078-0.120 on the scifact chain's stage-2 index), and ``round(w * 100)`` keeps them to 8-12, an error of up to
6%; float16 keeps every weight of its normal range (6.1e-5 and up) to a relative 2^-11 (0.05%) whatever the card's
``scale`` (smaller ones lose relative precision as subnormals, and below about 3e-8 they are stored as 0).

"Exact" means exact at this stored precision: the exact searcher, the brute-force scorer and the OT-weight sweep all
read these float16 weights and accumulate ``q * w`` in float32, term by term in the query's order, so the sparse
scores they compute are bitwise equal.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import scipy.sparse

STORE = "retromae_ir-ot"
VERSION = 1
META = "store.json"
FILES = {"offsets": np.int64, "docs": np.int32, "weights": np.float16}
FLOAT16_MAX = float(np.finfo(np.float16).max)
ROWS_PER_PASS = 32768  # documents scattered at a time by the writer (about 100 MB of temporaries at k = 384)

try:  # one C loop per posting list: out[docs] += q * weights, accumulated in place, in order
    from scipy.sparse._sparsetools import csc_matvec as _csc_matvec
except ImportError:  # pragma: no cover - a scipy without it falls back to numpy (same order, same sums)
    _csc_matvec = None


class StoreFormatError(ValueError):
    """An OT store that is missing, damaged, or written by a newer retromae_ir."""


class OTStore:
    """Term-major float16 OT weights of ``documents`` documents over a ``vocab``-term vocabulary."""

    def __init__(self, offsets: np.ndarray, docs: np.ndarray, weights: np.ndarray, documents: int,
                 where: str = "OT store"):
        self.offsets, self.docs, self.weights = offsets, docs, weights
        self.documents, self.vocab, self.where = int(documents), len(offsets) - 1, where
        self._check()
        self._files = _PostingFiles.of(docs, weights, where)

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "OTStore":
        """Open a store written by :func:`write_ot_store`: the offsets are read, the postings only when a query
        needs them (positional reads; the arrays are mapped for whole-store reads, which page nothing in until used)."""
        folder = Path(folder)
        meta_path = folder / META
        if not meta_path.is_file():
            raise StoreFormatError(f"{meta_path} is missing: the OT store of {folder.parent.parent} is incomplete")
        meta = json.loads(meta_path.read_text())
        if meta.get("store") != STORE:
            raise StoreFormatError(f"{meta_path} does not describe a retromae_ir OT store")
        if meta.get("version") != VERSION:
            raise StoreFormatError(f"{folder} is an OT store of version {meta.get('version')}; this retromae_ir reads "
                                   f"version {VERSION}: upgrade retromae_ir, or encode the corpus again with it")
        arrays = {}
        for name, dtype in FILES.items():
            path = folder / f"{name}.npy"
            if not path.is_file():
                raise StoreFormatError(f"{path} is missing: the OT store is incomplete")
            mapped = np.load(path, mmap_mode=None if name == "offsets" else "r")  # offsets: 8 bytes a term, read
            if mapped.dtype != dtype or mapped.ndim != 1:
                raise StoreFormatError(f"{path} holds {mapped.dtype} {mapped.shape}, expected 1-d {np.dtype(dtype)}")
            arrays[name] = mapped.view(np.ndarray)  # still the mapping (its base); slices skip memmap's overhead
        store = cls(arrays["offsets"], arrays["docs"], arrays["weights"], meta["documents"], str(folder))
        if store.vocab != meta["vocab"] or store.postings != meta["postings"]:
            raise StoreFormatError(f"{folder}: the arrays hold {store.vocab} terms and {store.postings} postings, "
                                   f"{META} says {meta['vocab']} and {meta['postings']}")
        return store

    @classmethod
    def from_csr(cls, matrix: scipy.sparse.csr_matrix, where: str = "OT vectors") -> "OTStore":
        """An in-memory store of a [documents, vocab] matrix (float weights rounded to float16 as the writer does):
        indexes written before the store existed (``sparse/vectors.npz``), and tests."""
        matrix = _canonical(matrix)
        _check_weights(matrix.data, where)
        by_term = matrix.tocsc()  # the transpose, row (document) indices sorted per term
        by_term.sort_indices()
        return cls(by_term.indptr.astype(np.int64), by_term.indices.astype(np.int32),
                   by_term.data.astype(np.float16), matrix.shape[0], where)

    def _check(self) -> None:
        if len(self.docs) != len(self.weights) or self.offsets[0] != 0 or self.offsets[-1] != len(self.docs):
            raise StoreFormatError(f"{self.where}: offsets end at {self.offsets[-1]}, for {len(self.docs)} document "
                                   f"rows and {len(self.weights)} weights")

    @property
    def postings(self) -> int:
        return len(self.docs)

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.docs.nbytes + self.weights.nbytes

    def posting_count(self, terms: np.ndarray) -> int:
        """How many postings the terms' lists hold together (what scoring a query with them reads)."""
        terms = np.asarray(terms, dtype=np.int64)
        return int((self.offsets[terms + 1] - self.offsets[terms]).sum())

    def accumulate(self, terms: np.ndarray, values: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[d] += values[i] * w(d, terms[i])`` for every posting of every term, in float32, term by term in the
        given order (as ``scipy``'s ``query @ to_csr()`` sums); ``out`` is a float32 [documents] array."""
        if out.dtype != np.float32 or out.shape != (self.documents,):
            raise ValueError(f"out must be float32 [{self.documents}], got {out.dtype} {out.shape}")
        for term, value in zip(np.asarray(terms).tolist(), np.asarray(values, dtype=np.float32)):
            if not 0 <= term < self.vocab:
                raise ValueError(f"term id {term} outside the store's vocabulary of {self.vocab}")
            start, end = int(self.offsets[term]), int(self.offsets[term + 1])
            if start == end:
                continue
            docs, weights = self._postings(start, end)
            weights = weights.astype(np.float32)
            if _csc_matvec is not None:
                _csc_matvec(self.documents, 1, np.array([0, end - start], np.int32), docs, weights,
                            np.array([value], np.float32), out)
            else:  # pragma: no cover
                out[docs] += value * weights  # a term lists a document once, so no index repeats
        return out

    def _postings(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Document rows and float16 weights of postings [start, end): read from the files, or sliced in memory."""
        if self._files is None:
            return self.docs[start:end], self.weights[start:end]
        return self._files.read(start, end)

    def scores(self, terms: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Sparse Eq. 12 part of one query against every document, float32 [documents]."""
        return self.accumulate(terms, values, np.zeros(self.documents, np.float32))

    def to_csr(self) -> scipy.sparse.csr_matrix:
        """The whole store as a float32 [vocab, documents] scipy matrix (term -> postings): brute force and sweeps
        over small corpora; it holds 8 bytes a posting in memory."""
        return scipy.sparse.csr_matrix((np.asarray(self.weights, dtype=np.float32), np.asarray(self.docs),
                                        np.asarray(self.offsets)), shape=(self.vocab, self.documents))


class _PostingFiles:
    """Positional reads of postings from ``docs.npy`` and ``weights.npy``: thread-safe (no shared file position,
    the GIL released while reading), and nothing of the store stays mapped into the process after a read."""

    def __init__(self, docs: np.memmap, weights: np.memmap, where: str):
        self.where = where
        self._docs = open(docs.filename, "rb", buffering=0)
        self._weights = open(weights.filename, "rb", buffering=0)
        self._docs_at, self._weights_at = docs.offset, weights.offset

    @classmethod
    def of(cls, docs, weights, where: str) -> "_PostingFiles | None":
        """The files behind memory-mapped arrays, or None (arrays in memory, or no ``os.pread`` on this system)."""
        mapped = [getattr(array, "base", None) for array in (docs, weights)]
        if not hasattr(os, "pread") or not all(isinstance(m, np.memmap) and m.filename for m in mapped):
            return None
        return cls(*mapped, where)

    def read(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        return (self._read(self._docs, self._docs_at, start, end, np.int32),
                self._read(self._weights, self._weights_at, start, end, np.float16))

    def _read(self, file, at: int, start: int, end: int, dtype) -> np.ndarray:
        size = np.dtype(dtype).itemsize
        want, offset = (end - start) * size, at + start * size
        parts, got = [], 0
        while got < want:  # a regular file returns less only at its end (or past Linux's 2 GiB a call)
            part = os.pread(file.fileno(), want - got, offset + got)
            if not part:
                raise StoreFormatError(f"{file.name} ends before posting {end} of {self.where}: the store is damaged; "
                                       f"encode the corpus again")
            parts.append(part)
            got += len(part)
        return np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), dtype)


def write_ot_store(folder: str | os.PathLike, chunks: Callable[[], Iterable[scipy.sparse.csr_matrix]],
                   vocab: int) -> dict:
    """Write the store of the documents that ``chunks()`` yields as [rows, vocab] CSR matrices, in docid order.

    Two passes, so no transposed copy of the corpus is ever held: the first counts each term's postings, the
    second scatters each chunk's postings into place in the memory-mapped outputs (``chunks`` is called twice and
    must yield the same matrices). Written into a temporary folder renamed onto ``folder`` at the end.
    """
    from retromae_ir.io import atomic_dir

    counts, documents = np.zeros(vocab, np.int64), 0
    for chunk in chunks():
        chunk = _canonical(chunk)
        _check_chunk(chunk, vocab, documents)
        counts += np.bincount(chunk.indices, minlength=vocab)
        documents += chunk.shape[0]
    if documents >= np.iinfo(np.int32).max:
        raise ValueError(f"{documents} documents: the OT store numbers documents in int32")
    offsets = np.zeros(vocab + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    postings = int(offsets[-1])
    with atomic_dir(folder) as tmp:
        np.save(tmp / "offsets.npy", offsets)
        docs = np.lib.format.open_memmap(tmp / "docs.npy", mode="w+", dtype=np.int32, shape=(postings,))
        weights = np.lib.format.open_memmap(tmp / "weights.npy", mode="w+", dtype=np.float16, shape=(postings,))
        cursor, first = offsets[:-1].copy(), 0
        for chunk in chunks():
            chunk = _canonical(chunk)
            for start in range(0, chunk.shape[0], ROWS_PER_PASS):
                _scatter(chunk[start:start + ROWS_PER_PASS], first + start, vocab, cursor, docs, weights)
            first += chunk.shape[0]
        if first != documents or not np.array_equal(cursor, offsets[1:]):
            raise RuntimeError("the OT chunks changed between the writer's two passes")
        docs.flush()
        weights.flush()
        del docs, weights
        meta = {"store": STORE, "version": VERSION, "layout": "term-major CSR", "documents": documents,
                "vocab": vocab, "postings": postings, "dtypes": {k: np.dtype(v).name for k, v in FILES.items()},
                "bytes": int(sum((tmp / f"{name}.npy").stat().st_size for name in FILES))}
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _canonical(matrix) -> scipy.sparse.csr_matrix:
    """CSR with each (document, term) once and sorted terms; a copy only when the input is not already so."""
    matrix = scipy.sparse.csr_matrix(matrix)
    if not matrix.has_canonical_format:
        matrix = matrix.copy()
        matrix.sum_duplicates()
    return matrix


def _check_chunk(chunk, vocab: int, first: int) -> None:
    if chunk.shape[1] != vocab:
        raise ValueError(f"OT chunk at document {first} has a vocabulary of {chunk.shape[1]}, expected {vocab}")
    _check_weights(chunk.data, f"OT chunk at document {first}")


def _check_weights(data: np.ndarray, where: str) -> None:
    if len(data) and not (np.isfinite(data).all() and np.abs(data).max() <= FLOAT16_MAX):
        raise ValueError(f"{where}: OT weights must be finite and at most {FLOAT16_MAX:g} (float16) in size; "
                         f"the largest is {np.abs(data).max()}")


def _scatter(chunk: scipy.sparse.csr_matrix, first: int, vocab: int, cursor: np.ndarray, docs: np.ndarray,
             weights: np.ndarray) -> None:
    """Place a chunk's postings after those already written for each term (rows stay ascending per term)."""
    rows = np.repeat(np.arange(first, first + chunk.shape[0], dtype=np.int32), np.diff(chunk.indptr))
    order = np.argsort(chunk.indices, kind="stable")  # by term; CSR order keeps rows ascending within a term
    terms = chunk.indices[order]
    counts = np.bincount(terms, minlength=vocab)
    run_start = np.cumsum(counts) - counts
    positions = cursor[terms] + (np.arange(len(terms)) - run_start[terms])
    docs[positions] = rows[order]
    weights[positions] = chunk.data[order].astype(np.float16)
    cursor += counts
