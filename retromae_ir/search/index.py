"""A retromae_ir index directory (see retromae_ir/encode/corpus.py) loaded for exact scoring, with every check that
turns a wrong combination into an error instead of a silently wrong ranking."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.sparse

from retromae_ir.encode.cards import EncoderCard, load_card
from retromae_ir.encode.manifest import IndexMismatchError, check_card, read_manifest

MODES = ("hybrid", "dense", "sparse")


class HybridIndex:
    """docids, the faiss flat index and its stored vectors [N, d'], and (DupMAE) the float OT vectors [N, V]."""

    def __init__(self, directory: str | os.PathLike, card: EncoderCard | str):
        import faiss

        self.directory = Path(directory)
        self.card = load_card(card)
        self.manifest = read_manifest(self.directory)
        if self.manifest.get("scale") != self.card.scale:
            raise IndexMismatchError(f"{self.directory} was quantised with scale {self.manifest.get('scale')}, "
                                     f"the card {self.card.name!r} says {self.card.scale}")
        check_card(self.manifest, self.card, str(self.directory))
        dense_dir = self.directory / "dense"
        for name in ("index", "docid"):
            if not (dense_dir / name).is_file():
                raise IndexMismatchError(f"{dense_dir / name} is missing: the dense index is incomplete")
        self.faiss_index = faiss.read_index(str(dense_dir / "index"))
        self.docids = (dense_dir / "docid").read_text().splitlines()
        if self.faiss_index.ntotal == 0:
            raise IndexMismatchError(f"{dense_dir} is an empty index (0 vectors)")
        if self.faiss_index.d != self.card.dims:
            raise IndexMismatchError(f"{dense_dir} holds {self.faiss_index.d}-d vectors, the card gives {self.card.dims}")
        if len(self.docids) != self.faiss_index.ntotal:
            raise IndexMismatchError(f"{dense_dir}: {len(self.docids)} docids for {self.faiss_index.ntotal} vectors")
        self.dense = self.faiss_index.reconstruct_n(0, self.faiss_index.ntotal)
        self.sparse = self.inverted = None
        if self.card.sparse:
            path = self.directory / "sparse" / "vectors.npz"
            if not path.is_file():
                raise IndexMismatchError(f"{path} is missing: the sparse side of {self.directory} is incomplete")
            self.sparse = scipy.sparse.load_npz(path).tocsr()
            if self.sparse.shape[0] != len(self.docids):
                raise IndexMismatchError(f"{path}: {self.sparse.shape[0]} rows for {len(self.docids)} documents")
            self.inverted = self.sparse.T.tocsr()  # term -> postings: a query touches only its terms' rows

    def __len__(self) -> int:
        return len(self.docids)

    def check_queries(self, dense: np.ndarray, sparse, mode: str) -> None:
        """Query vectors must match the index's dimensions; sparse modes need a sparse side."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        if dense.ndim != 2 or dense.shape[1] != self.faiss_index.d:
            raise IndexMismatchError(f"query vectors have shape {dense.shape}, the index holds "
                                     f"{self.faiss_index.d}-d vectors")
        if mode != "dense":
            if self.sparse is None:
                raise IndexMismatchError(f"mode {mode!r} needs a sparse side; card {self.card.name!r} has none")
            if sparse is None or sparse.shape[1] != self.sparse.shape[1]:
                shape = None if sparse is None else sparse.shape
                raise IndexMismatchError(f"sparse query vectors have shape {shape}, the index vocabulary is "
                                         f"{self.sparse.shape[1]}")
