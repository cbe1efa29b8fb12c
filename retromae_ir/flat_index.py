"""faiss index files at a size past the machine's memory: a flat inner-product index written row by row, and any
index read memory-mapped.

faiss builds an ``IndexFlatIP`` in memory before ``write_index`` (27.0 GB for MS MARCO's 8.8M passages at 768
dimensions, more than a 24 GB machine) and ``read_index`` copies the file into memory. The file of a flat index is
faiss's serialised header followed by the float32 rows, so :class:`FlatIndexFile` writes the header (made by
faiss itself) and then each chunk of rows as it comes; :func:`read_index` maps the file (faiss's
``IO_FLAG_MMAP_IFC``): the vectors stay in the page cache, which the kernel fills and drops as memory allows, and
search reads them from there.
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import sys
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)
_CODES_LENGTH = struct.Struct("=Q")  # the codes' length in 4-byte words, just before them (native order, as faiss)
_MADV_NORMAL = 0
FLAT_IP = b"IxFI"  # the first four bytes of faiss's file of an IndexFlatIP


class FlatIndexFile:
    """The file faiss's ``write_index`` writes for an ``IndexFlatIP`` of ``rows`` x ``dims`` float32 vectors,
    written one chunk at a time (:meth:`add`); :meth:`close` checks that exactly ``rows`` came and that faiss reads
    the file back as that index."""

    def __init__(self, path: str | os.PathLike, dims: int, rows: int):
        self.path, self.dims, self.rows, self.written = Path(path), dims, rows, 0
        header = _header(dims, rows)
        self.size = len(header) + 4 * dims * rows
        self._out = open(self.path, "wb")
        self._out.write(header)

    def add(self, vectors: np.ndarray) -> None:
        if vectors.ndim != 2 or vectors.shape[1] != self.dims:
            raise ValueError(f"vectors of shape {vectors.shape} for a {self.dims}-d index")
        if self.written + len(vectors) > self.rows:
            raise ValueError(f"more than the {self.rows} rows the index was opened for")
        np.ascontiguousarray(vectors, dtype=np.float32).tofile(self._out)
        self.written += len(vectors)

    def close(self) -> None:
        self._out.close()
        if self.written != self.rows:
            raise ValueError(f"{self.written} rows, the index was opened for {self.rows}")
        if self.path.stat().st_size != self.size:
            raise RuntimeError(f"{self.path}: {self.path.stat().st_size} bytes written, {self.size} expected")
        if not _can_map():  # reading it back would read it all into memory
            return
        index = read_index(self.path)
        if (index.d, index.ntotal) != (self.dims, self.rows):
            raise RuntimeError(f"{self.path}: faiss reads {index.ntotal} x {index.d}, not the {self.rows} x "
                               f"{self.dims} written: this faiss's flat index format is not the one written here")

    def __enter__(self) -> FlatIndexFile:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self._out.close()


def flat_ip_kind(path: str | os.PathLike) -> bytes:
    """The first four bytes of the faiss index file ``path`` (``FLAT_IP`` for an IndexFlatIP); a missing or
    unreadable file is an error naming it."""
    try:
        with open(path, "rb") as index:
            return index.read(4)
    except OSError as exc:
        raise ValueError(f"{path} is missing or unreadable ({exc.strerror}): the dense index is incomplete") from None


def _header(dims: int, rows: int) -> bytes:
    """faiss's serialised ``IndexFlatIP(dims)`` holding ``rows`` vectors, up to the first vector: faiss serialises
    an index whose count says ``rows`` but whose storage is empty, which ends with the storage's length (0)."""
    import faiss

    index = faiss.IndexFlatIP(dims)
    index.ntotal = rows
    serialised = faiss.serialize_index(index).tobytes()
    if not serialised.endswith(_CODES_LENGTH.pack(0)):
        raise RuntimeError(f"faiss {faiss.__version__} serialises a flat index in a form this writer does not know")
    return serialised[:-_CODES_LENGTH.size] + _CODES_LENGTH.pack(rows * dims)


def read_index(path: str | os.PathLike):
    """The faiss index at ``path`` with its vectors memory-mapped rather than copied into memory (on faiss 1.15:
    flat and scalar-quantised codes, an HNSW index's storage, IVF lists), with the kernel's read-ahead back on
    for the flat and scalar-quantised codes (faiss maps for random access: a flat scan from disk read a page a
    fault, and none finished in 300 s where one with read-ahead took 36-45 s; runs/flat-index-mmap/). A faiss
    without the flag, or on a platform it maps nothing on, reads the index into memory, and says so. A
    pre-transform (``L2norm``, ``PCA``, ``OPQ``) is refused: it changes the vectors, so reconstructed candidates
    would not score the inner product Eq. 12 adds."""
    import faiss

    if not _can_map():
        logger.warning("faiss %s cannot map an index's vectors: %s is read into memory", faiss.__version__, path)
        return _refuse_transform(faiss.read_index(str(path)), path)
    try:
        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
    except RuntimeError as exc:  # a platform faiss maps nothing on ("Not implemented"), not a bad file
        if "not implemented" not in str(exc).lower():
            raise
        logger.warning("faiss cannot map files here: %s is read into memory", path)
        index = faiss.read_index(str(path))
    index = _refuse_transform(index, path)
    storage = codes_storage(index)
    if storage is not None and storage.codes.size():
        _advise_normal(int(storage.codes.data()), storage.codes.size())
    return index


def _can_map() -> bool:
    """Whether this faiss maps an index's vectors (it has ``IO_FLAG_MMAP_IFC``; 1.15 does)."""
    import faiss

    return hasattr(faiss, "IO_FLAG_MMAP_IFC")


def _refuse_transform(index, path):
    import faiss

    if isinstance(faiss.downcast_index(index), faiss.IndexPreTransform):
        raise ValueError(f"{path} applies a transform before its index (IndexPreTransform: L2norm, PCA, OPQ ...): "
                         f"its reconstructed vectors are not the encoder's, so Eq. 12 would not be the inner product")
    return index


def codes_storage(index):
    """The IndexFlatCodes that holds ``index``'s vectors (flat, scalar-quantised, PQ; an HNSW index's storage),
    else None (IVF lists and others)."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexHNSW):
        index = faiss.downcast_index(index.storage)
    return index if isinstance(index, faiss.IndexFlatCodes) else None


def _advise_normal(address: int, size: int) -> None:
    """madvise(MADV_NORMAL) over the pages of [address, address + size): best effort (Linux, glibc)."""
    if not sys.platform.startswith("linux"):
        return
    start = address - address % mmap.PAGESIZE
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(address + size - start), _MADV_NORMAL)
    except Exception:  # advice only: a libc without madvise searches as faiss mapped it
        pass


def flat_view(index) -> np.ndarray | None:
    """[ntotal, d] read-only float32 view of an IndexFlat's vectors (no copy; it keeps the index alive), or None
    for other index types. Mapped from the file faiss wrote, the rows start 45 bytes in: the view is not 4-byte
    aligned, which numpy handles, some operations more slowly than on an aligned copy."""
    import faiss

    if not isinstance(faiss.downcast_index(index), faiss.IndexFlat):
        return None
    return np.asarray(_Buffer(index, (index.ntotal, index.d)))


class _Buffer:
    """Exposes a faiss flat index's float storage to numpy and keeps the index alive as the array's base."""

    def __init__(self, index, shape: tuple[int, int]):
        self.index = index
        self.__array_interface__ = {"shape": shape, "typestr": "=f4", "version": 3,
                                    "data": (int(index.get_xb()), True)}
