"""Corpus encoding: resumable shards of chunks, then a merge into Pyserini's index layouts.

    DIR/dense/{index,docid}          faiss IndexFlatIP + one docid per line (FaissSearcher's layout)
    DIR/sparse/collection/docs.jsonl JsonVectorCollection, integer impacts round(w * scale)
    DIR/sparse/index/                Lucene impact index (pyserini.index.lucene --impact --pretokenized)
    DIR/sparse/vectors.npz           the float OT vectors (CSR, docid order), for exact Eq. 12 scoring
    DIR/manifest.json                written last: card, dims, k, scale, counts, checksums, versions

Shard ``i`` of ``n`` encodes a contiguous slice of the corpus into DIR/.work/<sources>-of-<n>/shard-<i>/ (sources:
the card's fingerprint and its checkpoint's weight files, so chunks of retrained weights are never resumed onto)
as chunk files written atomically; a rerun skips finished chunks, so an interrupted job resumes where it stopped.
Shards can run as separate processes or GPUs (``torchrun`` sets RANK/WORLD_SIZE); ``merge`` joins them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import scipy.sparse
from tqdm import tqdm

from retromae_ir.encode.cards import EncoderCard
from retromae_ir.encode.manifest import IndexMismatchError, checksums, write_manifest
from retromae_ir.encode.representation import impact_dicts
from retromae_ir.io import atomic_dir, atomic_write

logger = logging.getLogger(__name__)
WORK = ".work"


def read_corpus(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(docids, contents) of a BEIR corpus.jsonl or an MS MARCO collection.tsv; an empty corpus is an error."""
    from retromae_ir.data.readers import iter_corpus

    docids, texts = [], []
    for doc in iter_corpus(path):
        docids.append(doc.docid)
        texts.append(doc.contents)
    if not docids:
        raise ValueError(f"{path}: the corpus is empty")
    return docids, texts


def shard_range(total: int, shard_id: int, shard_num: int) -> tuple[int, int]:
    """Contiguous, near-equal slice [start, end) of ``total`` items for shard ``shard_id`` of ``shard_num``."""
    if not 0 <= shard_id < shard_num:
        raise ValueError(f"--shard-id must be in [0, {shard_num}), got {shard_id}")
    return total * shard_id // shard_num, total * (shard_id + 1) // shard_num


def work_dir(output: Path, card: EncoderCard, shard_num: int, int8: bool = False) -> Path:
    """Chunks are resumed only onto chunks of the same card, weights and precision."""
    sources = json.dumps([card.fingerprint(), card.weight_digests()] + (["int8"] if int8 else []), sort_keys=True)
    return Path(output) / WORK / f"{hashlib.sha256(sources.encode()).hexdigest()[:16]}-of-{shard_num}"


def encode_shard(model, docids: list[str], texts: list[str], output: Path, shard_id: int = 0, shard_num: int = 1,
                 chunk_size: int = 4096, batch_size: int = 64) -> Path:
    """Encode this shard's chunks that are not on disk yet; mark the shard done. Returns the shard folder."""
    start, end = shard_range(len(docids), shard_id, shard_num)
    folder = work_dir(output, model.card, shard_num, model.int8) / f"shard-{shard_id}"
    folder.mkdir(parents=True, exist_ok=True)
    _check_same_slice(folder, docids[start:end])
    chunks = range(start, end, chunk_size)
    for chunk_start in tqdm(chunks, desc=f"shard {shard_id}/{shard_num}", unit="chunk"):
        path = folder / f"chunk-{chunk_start:012d}.npz"
        if path.is_file():
            continue
        chunk_end = min(chunk_start + chunk_size, end)
        encoded = model.encode_passage(texts[chunk_start:chunk_end], batch_size, progress=True)
        arrays = {"docids": np.array(docids[chunk_start:chunk_end], dtype=str), "dense": encoded.dense}
        if encoded.sparse is not None:
            arrays.update(data=encoded.sparse.data, indices=encoded.sparse.indices, indptr=encoded.sparse.indptr,
                          vocab=np.array(encoded.sparse.shape[1]))
        with atomic_write(path, "wb") as out:
            np.savez(out, **arrays)
        logger.info("shard %d: documents %d-%d encoded", shard_id, chunk_start, chunk_end)
    with atomic_write(folder / "DONE") as out:
        json.dump({"start": start, "end": end, "chunks": len(chunks)}, out)
    return folder


def _check_same_slice(folder: Path, docids: list[str]) -> None:
    """Resume only onto chunks of the same documents: a changed corpus must not mix with old chunks."""
    digest = hashlib.sha256("\n".join(docids).encode()).hexdigest()
    meta = folder / "slice.json"
    if meta.is_file() and json.loads(meta.read_text())["docids_sha256"] != digest:
        raise IndexMismatchError(f"{folder} holds chunks of different documents (the corpus changed): "
                                 "remove it, or use another --output")
    if not meta.is_file():
        with atomic_write(meta) as out:
            json.dump({"documents": len(docids), "docids_sha256": digest}, out)


def _load_shards(output: Path, card: EncoderCard, shard_num: int, int8: bool):
    root = work_dir(output, card, shard_num, int8)
    docids, dense, sparse = [], [], []
    for shard_id in range(shard_num):
        folder = root / f"shard-{shard_id}"
        if not (folder / "DONE").is_file():
            raise IndexMismatchError(f"shard {shard_id} of {shard_num} is not finished ({folder}): run it "
                                     f"(--shard-id {shard_id} --shard-num {shard_num}) before merging")
        for path in sorted(folder.glob("chunk-*.npz")):
            with np.load(path) as chunk:
                docids.extend(chunk["docids"].tolist())
                dense.append(chunk["dense"])
                if card.sparse:
                    sparse.append(scipy.sparse.csr_matrix(
                        (chunk["data"], chunk["indices"], chunk["indptr"]),
                        shape=(len(chunk["docids"]), int(chunk["vocab"]))))
    if not docids:
        raise IndexMismatchError(f"no encoded chunks under {root}")
    return docids, np.concatenate(dense), (scipy.sparse.vstack(sparse, format="csr") if sparse else None)


def merge(output: str | os.PathLike, card: EncoderCard, vocab: list[str], shard_num: int = 1, threads: int = 1,
          extra: dict | None = None, int8: bool = False) -> Path:
    """Join the shards (encoded in int8 or not) into DIR/dense and DIR/sparse, build the Lucene impact index,
    write the manifest."""
    import faiss

    output = Path(output)
    docids, dense, sparse = _load_shards(output, card, shard_num, int8)
    if dense.shape[1] != card.dims:
        raise IndexMismatchError(f"encoded vectors have {dense.shape[1]} dimensions, the card says {card.dims}")
    with atomic_dir(output / "dense") as tmp:
        index = faiss.IndexFlatIP(card.dims)
        index.add(np.ascontiguousarray(dense, dtype=np.float32))
        faiss.write_index(index, str(tmp / "index"))
        (tmp / "docid").write_text("".join(f"{docid}\n" for docid in docids))
    parts = ["dense"]
    fields = {"documents": len(docids), "shards": shard_num, "int8": int8, **(extra or {})}
    if sparse is not None:
        with atomic_dir(output / "sparse") as tmp:
            write_sparse(tmp, card, vocab, docids, sparse, threads)
        parts.append("sparse")
        fields["sparse_postings"] = int(sparse.nnz)
    return write_manifest(output, card, files=checksums(output, parts), **fields)


def write_sparse(folder: Path, card: EncoderCard, vocab: list[str], docids: list[str], sparse: scipy.sparse.csr_matrix,
                 threads: int) -> None:
    """Float vectors (exact scoring), the JsonVectorCollection of integer impacts, and its Lucene impact index."""
    scipy.sparse.save_npz(folder / "vectors.npz", sparse.astype(np.float32))
    (folder / "collection").mkdir()
    with open(folder / "collection" / "docs.jsonl", "w") as out:
        for start in range(0, len(docids), 10000):
            rows = impact_dicts(sparse[start:start + 10000], vocab, card.scale)
            for docid, vector in zip(docids[start:start + 10000], rows):
                out.write(json.dumps({"id": docid, "contents": "", "vector": vector}) + "\n")
    build_impact_index(folder / "collection", folder / "index", threads)


def build_impact_index(collection: Path, index: Path, threads: int = 1) -> None:
    """``python -m pyserini.index.lucene --collection JsonVectorCollection --impact --pretokenized``."""
    command = [sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonVectorCollection",
               "--input", str(collection), "--index", str(index), "--generator", "DefaultLuceneDocumentGenerator",
               "--threads", str(threads), "--impact", "--pretokenized", "--optimize"]
    logger.info("building the impact index: %s", " ".join(command))
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not index.is_dir():
        raise RuntimeError(f"pyserini.index.lucene failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
