"""Document ids as one bytes block plus offsets: an index's docid file, a pre-training corpus's documents. Shared
by search and pre-training, so it lives with the data."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


class DocidTable(Sequence):
    """The lines of a docid file as a read-only sequence of str, held as one bytes block plus int64 offsets (a
    Python list of 8.8M short strings takes about 0.6 GB; this about 0.2 GB)."""

    def __init__(self, data: bytes):
        if data and not data.endswith(b"\n"):
            data += b"\n"
        self._data = data
        self._offsets = np.concatenate([[0], np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1]).astype(np.int64)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        i = int(item)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"docid row {item} out of range for {len(self)} documents")
        return self._data[self._offsets[i]:self._offsets[i + 1] - 1].decode()

    def take(self, rows) -> list[str]:
        """The docids of many rows at once (numpy array or list of ints)."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"docid rows outside [0, {len(self)})")
        data, starts, ends = self._data, self._offsets[rows].tolist(), (self._offsets[rows + 1] - 1).tolist()
        return [data[a:b].decode() for a, b in zip(starts, ends)]

    def __iter__(self):
        return (line.decode() for line in self._data.split(b"\n")[:len(self)])

    @classmethod
    def of(cls, docids: Iterable[str]) -> "DocidTable":
        """The table of ``docids`` (ids hold no line break: the readers refuse control characters in them)."""
        return cls("".join(f"{docid}\n" for docid in docids).encode())

    @property
    def data(self) -> bytes:
        """The docid file's bytes: one id a line."""
        return self._data
