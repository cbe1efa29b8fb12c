"""The pre-training corpus: read documents, tokenise, cut into max-length segments, optionally cache.

Formats (detected from the first record): BEIR ``corpus.jsonl`` (``_id``/``title``/``text``, read through
``retromae_ir.data.readers``), generic JSONL with a ``text`` field (``id``/``_id`` optional), or plain text
with one document per line. Long documents become consecutive segments of ``max_length - 2`` tokens,
kept in order with their doc id and segment index (MASTER's neighbouring-span task relies on it).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from tqdm import tqdm

from retromae_ir.data.docids import DocidTable
from retromae_ir.data.readers import (DataFormatError, is_json_id, iter_beir_corpus, iter_lines,
                                      iter_msmarco_collection, joined)
from retromae_ir.io import atomic_write, check_read_unchanged, claim_output_waiting, file_digest
from retromae_ir.pretrain.collate import Segment

log = logging.getLogger(__name__)

CACHE_POLL_S = 2.0  # how often a process waiting for another's tokenising retries the cache's lock
CACHE_VERSION = 5  # 5: each document's id stored once; 4: a {"text"} JSONL's title is joined, a .tsv read as MS
# MARCO; 3: a repeated id is refused
TOKENIZE_CHUNK = 512


class CorpusError(ValueError):
    """The corpus is missing, unreadable or holds no text."""


def iter_documents(path: str | Path) -> Iterator[tuple[str, str]]:
    """Yield ``(docid, text)`` from a BEIR corpus, a ``{"text"}`` JSONL (its ``title`` joined as BEIR's is), an MS
    MARCO collection (``*.tsv[.gz]``, as encoding reads it) or a plain-text file (a document a line)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    form = file_format(path)
    if form is None:
        raise CorpusError(f"corpus {path} is empty")
    if form == "tsv":  # read as text, 'pid<TAB>' would be in every segment
        yield from ((doc.docid, doc.contents) for doc in iter_msmarco_collection(path))
    elif form == "plain":
        yield from ((str(number), line.strip()) for number, line in iter_lines(path))
    elif form == "beir":
        yield from ((doc.docid, doc.contents) for doc in iter_beir_corpus(path))
    else:
        yield from _iter_text_jsonl(path)


def corpus_format(path: Path, first: tuple[int, str]) -> str:
    """"tsv" (an MS MARCO collection, by its name), "beir", "text" (a ``{"text"}`` JSONL) or "plain", from the name
    and the ``first`` (line number, line) of the file."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".tsv"):
        return "tsv"
    record = _maybe_json(first[1])
    if record is None and name.endswith((".json", ".jsonl")):  # read as plain text, every line braces and keys
        raise CorpusError(f"{path}:{first[0]}: expected a JSON object (the file is named as JSON lines), got "
                          f"{first[1].strip()!r:.80}")
    if record is None:
        return "plain"
    if "_id" in record:
        return "beir"
    if "text" in record:
        return "text"
    raise CorpusError(f"{path}:{first[0]}: JSON record has neither '_id' (BEIR) nor 'text'")


def reader_version(path: str | Path) -> int | None:
    """4 for the formats :func:`iter_documents` reads otherwise since :data:`CACHE_VERSION` 4 (an MS MARCO TSV, a
    titled ``{"text"}`` JSONL), None for those it reads as it always did (BEIR, plain text): what a key of counts
    made from the documents adds, so that only the changed formats are counted again."""
    return 4 if file_format(Path(path)) in ("tsv", "text") else None


def file_format(path: Path) -> str | None:
    """:func:`corpus_format` of ``path`` by its name and first line; None for an empty file."""
    first = next(iter_lines(path), None)
    return None if first is None else corpus_format(path, first)


def _maybe_json(line: str) -> dict | None:
    if not line.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _iter_text_jsonl(path: Path) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of each line (the line number when it has no id). A repeated id is refused: segments are
    keyed by (id, index), so MASTER's neighbouring span and the contrastive positives would pair one document's
    segment with another's (the BEIR reader refuses them likewise)."""
    seen = set()
    for number, line in iter_lines(path):
        record = _maybe_json(line)
        if record is None or not isinstance(record.get("text"), str):
            raise DataFormatError(f"{path}:{number}: expected a JSON object with a string 'text' field")
        docid = record.get("id", record.get("_id", number))
        if not is_json_id(docid):
            raise DataFormatError(f"{path}:{number}: an id is a string or a whole number, got {docid!r}")
        docid = str(docid)
        if docid in seen:
            raise DataFormatError(f"{path}:{number}: duplicate id {docid!r} (one document a line, each its own id; "
                                  f"a line without one is keyed by its line number)")
        seen.add(docid)
        title = record.get("title")
        yield docid, joined(title, record["text"]) if isinstance(title, str) else record["text"]


class SegmentTable(Sequence[Segment]):
    """All segments of a corpus in flat arrays (int32 token ids + offsets, each segment's document a row of one
    ``DocidTable``), so a corpus of millions of passages costs 4 bytes a token instead of a Python tuple per
    segment, and a document's id is held once at its own length (a fixed-width column of ids held every segment
    at the longest id's width: one 2,000-character URL id made 10M segments 80 GB). Indexing yields ``Segment``s."""

    def __init__(self, documents: DocidTable, doc_of: np.ndarray, indexes: np.ndarray, lengths: np.ndarray,
                 ids: np.ndarray):
        self.documents, self.doc_of, self.indexes, self.lengths, self.ids = documents, doc_of, indexes, lengths, ids
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> Segment:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return Segment(self.documents[int(self.doc_of[i])], int(self.indexes[i]),
                       tuple(self.ids[self.offsets[i]:self.offsets[i + 1]].tolist()))

    @classmethod
    def concatenate(cls, parts: list["SegmentTable"]) -> "SegmentTable":
        shifts = np.cumsum([0] + [len(part.documents) for part in parts])
        doc_of = [part.doc_of + shift for part, shift in zip(parts, shifts)]
        return cls(DocidTable(b"".join(part.documents.data for part in parts)),
                   np.concatenate(doc_of or [np.zeros(0, np.int64)]),
                   *(np.concatenate([getattr(part, name) for part in parts] or [np.zeros(0, dtype)])
                     for name, dtype in (("indexes", np.int64), ("lengths", np.int64), ("ids", np.int32))))


class SegmentExamples(Sequence):
    """A method's training examples made from the corpus's segments as each is read (``example``), so a corpus of
    millions of segments stays in its flat table: a list of examples held every segment's tokens as Python tuples,
    about ten times the table."""

    def __init__(self, segments: Sequence[Segment]):
        self.segments = segments

    def __len__(self) -> int:
        return len(self.segments)

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(len(self))[row]]
        row = range(len(self))[row]
        return self.example(row, self.segments[row])

    def example(self, row: int, segment: Segment):
        raise NotImplementedError


def document_runs(segments: Sequence[Segment]) -> tuple[np.ndarray, np.ndarray]:
    """Each document's segments as one run of rows, for what pairs a segment with its document's others (the
    contrastive positive, MASTER's neighbouring span) without a Python object per segment: ``(run_of, bounds)``,
    the run number of every row and the first row of each run (plus the row count). The runs number the documents
    in corpus order, the same in every process. A document whose segments are not consecutive is refused: the
    corpus readers keep them so (a repeated id is refused), and a pairing would miss the others."""
    if isinstance(segments, SegmentTable):
        starts = np.flatnonzero(np.diff(segments.doc_of)) + 1
    else:
        docids = [segment.docid for segment in segments]
        starts = np.array([row for row in range(1, len(docids)) if docids[row] != docids[row - 1]], dtype=np.int64)
        if len(set(docids)) != len(starts) + bool(docids):
            raise ValueError("the segments of a document must be consecutive rows (as the corpus readers give them)")
    bounds = np.concatenate([[0], starts, [len(segments)]] if len(segments) else [[0]]).astype(np.int64)
    run_of = np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))
    return run_of, bounds


def split_segments(docid: str, ids: list[int], body_length: int) -> list[Segment]:
    """Consecutive, in-order segments of at most ``body_length`` tokens (no special tokens)."""
    return [Segment(docid, index, tuple(ids[start:start + body_length]))
            for index, start in enumerate(range(0, len(ids), body_length))]


def segment_texts(text: str, tokenizer, max_length: int) -> list[str]:
    """The text of each segment :func:`tokenize_corpus` cuts from ``text`` at ``max_length`` (the same tokens,
    mapped back to characters through a fast tokenizer's offsets), so MASTER's side texts can be generated from
    the very span a segment holds. A segment that starts inside a word starts at that word piece."""
    if not getattr(tokenizer, "is_fast", False):
        raise CorpusError(f"cutting text into segments needs a fast tokenizer (character offsets); "
                          f"{type(tokenizer).__name__} is not one")
    if max_length < 3:
        raise CorpusError(f"max length {max_length} leaves no room for text between [CLS] and [SEP]")
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    body = max_length - 2
    return [text[offsets[start][0]:offsets[min(start + body, len(offsets)) - 1][1]]
            for start in range(0, len(offsets), body)]


def tokenize_corpus(path: str | Path, tokenizer, max_length: int) -> SegmentTable:
    """All segments of the corpus, tokenised in chunks; raises ``CorpusError`` if nothing remains."""
    if max_length < 3:
        raise CorpusError(f"max length {max_length} leaves no room for text between [CLS] and [SEP]")
    parts: list[SegmentTable] = []
    chunk: list[tuple[str, str]] = []
    progress = tqdm(desc=f"tokenising {Path(path).name}", unit="doc")
    for doc in iter_documents(path):
        chunk.append(doc)
        if len(chunk) == TOKENIZE_CHUNK:
            parts.append(_tokenize_chunk(chunk, tokenizer, max_length - 2))
            progress.update(len(chunk))
            chunk = []
    parts.append(_tokenize_chunk(chunk, tokenizer, max_length - 2))
    progress.update(len(chunk))
    progress.close()
    table = SegmentTable.concatenate(parts)
    if not len(table):
        raise CorpusError(f"corpus {path} holds no text to pre-train on")
    return table


def _tokenize_chunk(docs: list[tuple[str, str]], tokenizer, body_length: int) -> SegmentTable:
    encoded = tokenizer([text for _, text in docs], add_special_tokens=False, verbose=False)["input_ids"] if docs else []
    cut = [split_segments(docid, ids, body_length) for (docid, _), ids in zip(docs, encoded)]
    segments = [segment for document in cut for segment in document]
    return SegmentTable(DocidTable.of(docid for docid, _ in docs),
                        np.repeat(np.arange(len(docs), dtype=np.int64), [len(document) for document in cut]),
                        np.array([s.index for s in segments], dtype=np.int64),
                        np.array([len(s.input_ids) for s in segments], dtype=np.int64),
                        np.fromiter((i for s in segments for i in s.input_ids), dtype=np.int32))


def check_maskable(segments: SegmentTable, ratio: float, corpus: str | Path) -> None:
    """Refuse a corpus whose segments are all too short for ``ratio`` to mask a word (whole-word masking takes a
    first word only when ``ratio * tokens >= 0.5``, see ``masking.sample_whole_words``): it would train with an
    encoder MLM loss of 0 at every step. Warn when a quarter or more of the segments are that short."""
    if ratio <= 0 or not len(segments):
        return
    need = math.ceil(0.5 / ratio - 1e-9)
    short = int((segments.lengths < need).sum())
    if short == len(segments):
        raise CorpusError(f"{corpus}: too short to mask: no segment has the {need} tokens --encoder-mask-ratio "
                          f"{ratio} needs to mask a word (the longest has {int(segments.lengths.max())})")
    if short * 4 >= len(segments):
        log.warning("%s: %d of %d segments have fewer than %d tokens, too few for --encoder-mask-ratio %s to mask a "
                    "word: they train the decoder only", corpus, short, len(segments), need, ratio)


def load_segments(path: str | Path, tokenizer, max_length: int, cache: str | Path | None = None) -> SegmentTable:
    """Segments from ``cache`` when it was built from this corpus, tokenizer and max length; else tokenise
    (and write the cache when one is named). The cache is built by one process at a time: under torchrun the first
    rank tokenises and the others, waiting on its lock, read what it wrote (each tokenised the whole corpus).
    Logged with where the segments came from (the training commands write it into train.log)."""
    start = time.perf_counter()
    segments, source = _segments_and_source(path, tokenizer, max_length, cache)
    log.info("%s: %d segments of at most %d tokens, %s in %.1f s", path, len(segments), max_length, source,
             time.perf_counter() - start)
    return segments


def _segments_and_source(path, tokenizer, max_length: int, cache) -> tuple[SegmentTable, str]:
    if cache is None:
        return tokenize_corpus(path, tokenizer, max_length), "tokenised (no --tokenized-cache)"
    key, digest = _cache_key(path, tokenizer, max_length)  # hashes the corpus
    cached = _read_cache(Path(cache), key) if Path(cache).is_file() else None  # complete (renamed into place):
    if cached is not None:  # read without the lock, so a cache in a read-only folder serves every rank at once
        return cached, f"read from the tokenised cache {cache}"
    with claim_output_waiting(cache, CACHE_POLL_S):
        if Path(cache).is_file():
            cached = _read_cache(Path(cache), key)
            if cached is not None:  # built by the process this one waited for
                return cached, f"read from the tokenised cache {cache} (built meanwhile)"
            log.warning("tokenised cache %s was built from other inputs; rebuilding it", cache)
        segments = tokenize_corpus(path, tokenizer, max_length)
        check_read_unchanged(path, digest, "it was tokenised")  # else cached under the old corpus's key
        _write_cache(Path(cache), key, segments)
    return segments, f"tokenised into the cache {cache}"


def _cache_key(path: str | Path, tokenizer, max_length: int) -> tuple[str, str]:
    """The cache's key, and the corpus digest in it."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    digest = file_digest(path)
    from retromae_ir.pretrain.corpus_stats import tokenizer_fingerprint

    # the corpus's bytes (not its path and mtime: a same-size edit copied with its mtime is another corpus) and the
    # tokenizer's vocabulary, added tokens, normaliser and pre-tokeniser; and how the file is read (a collection.tsv
    # copied to .txt is read as plain lines, pid and tab included)
    parts = [str(CACHE_VERSION), digest, str(file_format(path)), str(max_length),
             type(tokenizer).__name__, tokenizer_fingerprint(tokenizer)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest(), digest


def _write_cache(cache: Path, key: str, table: SegmentTable) -> None:
    with atomic_write(cache, "wb") as handle:
        np.savez(handle, key=np.array(key), documents=np.frombuffer(table.documents.data, np.uint8),
                 doc_of=table.doc_of, indexes=table.indexes, lengths=table.lengths, ids=table.ids)


def _read_cache(cache: Path, key: str) -> SegmentTable | None:
    with np.load(cache) as data:
        if str(data["key"]) != key:
            return None
        return SegmentTable(DocidTable(data["documents"].tobytes()), data["doc_of"], data["indexes"], data["lengths"],
                            data["ids"])
