"""DIR/dense/index rebuilt as another faiss index (``faiss.index_factory``) from the flat one ``merge`` wrote,
without the flat vectors in memory: they are read memory-mapped, a training sample and one block at a time.

At MS MARCO's 8.8M passages and 768 dimensions the flat index is 25.2 GiB, more than a 24 GB machine can hold
for search; ``SQfp16`` is half of it and scores the same ranking to float16 precision (docs/encoders.md, "The
dense side at 8.8M passages", says what each factory does to exactness). The exact searcher, brute force and
Pyserini's ``FaissSearcher`` read any of them.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
from tqdm import tqdm

from retromae_ir.encode.manifest import (MANIFEST, IndexMismatchError, checksums, read_manifest,
                                         write_manifest_fields)
from retromae_ir.flat_index import FLAT_IP, codes_storage, flat_ip_kind, flat_view, read_index
from retromae_ir.io import atomic_dir

logger = logging.getLogger(__name__)
BLOCK = 65_536  # rows added at a time: 192 MiB of float32 at 768 dimensions


def rebuild_dense(directory: str | os.PathLike, factory: str, train_size: int = 100_000, nprobe: int | None = None,
                  seed: int = 0) -> dict:
    """Replace ``directory``'s flat dense index by ``faiss.index_factory(d, factory, METRIC_INNER_PRODUCT)``,
    trained (where it needs training) on ``train_size`` rows drawn with ``seed``, and record it in the manifest
    (its name and the dense files' checksums). The caller holds the directory's lock. Returns the manifest."""
    import faiss

    directory = Path(directory)
    if factory == "Flat":
        raise ValueError("the dense index merge writes is flat already: name another faiss index_factory string")
    manifest = read_manifest(directory)
    if manifest.get("dense_index", "Flat") != "Flat":
        raise IndexMismatchError(f"{directory}'s dense index is already {manifest['dense_index']}: rebuild it from "
                                 f"the flat one (`python -m retromae_ir.encode merge` writes it again from the chunks "
                                 f"under {directory / '.work'})")
    if flat_ip_kind(directory / "dense" / "index") != FLAT_IP:  # replaced by hand: an L2 one would turn IP
        raise IndexMismatchError(f"{directory / 'dense' / 'index'} is not the flat inner-product index merge "
                                 f"writes, though its manifest names none other")
    flat = read_index(directory / "dense" / "index")
    vectors = flat_view(flat)  # read-only, over the mapped file; it keeps the flat index alive
    index = _factory_index(flat.d, factory)
    if nprobe is not None and faiss.try_extract_index_ivf(index) is None:
        raise ValueError(f"--nprobe is for an IVF index, not {factory}")
    logger.info("rebuilding %s's flat dense index (%d x %d, memory-mapped) as %s", directory, flat.ntotal, flat.d,
                factory)
    fields = {"dense_index": factory, "dense_index_nprobe": nprobe}
    if not index.is_trained:
        rows = np.sort(np.random.default_rng(seed).choice(flat.ntotal, min(flat.ntotal, train_size), replace=False))
        logger.info("training %s on %d of %d vectors", factory, len(rows), flat.ntotal)
        index.train(np.ascontiguousarray(vectors[rows]))
        fields.update(dense_index_trained_on=len(rows), dense_index_seed=seed)
    if nprobe is not None:
        faiss.extract_index_ivf(index).nprobe = nprobe
    reserve_codes(index, flat.ntotal)
    for start in tqdm(range(0, flat.ntotal, BLOCK), desc=f"dense index {factory}", unit="block"):
        index.add(np.ascontiguousarray(vectors[start:start + BLOCK]))
    with atomic_dir(directory / "dense") as tmp:
        shutil.copyfile(directory / "dense" / "docid", tmp / "docid")
        faiss.write_index(index, str(tmp / "index"))
        written = {f"dense/{name}": digest for name, digest in checksums(tmp, ["."]).items()}
        (directory / MANIFEST).unlink()  # last before the swap: a search opening meanwhile sees it gone, and a
        # failure before here leaves the flat index and its manifest as they were
    files = {name: digest for name, digest in manifest.get("files", {}).items() if not name.startswith("dense/")}
    return write_manifest_fields(directory, manifest, files={**files, **written}, **fields)


def _factory_index(dims: int, factory: str):
    """``faiss.index_factory(dims, factory, METRIC_INNER_PRODUCT)``; a string faiss does not read, or one with a
    transform before the index (its reconstructions are not the encoder's vectors), is refused."""
    import faiss

    try:
        index = faiss.index_factory(dims, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise ValueError(f"faiss.index_factory({dims}, {factory!r}) fails: "
                         f"{str(exc).strip().splitlines()[-1]}") from None
    if isinstance(faiss.downcast_index(index), faiss.IndexPreTransform):
        raise ValueError(f"{factory!r} transforms the vectors before indexing them: the candidates' dense scores "
                         f"would not be the inner product Eq. 12 adds")
    return index


def reserve_codes(index, rows: int) -> None:
    """Give the vector storage of ``index`` (an IndexFlatCodes: flat, scalar-quantised, PQ, or an HNSW index's
    storage) the capacity of ``rows`` before they are added. ``add`` grows it like a std::vector, by doubling with
    a copy, so a 540,000 x 768 ``SQfp16`` index briefly held 1.52 GiB for its 0.77 (runs/flat-index-mmap/); grown
    once and emptied, the storage keeps its capacity and is never copied. Other indexes (IVF lists) are left."""
    storage = codes_storage(index)
    if storage is not None and storage.ntotal == 0:
        storage.codes.resize(rows * storage.code_size)
        storage.codes.resize(0)
