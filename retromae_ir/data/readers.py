"""Streaming readers for the file formats retrieval data comes in: BEIR JSONL/TSV, MS MARCO TSV, TREC qrels
and Anserini topic files (TSV, ``.gz``, JSONL, TREC ``<top>``).

Every reader decodes strictly as UTF-8 (and gzip, for ``.gz``) and stops at the first bad line with a
``DataFormatError`` naming the file and line, so a broken download never turns silently into a smaller collection.
Blank lines are skipped. Empty texts: a document whose text is empty is kept (ids must stay aligned with the
qrels; real corpora hold a few) but counted in a ``ReadStats`` and reported with a logged warning; a query (topic)
whose text is empty is an error naming its line, since it cannot be searched and would score 0 unnoticed.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


class DataFormatError(ValueError):
    """Malformed input; the message starts with ``<file>:<line>:`` (or ``<file>:`` for whole-file problems)."""


@dataclass
class ReadStats:
    """What a reader saw: ``records`` yielded and how many of them had an empty text."""

    records: int = 0
    empty: int = 0


def joined(title: str | None, text: str | None) -> str:
    """The one-field view retrievers index (BM25 and the encoders): title and text joined by a space; a missing
    part (None: Pyserini's reader gives an empty title so) is empty, never the word "None"."""
    return f"{title or ''} {text or ''}".strip()


@dataclass(frozen=True, slots=True)
class Document:
    docid: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Title and text as :func:`joined` gives them."""
        return joined(self.title, self.text)


def _open_bytes(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` for the non-blank lines of a (possibly gzipped) UTF-8 file, endings removed."""
    path = Path(path)
    number = 0
    with _open_bytes(path) as handle:
        lines = iter(handle)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
                if path.suffix != ".gz":
                    raise
                raise DataFormatError(f"{path}:{number + 1}: not a valid gzip file ({err})") from None
            number += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataFormatError(f"{path}:{number}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
            line = without_byte_order_mark(path, number, line.rstrip("\r\n"))
            carriage = line.find("\r")
            if carriage >= 0 and "\t" in line[carriage:]:  # another record after it
                raise DataFormatError(f"{path}:{number}: a carriage return inside the line, and a tab after it: "
                                      "Python's text mode and Anserini's line reader end the line there, so this "
                                      "would be two records (old Mac line endings?); remove it")
            if line.strip():
                yield number, line


def without_byte_order_mark(path: Path, number: int, line: str) -> str:
    """Line ``number`` of ``path`` without the byte-order mark a file may start with; one starting a later line is
    an error (files joined with cat): not whitespace, it would become part of that line's id."""
    if number == 1:
        return line.removeprefix("\ufeff")
    if line.startswith("\ufeff"):
        raise DataFormatError(f"{path}:{number}: a byte-order mark starts this line (files joined with cat, one "
                              f"saved with a mark?); remove it")
    return line


def _json_object(path: Path, number: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataFormatError(f"{path}:{number}: malformed JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(record, dict):
        raise DataFormatError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
    return record


def is_json_id(value) -> bool:
    """Whether a JSON value can be an id: a string or a whole number (``str()`` made null "None", 4.0 "4.0", true
    "True")."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _id_field(path: Path, number: int, record: dict, keys: tuple[str, ...]) -> str:
    for key in keys:
        value = record.get(key)
        if is_json_id(value) and str(value).strip():
            _check_token(path, number, str(value))
            return str(value)
    raise DataFormatError(f"{path}:{number}: missing or empty id field {' / '.join(repr(k) for k in keys)}")


def _text_field(path: Path, number: int, record: dict, key: str, required: bool) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        problem = "missing" if key not in record else f"not a string ({type(value).__name__})"
        raise DataFormatError(f"{path}:{number}: field {key!r} is {problem}")
    return value


def _split_tsv(path: Path, number: int, line: str, columns: int, what: str) -> list[str]:
    """Split on the first ``columns - 1`` tabs (a last free-text column may itself hold tabs); the id column is one
    token, spaces around it aside (a docid file and a TREC run hold one a line or column)."""
    fields = line.split("\t", columns - 1)
    if len(fields) != columns or not fields[0].strip():
        raise DataFormatError(f"{path}:{number}: expected {what} ({columns} tab-separated columns), got {line[:80]!r}")
    _check_token(path, number, fields[0].strip())
    return fields


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode's control characters (category Cc)
# invisible characters a copied or joined file carries into an id: the byte-order mark, the zero-width space, the
# word joiner and the direction marks, embeddings and isolates. (Not every format character: the zero-width
# (non-)joiners belong in some scripts' words, so in Wikipedia titles, which are FEVER's ids.)
INVISIBLE = re.compile("[\ufeff\u200b\u2060\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_ID_BYTES = 32766  # Lucene's longest term (the docid is one), in UTF-8 bytes


def plain_numeral(number: str) -> bool:
    """Whether Python reads the text of a number as C's atoi and atof do (trec_eval's, SentEval's files' other
    readers): not ``1_5`` (15 in Python), nor digits outside ASCII (full-width, Arabic-Indic)."""
    return number.isascii() and "_" not in number


def _check_token(path: Path, number: int, docid: str) -> None:
    """An id is one token: a docid file holds one a line, a TREC run one a column. Nor may it hold a control
    character: NumPy's string arrays (the encoding chunks' docids) drop a trailing NUL, so "d1\\x00" came back as
    "d1", a second document of that id in the merged index."""
    if len(docid.split()) != 1 or docid != docid.strip():
        raise DataFormatError(f"{path}:{number}: id {docid!r} holds whitespace (ids are single tokens in docid files "
                              "and TREC runs)")
    if _CONTROL.search(docid) or not docid.isascii() and INVISIBLE.search(docid):
        raise DataFormatError(f"{path}:{number}: id {docid!r} holds a control or invisible formatting character "
                              "(it would match no id typed or written without it)")
    if len(docid.encode("utf-8")) > MAX_ID_BYTES:  # the indexer left the rest of the collection out, exit 0
        raise DataFormatError(f"{path}:{number}: id {docid[:40]!r}... is {len(docid.encode('utf-8'))} bytes, over "
                              f"Lucene's {MAX_ID_BYTES}-byte term limit")


_HEADER_IDS = {"id", "_id", "qid", "query_id", "query-id", "pid", "docid", "doc_id", "corpus-id"}


def _refuse_header(path: Path, number: int, key: str, first: bool) -> None:
    """A first record (blank lines before it skipped) whose id column is a column name is a header, not a record
    (it became a query or document)."""
    if first and key.strip().lower() in _HEADER_IDS:
        raise DataFormatError(f"{path}:{number}: {key.strip()!r} in the id column is a header line; remove it (this "
                              "format has none)")


def _checked(path: Path, records: Iterable[tuple[int, str, str, object]], stats: ReadStats | None,
             unique: bool, queries: bool = False) -> Iterator[object]:
    """Shared bookkeeping for ``(line, id, text, item)`` streams: duplicate ids, empty texts (an error for
    ``queries``, else counted), the warning."""
    stats = stats if stats is not None else ReadStats()
    seen: set[str] = set()
    for number, key, text, item in records:
        if unique:
            if key in seen:
                raise DataFormatError(f"{path}:{number}: duplicate id {key!r}")
            seen.add(key)
        stats.records += 1
        if not text.strip():
            if queries:
                raise DataFormatError(f"{path}:{number}: query {key!r} has an empty text")
            stats.empty += 1
        yield item
    if stats.empty:
        logger.warning("%s: %d of %d records have an empty text", path, stats.empty, stats.records)


# --- BEIR -----------------------------------------------------------------------------------------------------

def iter_beir_corpus(path: PathLike, stats: ReadStats | None = None, unique: bool = True) -> Iterator[Document]:
    """Stream a BEIR ``corpus.jsonl`` (``{"_id", "title", "text"}`` lines; ``title`` may be absent).

    ``unique`` keeps a set of the ids seen to reject duplicates; pass ``False`` to save that memory on a corpus
    already known to be clean.
    """
    path = Path(path)

    def records():
        for number, line in iter_lines(path):
            record = _json_object(path, number, line)
            docid = _id_field(path, number, record, ("_id",))
            doc = Document(docid, _text_field(path, number, record, "title", False),
                           _text_field(path, number, record, "text", True))
            yield number, docid, doc.contents, doc

    return _checked(path, records(), stats, unique)


def load_beir_corpus(path: PathLike, stats: ReadStats | None = None) -> dict[str, Document]:
    return {doc.docid: doc for doc in iter_beir_corpus(path, stats)}


def iter_beir_queries(path: PathLike, stats: ReadStats | None = None) -> Iterator[tuple[str, str]]:
    """Stream ``(qid, text)`` from a BEIR ``queries.jsonl`` (``{"_id", "text"}`` lines)."""
    return _iter_jsonl_pairs(Path(path), ("_id",), ("text",), stats)


def load_beir_queries(path: PathLike, stats: ReadStats | None = None) -> dict[str, str]:
    return dict(iter_beir_queries(path, stats))


def _iter_jsonl_pairs(path: Path, id_keys: tuple[str, ...], text_keys: tuple[str, ...],
                      stats: ReadStats | None) -> Iterator[tuple[str, str]]:
    def records():
        for number, line in iter_lines(path):
            record = _json_object(path, number, line)
            key = _id_field(path, number, record, id_keys)
            field = next((k for k in text_keys if k in record), text_keys[0])
            text = _text_field(path, number, record, field, True)
            yield number, key, text, (key, text)

    return _checked(path, records(), stats, unique=True, queries=True)


# --- qrels -----------------------------------------------------------------------------------------------------

_BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def iter_qrels(path: PathLike) -> Iterator[tuple[str, str, int]]:
    """Stream ``(qid, docid, relevance)`` from TREC qrels (``qid iter docid rel``, whitespace-separated) or a
    BEIR ``qrels/*.tsv`` (``query-id<TAB>corpus-id<TAB>score``, header optional); the format is detected from
    the first line and must then hold for every line. A repeated ``(qid, docid)`` pair is an error."""
    path = Path(path)
    seen: set[tuple[str, str]] = set()
    columns = None
    for number, line in iter_lines(path):
        if columns is None:
            columns = 3 if line.count("\t") == 2 else 4
            if columns == 3 and tuple(f.strip() for f in line.split("\t")) == _BEIR_QRELS_HEADER:
                continue
        fields = line.split("\t") if columns == 3 else line.split()
        if len(fields) != columns:
            kind = "BEIR qrels 'query-id<TAB>corpus-id<TAB>score'" if columns == 3 else "TREC qrels 'qid iter docid rel'"
            raise DataFormatError(f"{path}:{number}: expected {kind} ({columns} columns), got {line[:80]!r}")
        qid, docid, label = (fields[0], fields[1], fields[2]) if columns == 3 else (fields[0], fields[2], fields[3])
        qid, docid = qid.strip(), docid.strip()
        if not qid or not docid:
            raise DataFormatError(f"{path}:{number}: empty query or document id in {line[:80]!r}")
        _check_token(path, number, qid)  # a judgement of an id with a hidden character counted as never retrieved
        _check_token(path, number, docid)
        if not _INTEGER.fullmatch(label.strip()):  # int() read 1_0 as 10 and non-ASCII digits; trec_eval's atoi not
            raise DataFormatError(f"{path}:{number}: relevance {label.strip()!r} is not an integer")
        relevance = int(label)
        if (qid, docid) in seen:
            raise DataFormatError(f"{path}:{number}: duplicate judgement for query {qid!r}, document {docid!r}")
        seen.add((qid, docid))
        yield qid, docid, relevance


def check_min_relevance(value: int) -> None:
    """A positive's least qrels label (``--min-relevance``): at least 1, a 0 being a judged non-relevant document."""
    if value < 1:
        raise ValueError(f"--min-relevance must be >= 1, got {value}")


def load_qrels(path: PathLike) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for qid, docid, relevance in iter_qrels(path):
        qrels.setdefault(qid, {})[docid] = relevance
    if not qrels:
        raise DataFormatError(f"{path}: no judgements")
    return qrels


# --- MS MARCO and topics ------------------------------------------------------------------------------------------

def iter_msmarco_collection(path: PathLike, stats: ReadStats | None = None,
                            unique: bool = True) -> Iterator[Document]:
    """Stream an MS MARCO ``collection.tsv`` (``pid<TAB>passage``) as title-less ``Document``s."""
    path = Path(path)

    def records():
        for seen, (number, line) in enumerate(iter_lines(path)):
            pid, text = _split_tsv(path, number, line, 2, "'pid<TAB>passage'")
            if pid != pid.strip():
                raise DataFormatError(f"{path}:{number}: pid {pid!r} has spaces around it (it would not match the "
                                      "qrels' id)")
            if seen == 0 and "\t" in text:  # DPR's psgs_w100.tsv (id, text, title, a header) and the like
                raise DataFormatError(f"{path}:{number}: {line.count(chr(9)) + 1} tab-separated columns "
                                      f"({line[:80]!r}); an MS MARCO collection has 2, 'pid<TAB>passage' (the rest "
                                      "would become text)")
            _refuse_header(path, number, pid, first=seen == 0)
            yield number, pid, text, Document(pid, "", text)

    return _checked(path, records(), stats, unique)


def iter_tsv_topics(path: PathLike, stats: ReadStats | None = None) -> Iterator[tuple[str, str]]:
    """Stream ``(qid, text)`` from ``qid<TAB>text`` lines (MS MARCO queries, Anserini TSV topics, ``.gz`` too).

    The text is everything after the first tab, stripped of surrounding spaces as Anserini does (MS MARCO dev
    has a query starting with a space; one robust04 topic holds a tab, kept as is).
    """
    path = Path(path)

    def records():
        for seen, (number, line) in enumerate(iter_lines(path)):
            qid, text = _split_tsv(path, number, line, 2, "'qid<TAB>text'")
            _refuse_header(path, number, qid, first=seen == 0)
            qid, text = qid.strip(), text.strip()
            yield number, qid, text, (qid, text)

    return _checked(path, records(), stats, unique=True, queries=True)


def load_msmarco_queries(path: PathLike, stats: ReadStats | None = None) -> dict[str, str]:
    return dict(iter_tsv_topics(path, stats))


_TREC_TAG = re.compile(r"<(/?[a-z]+)>(.*)", re.I)
_TREC_CLOSE = re.compile(r"(</top>)", re.I)
_TREC_LABEL = re.compile(r"^\s*(?:Number|Topic):", re.I)
_TREC_FIELDS = ("num", "title", "desc", "narr")  # others (TREC 1-3's <dom>, <con>, <fac>, <def>, <smry>) are skipped


def iter_trec_topics(path: PathLike, stats: ReadStats | None = None) -> Iterator[tuple[str, str]]:
    """Stream ``(qid, title)`` from classic TREC topics (``<top> <num> Number: N <title> ... </top>``);
    a title may run over several lines, up to the next tag (any tag: TREC 1-3's ``<dom>`` lines end it too); a
    numeric id loses its leading zeros. ``</top>`` may end a text line; a topic left open at the end of the file
    (a truncated download) is an error, not a topic fewer."""
    path = Path(path)

    def pieces():  # (line number, text) with every </top> a piece of its own
        for number, line in iter_lines(path):
            for piece in _TREC_CLOSE.split(line):
                if piece.strip():
                    yield number, piece

    def records():
        start, fields, current = None, {}, None
        for number, line in pieces():
            tag = _TREC_TAG.match(line.strip())
            if tag is None:
                if current is not None:  # a title's next line, its closing tag (if any) cut off
                    fields[current] += " " + re.sub(r"</\w+>\s*$", "", line)
                continue
            name, rest = tag.group(1).lower(), _TREC_LABEL.sub("", re.sub(r"</\w+>\s*$", "", tag.group(2)))
            if name == "top":
                if start is not None:
                    raise DataFormatError(f"{path}:{start}: TREC topic opened here is not closed by </top> before "
                                          f"the next <top> (line {number})")
                start, fields, current = number, {}, None
            elif name == "/top":
                if not fields.get("num", "").strip() or "title" not in fields:
                    raise DataFormatError(f"{path}:{start or number}: TREC topic without <num> or <title>")
                qid, title = fields["num"].strip(), " ".join(fields["title"].split())
                qid = str(int(qid)) if qid.isdigit() else qid  # "051" is topic 51 (Anserini's reader, the qrels)
                yield start, qid, title, (qid, title)
                start, fields, current = None, {}, None
            elif name in _TREC_FIELDS:
                if start is None:
                    raise DataFormatError(f"{path}:{number}: <{name}> outside a TREC topic (no <top> before it)")
                fields[name], current = rest, name
            else:
                current = None
        if start is not None:
            raise DataFormatError(f"{path}:{start}: TREC topic opened here is not closed by </top> before the end "
                                  f"of the file (a truncated file?)")

    return _checked(path, records(), stats, unique=True, queries=True)


def iter_topics(path: PathLike, stats: ReadStats | None = None) -> Iterator[tuple[str, str]]:
    """Stream ``(qid, text)`` from any topic file: JSONL by extension (``.jsonl``/``.json``, gzipped too; id from
    ``qid``/``_id``/``id``, text from ``text``/``query``/``contents``/``title``), TREC when the first line opens
    with ``<top>``, else ``qid<TAB>text``."""
    path = Path(path)
    suffixes = [s for s in path.suffixes if s != ".gz"]
    if suffixes and suffixes[-1] in (".jsonl", ".json"):
        return _iter_jsonl_pairs(path, ("qid", "_id", "id"), ("text", "query", "contents", "title"), stats)
    first = next(iter_lines(path), (0, ""))[1]
    if first.lstrip().lower().startswith("<top>"):
        return iter_trec_topics(path, stats)
    return iter_tsv_topics(path, stats)


def load_topics(path: PathLike, stats: ReadStats | None = None) -> dict[str, str]:
    topics = dict(iter_topics(path, stats))
    if not topics:
        raise DataFormatError(f"{path}: no topics")
    return topics


def iter_corpus(path: PathLike, stats: ReadStats | None = None) -> Iterator[Document]:
    """Any supported corpus by its name: ``*.tsv[.gz]`` is an MS MARCO collection, ``*.jsonl[.gz]`` a BEIR corpus."""
    name = Path(path).name.removesuffix(".gz")
    if name.endswith(".tsv"):
        return iter_msmarco_collection(path, stats)
    if name.endswith(".jsonl"):
        return iter_beir_corpus(path, stats)
    raise DataFormatError(f"{path}: unknown corpus format (expected a BEIR corpus .jsonl or an MS MARCO .tsv)")
