"""faiss index files at a size past the machine's memory: a flat inner-product index written row by row, and any
index read memory-mapped.

faiss builds an ``IndexFlatIP`` in memory before ``write_index`` (27.0 GB for MS MARCO's 8.8M passages at 768
dimensions, more than a 24 GB machine) and ``read_index`` copies the file into memory. The file of a flat index is
faiss's serialised header followed by the float32 rows, so :class:`FlatIndexFile` writes the header (made by
faiss itself) and then each chunk of rows as it comes; :func:`read_index` maps the file (faiss's
``IO_FLAG_MMAP_IFC``): the vectors stay in the page cache, which the kernel fills and drops as memory allows, and
search reads them from there. A flat index larger than the memory there is for it is searched by
:class:`FlatScan` instead, which reads each row once a search.
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

logger = logging.getLogger(__name__)
_CODES_LENGTH = struct.Struct("=Q")  # the codes' length in 4-byte words, just before them (native order, as faiss)
_MADV_NORMAL = 0
FLAT_IP = b"IxFI"  # the first four bytes of faiss's file of an IndexFlatIP
FAISS_BLOCK_ROWS = 1024  # faiss's distance_compute_blas_database_bs: the rows of each of its products
SCAN_BLOCK_BYTES = 64 << 20


class NonFiniteRowError(ValueError):
    """A row with NaN or infinity: no search could rank it (``row``: its number in the index)."""

    def __init__(self, row: int, where):
        super().__init__(f"{where}: row {row} is not finite (NaN or infinity): no search could rank it")
        self.row = row


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
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        finite = np.isfinite(vectors).all(axis=1)  # after the cast: a float64 past float32's range becomes inf
        if not finite.all():
            raise NonFiniteRowError(self.written + int(np.argmin(finite)), self.path)
        vectors.tofile(self._out)
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


class FlatScan:
    """faiss's exact inner-product search of the flat index file at ``path``, reading the rows a block at a time
    with ``pread`` and each row once a search, for an index larger than the memory there is for it.

    Mapped, such an index is read from disk on every search, and more than once: a scan of 1.659 GB under a
    1.25 GiB limit read 53 GB, the kernel dropping pages before the scan reached them (runs/flat-index-mmap/). Here
    the next block is read while faiss scores the current one, and the pages read are dropped from the cache
    behind (``POSIX_FADV_DONTNEED``), which keeps the cache for the OT store. Each block starts at a multiple of
    faiss's own 1,024-row blocks, so faiss's products see the same rows and the scores are those of a search of
    the whole index by the same queries (tied scores may come in another order). Each search measures the rows'
    largest norm on the way (:attr:`max_row_norm`, for ``search.dense_top``'s rounding bound)."""

    def __init__(self, path: str | os.PathLike, dims: int, rows: int, block_bytes: int = SCAN_BLOCK_BYTES):
        self.path, self.dims, self.rows = Path(path), dims, rows
        # kept open: a file renamed over ``path`` later (a merge, dense-index) is not the one the mapping reads
        self._file = open(self.path, "rb", buffering=0)
        try:
            self._rows = _reopen(self._file)  # for single rows (:meth:`read_rows`), without read-ahead
        except (OSError, ValueError):
            self._file.close()
            raise
        self.offset, header = os.fstat(self._file.fileno()).st_size - 4 * dims * rows, _header(dims, rows)
        if self.offset != len(header) or os.pread(self._file.fileno(), self.offset, 0) != header:
            self._file.close()
            os.close(self._rows)
            raise ValueError(f"{self.path} is not faiss's file of a flat inner-product index of {rows} x {dims}")
        per_block = max(1, block_bytes // (4 * dims * FAISS_BLOCK_ROWS))
        self.block_rows = per_block * FAISS_BLOCK_ROWS
        self.max_row_norm: float | None = None  # known once a search has read every row

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
            os.close(self._rows)

    def __del__(self):
        if hasattr(self, "_rows"):
            self.close()

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) [len(queries), k] as ``IndexFlatIP.search`` gives them (rows past the index: -1)."""
        import faiss

        queries = np.ascontiguousarray(queries, dtype=np.float32)
        best = faiss.ResultHeap(len(queries), k, keep_max=True)  # faiss's own heaps, as its search merges its blocks
        largest = 0.0
        buffers = [np.empty((min(self.block_rows, self.rows), self.dims), np.float32) for _ in range(2)]
        starts = range(0, self.rows, self.block_rows)
        with ThreadPoolExecutor(1) as reader:
            pending = reader.submit(self._read, 0, buffers[0])
            for number, start in enumerate(tqdm(starts, desc="dense scan", unit="block", leave=False)):
                block = pending.result()
                if start + self.block_rows < self.rows:
                    pending = reader.submit(self._read, start + self.block_rows, buffers[(number + 1) % 2])
                scores, rows = faiss.knn(queries, block, min(k, len(block)), faiss.METRIC_INNER_PRODUCT)
                best.add_result(scores, np.where(rows >= 0, rows + start, -1))
                largest = float(np.maximum(largest, largest_squared_norm(block)))  # NaN stays NaN
        best.finalize()
        self.max_row_norm = float(np.sqrt(largest))
        return best.D, best.I

    def read_rows(self, ids: np.ndarray) -> np.ndarray:
        """The vectors of rows ``ids`` [len(ids), dims], each read with its own ``pread`` (neighbours in one), in
        file order: read through the index's mapping, each row's page fault read ahead 128 KiB or more, which
        evicted the OT store's pages under a memory limit and made the whole searcher 37% slower
        (runs/flat-index-mmap/run7.sh)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.rows):
            raise IndexError(f"rows {ids.min()}..{ids.max()} asked of {self.path}, which has {self.rows}")
        wanted, where = np.unique(ids, return_inverse=True)
        found = np.empty((len(wanted), self.dims), np.float32)
        breaks = np.flatnonzero(np.diff(wanted) != 1) + 1
        for run in np.split(np.arange(len(wanted)), breaks) if len(wanted) else []:
            first = int(wanted[run[0]])
            done = self._pread_into(self._rows, found[run[0]:run[0] + len(run)], first)
            if len(run) >= FAISS_BLOCK_ROWS and hasattr(os, "posix_fadvise"):  # a stretch, not a row: as a scan
                os.posix_fadvise(self._rows, self.offset + 4 * self.dims * first, done, os.POSIX_FADV_DONTNEED)
        if len(wanted) == len(ids) and (len(ids) < 2 or (np.diff(ids) > 0).all()):
            return found  # asked in file order: no copy
        return found[where.reshape(-1)]

    def _read(self, start: int, buffer: np.ndarray) -> np.ndarray:
        """Rows [start, start + block) into ``buffer``, then their pages dropped from the cache."""
        rows = min(self.block_rows, self.rows - start)
        done = self._pread_into(self._file.fileno(), buffer[:rows], start)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._file.fileno(), self.offset + 4 * self.dims * start, done, os.POSIX_FADV_DONTNEED)
        return buffer[:rows]

    def _pread_into(self, descriptor: int, rows: np.ndarray, start: int) -> int:
        """The file's rows from ``start`` into the contiguous array ``rows``, in as many reads as it takes."""
        view = memoryview(rows.reshape(-1).view(np.uint8))
        position, done = self.offset + 4 * self.dims * start, 0
        while done < len(view):
            got = os.preadv(descriptor, [view[done:]], position + done)
            if got == 0:
                raise ValueError(f"{self.path} ends at byte {position + done}: shorter than its {self.rows} rows")
            done += got
        return done


def largest_squared_norm(rows: np.ndarray) -> float:
    """The largest squared norm of ``rows`` [n >= 1, d] (NaN where a row holds one: a bound must not skip it)."""
    return float(np.einsum("ij,ij->i", rows, rows).max())


def _reopen(file) -> int:
    """A second descriptor of the file ``file`` has open (not of whatever its path names now), with its own
    read-ahead state, advised random: single rows read through it neither read ahead nor disturb the scan's."""
    status = os.fstat(file.fileno())
    proc = f"/proc/self/fd/{file.fileno()}"
    descriptor = os.open(proc if os.path.exists(proc) else file.name, os.O_RDONLY)
    again = os.fstat(descriptor)
    if (again.st_dev, again.st_ino) != (status.st_dev, status.st_ino):
        os.close(descriptor)
        raise ValueError(f"{file.name} was replaced while it was opened")
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_RANDOM)
    return descriptor


def blas_rows(dims: int) -> int:
    """The fewest queries of ``dims`` floats that faiss scores with one BLAS product (167 at 768-d)."""
    import faiss

    return -(-faiss.cvar.distance_compute_blas_threshold // dims)


def blas_sized(queries: np.ndarray) -> np.ndarray:
    """``queries`` with rows of zeros added up to the size from which faiss scores them with one BLAS product
    (``distance_compute_blas_threshold`` floats, 128,000 in faiss 1.15: 167 queries at 768 dimensions); below it
    faiss scores pair by pair, 14-18 GFLOP/s against 116-162 from 167 queries on (2 threads, AVX2 EPYC:
    runs/flat-index-mmap/knn_paths.txt). Left as they are below an eighth of that size, where pair by pair costs
    less than the padding (16 queries 0.031 s a block, padded 0.037 s; 21 queries 0.047 s)."""
    wanted = blas_rows(queries.shape[1])
    if len(queries) >= wanted or 8 * len(queries) < wanted:
        return queries
    return np.concatenate([queries, np.zeros((wanted - len(queries), queries.shape[1]), np.float32)])


def scan_if_too_big(path: str | os.PathLike, dims: int, rows: int):
    """A :class:`FlatScan` of the flat index file ``path`` where it is larger than the memory there is for it
    (:func:`retromae_ir.hardware.memory_available`), else None (faiss searches its mapped vectors)."""
    from retromae_ir.hardware import memory_available

    size, available = Path(path).stat().st_size, memory_available()
    if available is None or size <= available:
        return None
    logger.info("%s (%.2f GiB) is larger than the memory there is for it (%.2f GiB): searched by reading it a "
                "block at a time, each row once a search", path, size / (1 << 30), available / (1 << 30))
    return FlatScan(path, dims, rows)
