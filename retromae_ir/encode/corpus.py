"""Corpus encoding: resumable shards of chunks, then a merge into Pyserini's index layouts.

    DIR/dense/{index,docid}          faiss IndexFlatIP + one docid per line (FaissSearcher's layout)
    DIR/sparse/collection/docs.jsonl JsonVectorCollection, integer impacts round(w * scale)
    DIR/sparse/index/                Lucene impact index (pyserini.index.lucene --impact --pretokenized)
    DIR/sparse/ot/                   the OT store for exact Eq. 12 scoring: float16 weights, term-major, read
                                     memory-mapped (retromae_ir/search/ot_store.py)
    DIR/manifest.json                written last: card, dims, k, scale, counts, checksums, versions

Shard ``i`` of ``n`` encodes a contiguous slice of the corpus into DIR/.work/<sources>-of-<n>/shard-<i>/ as chunk
files written atomically; a rerun skips finished chunks, so an interrupted job resumes where it stopped. <sources> is
a digest of everything the vectors depend on (card fingerprint, weight files, passage length, precision, and every
document's id and text), so chunks of a changed corpus or retrained weights are never resumed onto. Shards can run
as separate processes or GPUs (``torchrun`` sets RANK/WORLD_SIZE), each locking its own folder; ``merge`` joins them
under the output's lock.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import scipy.sparse
from tqdm import tqdm

from retromae_ir.encode.cards import EncoderCard
from retromae_ir.encode.manifest import MANIFEST, IndexMismatchError, checksums, write_manifest
from retromae_ir.encode.representation import impact_dicts
from retromae_ir.io import atomic_dir, atomic_write, claim_output
from retromae_ir.process import run_child

logger = logging.getLogger(__name__)
WORK = ".work"
SOURCES = "sources.json"


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


def precision(model) -> str:
    """The arithmetic the vectors were computed in: int8, bf16 autocast or fp32 (each gives other vectors)."""
    return "int8" if model.int8 else "bf16" if model.bf16 else "fp32"


def corpus_digest(docids: list[str], texts: list[str]) -> str:
    """sha256 of every document's id and text (length-prefixed, so no two corpora share one): what was encoded."""
    digest = hashlib.sha256()
    for docid, text in zip(docids, texts):
        docid_bytes, text_bytes = docid.encode(), text.encode()
        digest.update(b"%d %d\n" % (len(docid_bytes), len(text_bytes)))
        digest.update(docid_bytes)
        digest.update(text_bytes)
    return digest.hexdigest()


def sources(model, docids: list[str], texts: list[str]) -> dict:
    """Everything the chunks depend on: the card (fingerprint, weight files, passage length), the precision and
    the documents' ids and texts. Chunks are resumed only under equal sources, so changed texts, retrained
    weights or another dtype are encoded again instead of being mixed with old vectors."""
    card = model.card
    return {"fingerprint": card.fingerprint(), "weights": card.weight_digests(),
            "max_passage_length": card.max_passage_length, "precision": precision(model),
            "documents": len(docids), "corpus_digest": corpus_digest(docids, texts)}


def work_dir(output: Path, source: dict, shard_num: int) -> Path:
    """DIR/.work/<digest of the sources>-of-<n>: one folder per (card, weights, precision, corpus, sharding)."""
    key = hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:16]
    return Path(output) / WORK / f"{key}-of-{shard_num}"


def encode_shard(model, docids: list[str], texts: list[str], output: Path, shard_id: int = 0, shard_num: int = 1,
                 chunk_size: int = 4096, batch_size: int = 64) -> Path:
    """Encode this shard's chunks that are not on disk yet; mark the shard done. Returns the shard folder, which
    is locked meanwhile: shards of one output run side by side, but each shard in one process only."""
    start, end = shard_range(len(docids), shard_id, shard_num)
    source = sources(model, docids, texts)
    root = work_dir(output, source, shard_num)
    folder = root / f"shard-{shard_id}"
    with claim_output(folder):
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(root / SOURCES) as out:  # every shard writes the same content
            json.dump(source, out, indent=2, sort_keys=True)
        chunks = range(start, end, chunk_size)
        for chunk_start in tqdm(chunks, desc=f"shard {shard_id}/{shard_num}", unit="chunk"):
            chunk_end = min(chunk_start + chunk_size, end)
            path = folder / f"chunk-{chunk_start:012d}.npz"
            if not path.is_file():
                _encode_chunk(model, docids[chunk_start:chunk_end], texts[chunk_start:chunk_end], path, batch_size)
                logger.info("shard %d: documents %d-%d encoded", shard_id, chunk_start, chunk_end)
        with atomic_write(folder / "DONE") as out:
            json.dump({"start": start, "end": end, "chunks": len(chunks)}, out)
    return folder


def _encode_chunk(model, docids: list[str], texts: list[str], path: Path, batch_size: int) -> None:
    encoded = model.encode_passage(texts, batch_size, progress=True)
    arrays = {"docids": np.array(docids, dtype=str), "dense": encoded.dense}
    if encoded.sparse is not None:
        arrays.update(data=encoded.sparse.data, indices=encoded.sparse.indices, indptr=encoded.sparse.indptr,
                      vocab=np.array(encoded.sparse.shape[1]))
    with atomic_write(path, "wb") as out:
        np.savez(out, **arrays)


def find_work(output: Path, card: EncoderCard, shard_num: int, int8: bool) -> Path:
    """The one finished encoding of ``card`` in ``shard_num`` shards under DIR/.work (the ``merge`` command is not
    told the corpus); none, or several (other corpora or dtypes), is refused: never a guess."""
    candidates = []
    for root in sorted((Path(output) / WORK).glob(f"*-of-{shard_num}")):
        source = _read_source(root)
        if source and source["fingerprint"] == card.fingerprint() and source["weights"] == card.weight_digests() \
                and (source["precision"] == "int8") == int8:
            candidates.append(root)
    finished = [root for root in candidates if not _unfinished(root, shard_num)]
    if len(finished) == 1:
        return finished[0]
    if len(finished) > 1:
        found = "; ".join(f"{root.name}: {_describe(_read_source(root))}" for root in finished)
        raise IndexMismatchError(f"{output}/{WORK} holds {len(finished)} finished encodings of card {card.name!r} "
                                 f"({found}): remove the stale ones, or encode into a new --output")
    if candidates:
        shard_id = _unfinished(candidates[0], shard_num)[0]
        raise IndexMismatchError(f"shard {shard_id} of {shard_num} is not finished ({candidates[0]}): run it "
                                 f"(--shard-id {shard_id} --shard-num {shard_num}) before merging")
    raise IndexMismatchError(f"no encoded shards of card {card.name!r} ({shard_num} shards, "
                             f"{'int8' if int8 else 'not int8'}) under {output}/{WORK}")


def _read_source(root: Path) -> dict | None:
    path = root / SOURCES
    return json.loads(path.read_text()) if path.is_file() else None


def _describe(source: dict) -> str:
    return f"{source['documents']} documents, corpus digest {source['corpus_digest'][:12]}, {source['precision']}"


def _unfinished(root: Path, shard_num: int) -> list[int]:
    return [shard_id for shard_id in range(shard_num) if not (root / f"shard-{shard_id}" / "DONE").is_file()]


def _load_shards(root: Path, card: EncoderCard, shard_num: int):
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


def prune_work(output: Path, keep: Path) -> None:
    """Drop the single-process chunk caches of other sources once ``keep``'s are merged: the output holds
    that corpus now. Only ``-of-1`` folders: they are written under the output's lock, which the caller holds,
    while shards of several run beside each other and may be in use."""
    for root in (Path(output) / WORK).glob("*-of-1"):
        if root.resolve() != Path(keep).resolve():
            logger.info("removing %s: chunks of another corpus, card or dtype", root)
            shutil.rmtree(root)


def merge(output: str | os.PathLike, card: EncoderCard, vocab: list[str], shard_num: int = 1, threads: int = 1,
          extra: dict | None = None, int8: bool = False, work: Path | None = None, lucene: bool = True) -> Path:
    """Join the shards under ``work`` (default: the one finished encoding of ``card`` found by
    :func:`find_work`) into DIR/dense and DIR/sparse, build the Lucene impact index (unless ``lucene`` is False:
    a host without Java, where only the exact hybrid searcher reads the index), write the manifest.
    The caller holds the output's lock."""
    import faiss

    output = Path(output)
    work = Path(work) if work is not None else find_work(output, card, shard_num, int8)
    source = _read_source(work) or {}
    if source.get("fingerprint") != card.fingerprint() or source.get("weights") != card.weight_digests():
        raise IndexMismatchError(f"{work} was not encoded with card {card.name!r} and its current weights")
    docids, dense, sparse = _load_shards(work, card, shard_num)
    if dense.shape[1] != card.dims:
        raise IndexMismatchError(f"encoded vectors have {dense.shape[1]} dimensions, the card says {card.dims}")
    (output / MANIFEST).unlink(missing_ok=True)  # the parts change one by one: until the new manifest, incomplete
    with atomic_dir(output / "dense") as tmp:
        index = faiss.IndexFlatIP(card.dims)
        index.add(np.ascontiguousarray(dense, dtype=np.float32))
        faiss.write_index(index, str(tmp / "index"))
        (tmp / "docid").write_text("".join(f"{docid}\n" for docid in docids))
    parts = ["dense"]
    fields = {"documents": len(docids), "shards": shard_num, "int8": source["precision"] == "int8",
              "precision": source["precision"], "corpus_digest": source["corpus_digest"], **(extra or {})}
    if sparse is not None:
        from retromae_ir.search.index import store_manifest_field

        with atomic_dir(output / "sparse") as tmp:
            write_sparse(tmp, card, vocab, docids, sparse, threads, lucene)
        parts.append("sparse")
        fields.update(sparse_postings=int(sparse.nnz), sparse_store=store_manifest_field(), lucene=lucene)
    elif (output / "sparse").exists():
        shutil.rmtree(output / "sparse")  # an earlier card's sparse side does not describe these documents
    manifest = write_manifest(output, card, files=checksums(output, parts), **fields)
    prune_work(output, work)
    return manifest


def write_sparse(folder: Path, card: EncoderCard, vocab: list[str], docids: list[str], sparse: scipy.sparse.csr_matrix,
                 threads: int, lucene: bool = True) -> None:
    """The OT store (float16, term-major: exact scoring), and with ``lucene`` the JsonVectorCollection of integer
    impacts and its Lucene impact index."""
    from retromae_ir.search.index import STORE_FOLDER
    from retromae_ir.search.ot_store import write_ot_store

    write_ot_store(folder / STORE_FOLDER, lambda: [sparse], sparse.shape[1])
    if not lucene:
        return
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
    done = run_child(command)
    if done.returncode != 0 or not index.is_dir():
        raise RuntimeError(f"pyserini.index.lucene failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
