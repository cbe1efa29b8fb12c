"""Corpus encoding: resumable shards of chunks, then a merge into Pyserini's index layouts.

    DIR/dense/{index,docid}          faiss IndexFlatIP + one docid per line (FaissSearcher's layout)
    DIR/sparse/collection/docs.jsonl JsonVectorCollection, integer impacts round(w * scale)
    DIR/sparse/index/                Lucene impact index (pyserini.index.lucene --impact --pretokenized)
    DIR/sparse/ot/                   the OT store for exact Eq. 12 scoring: float16 weights, term-major, read
                                     memory-mapped (retromae_ir/search/ot_store.py)
    DIR/manifest.json                written last: card, dims, k, scale, counts, checksums, the encoding code's
                                     version, library versions

Shard ``i`` of ``n`` encodes a contiguous slice of the corpus into DIR/.work/<sources>-of-<n>/shard-<i>/ as chunk files
written atomically; a rerun skips finished chunks, so an interrupted job resumes where it stopped. <sources> is a digest
of everything the vectors depend on (card fingerprint, weight and tokenizer files, the encoding code's version, passage
length, precision, and every document's id and text), so chunks of a changed corpus, retrained weights or other encoding
code are never resumed onto. Shards can run as separate processes or GPUs (``torchrun`` sets RANK/WORLD_SIZE), each
locking its own folder; ``merge`` joins them under the output's lock.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import scipy.sparse
from tqdm import tqdm

from retromae_ir.encode.cards import EncoderCard
from retromae_ir.encode.manifest import (MANIFEST, IndexMismatchError, checksums, encoding_version, manifest_precision,
                                         write_manifest)
from retromae_ir.encode.representation import ENCODING_VERSION, check_lucene_terms, impact_dicts
from retromae_ir.io import atomic_dir, atomic_write, claim_output, pairs_digest
from retromae_ir.lucene_indexer import build_lucene_index

logger = logging.getLogger(__name__)
WORK = ".work"
SOURCES = "sources.json"
STARTED = "started"  # beside SOURCES: time_ns of the encoding's first shard start, written once (merge's "newer")


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
    return pairs_digest(zip(docids, texts))


def sources(model, docids: list[str], texts: list[str], chunk_size: int) -> dict:
    """Everything the chunks depend on: the card (fingerprint, weight and tokenizer files, passage length), the
    encoding code's version, the precision, the documents' ids and texts, and the chunk size (chunk files are named
    by their first document, so chunks cut at another size would overlap or leave gaps). Chunks are resumed only
    under equal sources, so changed texts, retrained weights, newer encoding code, another dtype or chunk size are
    encoded again instead of being mixed with old vectors."""
    card = model.card
    return {"fingerprint": card.fingerprint(), "weights": model.checkpoint_digests(), "encoding": ENCODING_VERSION,
            "max_passage_length": card.max_passage_length, "precision": precision(model),
            "documents": len(docids), "corpus_digest": corpus_digest(docids, texts), "chunk_size": chunk_size}


def work_dir(output: Path, source: dict, shard_num: int) -> Path:
    """DIR/.work/<digest of the sources>-of-<n>: one folder per (card, weights, encoding code, precision, corpus,
    sharding)."""
    key = hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:16]
    return Path(output) / WORK / f"{key}-of-{shard_num}"


def refuse_query_folder(output: Path) -> None:
    """Refuse to write an index into a folder of encoded queries (``encode queries``' output): their
    ``sparse.jsonl`` would stay beside the index's manifest, and the queries' manifest and dense side be replaced."""
    if (Path(output) / "sparse.jsonl").exists() or (Path(output) / "dense" / "embedding.pkl").exists():
        raise IndexMismatchError(f"{output} holds encoded queries: encoding a corpus there would mix an index with "
                                 "them; give another --output")


def check_weights_current(model) -> None:
    """Refuse to encode with a model whose checkpoint folder was trained again (or its tokenizer edited) since the
    model was loaded: its vectors would be the old weights', which the merge refuses to publish as the card's; say
    so before hours of encoding rather than after."""
    loaded = getattr(model, "loaded_digests", None)
    if loaded is not None and loaded != model.card.checkpoint_digests():
        raise IndexMismatchError(f"{model.card.checkpoint!r} changed since this model was loaded from it (its weight "
                                 f"or tokenizer files differ): load the card again to encode with the new files")


def encode_shard(model, docids: list[str], texts: list[str], output: Path, shard_id: int = 0, shard_num: int = 1,
                 chunk_size: int = 4096, batch_size: int = 64) -> Path:
    """Encode this shard's chunks that are not on disk yet; mark the shard done. Returns the shard folder, which
    is locked meanwhile: shards of one output run side by side, but each shard in one process only."""
    refuse_query_folder(output)
    check_weights_current(model)
    start, end = shard_range(len(docids), shard_id, shard_num)
    source = sources(model, docids, texts, chunk_size)
    root = work_dir(output, source, shard_num)
    folder = root / f"shard-{shard_id}"
    with claim_output(folder):
        folder.mkdir(parents=True, exist_ok=True)
        if not (root / STARTED).is_file():  # shards starting together write about the same time: either stays
            with atomic_write(root / STARTED) as out:  # a folder from before the record: its first sources.json
                out.write(str(_started(root) if (root / SOURCES).is_file() else time.time_ns()))
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


def find_work(output: Path, card: EncoderCard, shard_num: int, int8: bool, **source_fields) -> Path:
    """The one finished encoding of ``card`` in ``shard_num`` shards under DIR/.work whose sources also hold
    ``source_fields`` (a caller that knows the corpus passes its ``corpus_digest``; the ``merge`` command is not told
    it); none, several (other corpora or dtypes), or an unfinished one beside it (most likely the encoding the user
    means, of a new corpus or dtype, whose last shard has not run) is refused: never a guess. Without a corpus,
    so is one with an encoding of other vectors started after it in another number of shards or precision
    (:func:`_refuse_newer_encodings`)."""
    candidates = {}  # work folder -> its sources
    for root in sorted((Path(output) / WORK).glob(f"*-of-{shard_num}")):
        source = _read_source(root)
        if source and _encoded_by(source, card) and (source["precision"] == "int8") == int8 \
                and all(source.get(field) == value for field, value in source_fields.items()):
            candidates[root] = source
    finished = [root for root in candidates if not _unfinished(root, shard_num)]
    # an unfinished encoding of other documents or another precision than a finished one: which one is meant?
    # (one that differs only by chunk size is an abandoned attempt at the same vectors)
    vectors = {root: (source["corpus_digest"], source["precision"]) for root, source in candidates.items()}
    conflicting = [root for root in candidates if root not in finished
                   and (not finished or any(vectors[root] != vectors[other] for other in finished))]
    if conflicting:
        root = conflicting[0]
        shard_id = _unfinished(root, shard_num)[0]
        beside = "".join(f"; {other.name} beside it ({_describe(candidates[other])}) is finished but not merged "
                         f"while unfinished encodings of other documents or precision are there: remove "
                         f"{', '.join(str(r) for r in conflicting)} to merge it" for other in finished)
        raise IndexMismatchError(f"shard {shard_id} of {shard_num} is not finished ({root}: "
                                 f"{_describe(candidates[root])}): run it (--shard-id {shard_id} --shard-num "
                                 f"{shard_num}) before merging{beside}")
    if len(finished) == 1:
        if "corpus_digest" not in source_fields:  # the merge command: is another encoding the one meant?
            _refuse_newer_encodings(output, card, finished[0], candidates[finished[0]])
        return finished[0]
    if len(finished) > 1:
        found = "; ".join(f"{root.name}: {_describe(candidates[root])}" for root in finished)
        raise IndexMismatchError(f"{output}/{WORK} holds {len(finished)} finished encodings of card {card.name!r} "
                                 f"({found}): remove the stale ones, or encode into a new folder (--output; eval/nq.py: "
                                 "--index-dir)")
    raise IndexMismatchError(f"no encoded shards of card {card.name!r} ({shard_num} shards, "
                             f"{'int8' if int8 else 'not int8'}, encoding version {ENCODING_VERSION}) under "
                             f"{output}/{WORK}: shards of other weights or encoding code are not merged")


def _refuse_newer_encodings(output: Path, card: EncoderCard, chosen: Path, source: dict) -> None:
    """Refuse ``chosen`` when an encoding of ``card`` with other vectors (other documents or precision, in any
    number of shards, int8 or not) was started after it: a merge told another shard count or the wrong ``--int8``
    would otherwise rebuild an older corpus's index over the newer one, exit 0."""
    started, vectors = _started(chosen), (source["corpus_digest"], source["precision"])
    for root in sorted((Path(output) / WORK).glob("*-of-*")):
        other = _read_source(root)
        if root == chosen or not other or not _encoded_by(other, card):
            continue
        if (other["corpus_digest"], other["precision"]) != vectors and _started(root) > started:
            shards = int(root.name.rsplit("-of-", 1)[1])
            unfinished = _unfinished(root, shards)
            meant = (f"finish it (--shard-id {unfinished[0]} --shard-num {shards}) and merge it" if unfinished else
                     f"merge it (--shard-num {shards}{' --int8' if other['precision'] == 'int8' else ''})")
            raise IndexMismatchError(
                f"{output}/{WORK}: {root.name} ({_describe(other)}, {shards} shard(s)) was started after "
                f"{chosen.name} ({_describe(source)}), the one this merge would build; {meant}, or remove {root} to "
                f"merge the older one")
    _refuse_over_a_newer_index(output, chosen, source, started)


def _refuse_over_a_newer_index(output: Path, chosen: Path, source: dict, started: int) -> None:
    """Refuse ``chosen`` when the index already in ``output`` holds other vectors (documents or precision) and was
    written after ``chosen`` was started: the newer encoding's chunks may be gone (removed to free disk once it was
    merged), and the merge would put the older corpus's index over it."""
    path = Path(output) / MANIFEST
    try:
        current, written = json.loads(path.read_text()), path.stat().st_mtime_ns
    except (FileNotFoundError, ValueError):  # no index yet, or a damaged manifest the merge replaces
        return
    built = (current.get("corpus_digest"), manifest_precision(current))
    if current.get("corpus_digest") and built != (source["corpus_digest"], source["precision"]) and written > started:
        raise IndexMismatchError(
            f"{output} holds an index of other vectors ({current.get('documents')} documents, {built[1]}) written "
            f"after {chosen.name} ({_describe(source)}) was started: this merge would replace it with the older "
            f"encoding; remove {path} (or encode into a new --output) to merge it anyway")


def _started(root: Path) -> int:
    """When an encoding's first shard started (time_ns); sources.json's time for one written before that record."""
    path = root / STARTED
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):  # no record (an older folder), or a damaged one
        return (root / SOURCES).stat().st_mtime_ns


def _encoded_by(source: dict, card: EncoderCard) -> bool:
    """Whether chunks of these sources are ``card``'s vectors with its current weights, by this encoding code."""
    return (source.get("fingerprint") == card.fingerprint() and source.get("weights") == card.checkpoint_digests()
            and encoding_version(source) == ENCODING_VERSION)


def _read_source(root: Path) -> dict | None:
    path = root / SOURCES
    return json.loads(path.read_text()) if path.is_file() else None


def _describe(source: dict) -> str:
    return f"{source['documents']} documents, corpus digest {source['corpus_digest'][:12]}, {source['precision']}"


def _unfinished(root: Path, shard_num: int) -> list[int]:
    return [shard_id for shard_id in range(shard_num) if not (root / f"shard-{shard_id}" / "DONE").is_file()]


def _chunk_paths(root: Path, shard_num: int, documents: int) -> list[Path]:
    """The chunk files of every shard in corpus order. An unfinished shard, no chunk at all, or chunks that do not
    tile documents [0, ``documents``) exactly once (a gap, an overlap) are refused before anything is written."""
    paths = []
    for shard_id in range(shard_num):
        folder = root / f"shard-{shard_id}"
        if not (folder / "DONE").is_file():
            raise IndexMismatchError(f"shard {shard_id} of {shard_num} is not finished ({folder}): run it "
                                     f"(--shard-id {shard_id} --shard-num {shard_num}) before merging")
        paths.extend(sorted(folder.glob("chunk-*.npz")))
    if not paths:
        raise IndexMismatchError(f"no encoded chunks under {root}")
    covered = 0
    for path in paths:
        first = int(path.stem.split("-")[1])
        if first != covered:
            raise IndexMismatchError(f"{path} starts at document {first}, the chunks before it end at {covered}: "
                                     f"the chunks under {root} do not tile the corpus; remove it and encode again")
        covered += len(_chunk_field(path, "docids"))
    if covered != documents:
        raise IndexMismatchError(f"the chunks under {root} hold {covered} documents, the corpus has {documents}: "
                                 f"remove it and encode again")
    return paths


def _dense_chunks(paths: list[Path]):
    """(docids, dense vectors) of each chunk, one chunk in memory at a time."""
    for path in tqdm(paths, desc="merge: dense", unit="chunk"):
        with np.load(path) as chunk:
            yield chunk["docids"].tolist(), chunk["dense"]


def _sparse_chunks(paths: list[Path]):
    """(docids, OT rows as CSR) of each chunk, one chunk in memory at a time: merging never holds a corpus's
    OT vectors (MS MARCO's are 27 GB as float32 + int32 ids)."""
    for path in tqdm(paths, desc="merge: sparse", unit="chunk"):
        with np.load(path) as chunk:
            docids = chunk["docids"].tolist()
            yield docids, scipy.sparse.csr_matrix((chunk["data"], chunk["indices"], chunk["indptr"]),
                                                  shape=(len(docids), int(chunk["vocab"])))


def _chunk_field(path: Path, field: str) -> np.ndarray:
    with np.load(path) as chunk:
        return chunk[field]


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
    output = Path(output)
    refuse_query_folder(output)
    if card.sparse and lucene:
        check_lucene_terms(vocab, f"card {card.name}'s tokenizer")
    work = Path(work) if work is not None else find_work(output, card, shard_num, int8)
    source = _read_source(work) or {}
    if not _encoded_by(source, card):
        raise IndexMismatchError(f"{work} was not encoded with card {card.name!r} and its current weights by this "
                                 f"encoding code (version {ENCODING_VERSION})")
    paths = _chunk_paths(work, shard_num, source["documents"])
    dims = _chunk_field(paths[0], "dense").shape[1]
    if dims != card.dims:
        raise IndexMismatchError(f"encoded vectors have {dims} dimensions, the card says {card.dims}")
    (output / MANIFEST).unlink(missing_ok=True)  # the parts change one by one: until the new manifest, incomplete
    with atomic_dir(output / "dense") as tmp:
        documents = write_dense(tmp, card, _dense_chunks(paths), source["documents"])
    parts = ["dense"]
    fields = {"documents": documents, "shards": shard_num, "int8": source["precision"] == "int8",
              "precision": source["precision"], "corpus_digest": source["corpus_digest"], "weights": source["weights"],
              **(extra or {})}
    if card.sparse:
        from retromae_ir.search.index import store_manifest_field

        with atomic_dir(output / "sparse") as tmp:
            postings = write_sparse(tmp, card, vocab, int(_chunk_field(paths[0], "vocab")),
                                    lambda: _sparse_chunks(paths), threads, lucene)
        parts.append("sparse")
        fields.update(sparse_postings=postings, sparse_store=store_manifest_field(), lucene=lucene)
    elif (output / "sparse").exists():
        shutil.rmtree(output / "sparse")  # an earlier card's sparse side does not describe these documents
    manifest = write_manifest(output, card, files=checksums(output, parts), **fields)
    prune_work(output, work)
    return manifest


def write_dense(folder: Path, card: EncoderCard, chunks, documents: int) -> int:
    """The faiss IndexFlatIP and the docid file (one line a row) of the (docids, dense) ``chunks``, ``documents``
    rows in all; their count. The index file is written a chunk at a time (``flat_index.FlatIndexFile``, the
    bytes ``faiss.write_index`` writes): faiss would build the whole index in memory first (25.2 GiB for MS MARCO's
    8.8M rows at 768 dimensions, past a 24 GB machine)."""
    from retromae_ir.flat_index import FlatIndexFile, NonFiniteRowError

    try:
        with FlatIndexFile(folder / "index", card.dims, documents) as index, \
                open(folder / "docid", "w", encoding="utf-8") as out:  # DocidTable reads UTF-8 whatever the locale
            for docids, dense in chunks:
                try:
                    index.add(dense)
                except NonFiniteRowError as exc:
                    raise NonFiniteRowError(exc.row, f"document {docids[exc.row - index.written]!r}'s dense "
                                                     f"vector, {folder / 'index'}") from None
                out.writelines(f"{docid}\n" for docid in docids)
    except NonFiniteRowError:
        raise
    except ValueError as exc:  # other widths or counts than the card and the encoding recorded
        raise IndexMismatchError(f"the encoded chunks do not match card {card.name!r} ({card.dims} dimensions) and "
                                 f"the {documents} documents recorded: {exc}") from None
    return documents


def write_sparse(folder: Path, card: EncoderCard, vocab: list[str], width: int, chunks, threads: int,
                 lucene: bool = True) -> int:
    """The OT store (float16, term-major: exact scoring), and with ``lucene`` the JsonVectorCollection of integer
    impacts and its Lucene impact index. ``chunks()`` yields (docids, [rows, width] OT rows) in corpus order and is
    called once a pass (two for the store, one for the collection). Returns the number of postings."""
    from retromae_ir.search.index import STORE_FOLDER
    from retromae_ir.search.ot_store import write_ot_store

    meta = write_ot_store(folder / STORE_FOLDER, lambda: (rows for _, rows in chunks()), width)
    if lucene:
        (folder / "collection").mkdir()
        written = 0
        with open(folder / "collection" / "docs.jsonl", "w") as out:
            for docids, rows in chunks():
                for start in range(0, len(docids), 10000):
                    vectors = impact_dicts(rows[start:start + 10000], vocab, card.scale, docids[start:start + 10000])
                    for docid, vector in zip(docids[start:start + 10000], vectors):
                        out.write(json.dumps({"id": docid, "contents": "", "vector": vector}) + "\n")
                        written += 1
        build_impact_index(folder / "collection", folder / "index", written, threads)
    return meta["postings"]


def build_impact_index(collection: Path, index: Path, documents: int, threads: int = 1) -> None:
    """``python -m pyserini.index.lucene --collection JsonVectorCollection --impact --pretokenized`` over the
    ``documents`` of ``collection``, checked to index every one (``lucene_indexer``)."""
    arguments = ["--collection", "JsonVectorCollection", "--input", str(collection), "--index", str(index),
                 "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(threads), "--impact",
                 "--pretokenized", "--optimize"]
    build_lucene_index(arguments, documents, str(collection))
