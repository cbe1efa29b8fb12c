"""faiss index files at a size past the machine's memory: a flat inner-product index written row by row, and any
index read memory-mapped.

faiss builds an ``IndexFlatIP`` in memory before ``write_index`` (27.0 GB for MS MARCO's 8.8M passages at 768
dimensions, more than a 24 GB machine) and ``read_index`` copies the file into memory. The file of a flat index is
faiss's serialised header followed by the float32 rows, so :class:`FlatIndexFile` writes the header (made by
faiss itself) and then each chunk of rows as it comes; :func:`read_index` maps the file (faiss's
``IO_FLAG_MMAP_IFC``): the rows stay in the page cache, which the kernel fills and drops as memory allows, and
search reads them from there.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

_CODES_LENGTH = struct.Struct("<Q")  # the codes' length in 4-byte words, just before them


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
            raise ValueError(f"{self.path}: vectors of shape {vectors.shape} for a {self.dims}-d index")
        if self.written + len(vectors) > self.rows:
            raise ValueError(f"{self.path}: more than the {self.rows} rows the index was opened for")
        self._out.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
        self.written += len(vectors)

    def close(self) -> None:
        self._out.close()
        if self.written != self.rows:
            raise ValueError(f"{self.path}: {self.written} rows written, the index was opened for {self.rows}")
        index = read_index(self.path)
        if (index.d, index.ntotal) != (self.dims, self.rows) or self.path.stat().st_size != self.size:
            raise RuntimeError(f"{self.path}: faiss reads {index.ntotal} x {index.d}, not the {self.rows} x "
                               f"{self.dims} written: this faiss's flat index format is not the one written here")

    def __enter__(self) -> FlatIndexFile:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self._out.close()


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
    """The faiss index at ``path`` with its vectors (flat, scalar-quantised, HNSW's storage) memory-mapped rather
    than copied into memory; other parts (IVF lists, graphs) are read as ``faiss.read_index`` reads them."""
    import faiss

    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
