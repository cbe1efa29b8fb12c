"""NQ open-domain retrieval in DPR's setting (MASTER Table 3): top-k retrieval accuracy over DPR's Wikipedia passages.

Inputs are DPR's files as published:

* ``psgs_w100.tsv``: ``id<TAB>text<TAB>title`` with a header line; fields are CSV-quoted where they hold quotes
  (``"Aaron ( or ; ""Ahärôn"") is ..."``), as DPR's own reader (``csv.reader(..., delimiter="\\t")``) expects.
* ``nq-test.qa.csv``: ``question<TAB>answers``, no header; ``answers`` is a Python list literal (``['Tom Hanks']``),
  CSV-quoted when it holds a double quote. Question ids are the 0-based line order (Pyserini's ``dpr-nq-test`` ids).

A passage is encoded as ``title + " " + text`` (``Document.contents``, as every corpus here). A question is answered
at k when the *text* (not the title) of one of its top-k passages contains an answer, token for token after
Pyserini's ``SimpleTokenizer`` (DPR's has_answer: ``pyserini.eval.evaluate_dpr_retrieval.has_answers``). The runs
are written as TREC files and as Pyserini's DPR retrieval JSON (``{qid: {"question", "answers", "contexts":
[{"docid", "score", "has_answer"}, ...]}}``, contexts in rank order), and the accuracy is computed by Pyserini's
own ``evaluate_retrieval`` on that JSON. Every question is in the JSON, those without hits with no contexts, so
they count as misses (Pyserini's TREC converter leaves them out, which would raise the accuracy).

Encoding uses the library's resumable chunks and shards (``retromae_ir.encode.corpus.encode_shard`` / ``merge``);
search is the exact searcher (``retromae_ir.search.exact_hybrid``) in dense, sparse or hybrid mode.
"""
from __future__ import annotations

import ast
import contextlib
import csv
import gzip
import io
import json
import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from retromae_ir.data.readers import DataFormatError, Document, without_byte_order_mark
from retromae_ir.runs import Run, ranked
from retromae_ir.evaluate.runs import EvaluationError
from retromae_ir.io import atomic_write

logger = logging.getLogger(__name__)
TOP_K = (1, 5, 20, 100)
HEADER = ["id", "text", "title"]


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    answers: tuple[str, ...]


# --- DPR's files -------------------------------------------------------------------------------------------------

def _decoded_lines(path: Path) -> Iterator[str]:
    """The lines of a (possibly gzipped) file, each decoded strictly as UTF-8 on its own, so a bad byte is named
    by its line (a text-mode file decodes in blocks and would blame the first line of the block)."""
    gzipped = path.suffix == ".gz"
    with (gzip.open if gzipped else open)(path, "rb") as handle:
        lines, number = iter(handle), 0
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
                if not gzipped:
                    raise
                raise DataFormatError(f"{path}:{number + 1}: not a valid gzip file ({err})") from None
            number += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataFormatError(f"{path}:{number}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
            yield without_byte_order_mark(path, number, line)


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of a tab-separated file with CSV quoting (DPR's reader); blank lines skipped. Bad bytes or
    bad quoting stop with ``DataFormatError`` naming the line."""
    reader = csv.reader(_decoded_lines(path), delimiter="\t")
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise DataFormatError(f"{path}:{reader.line_num}: {err}") from None
        if row and any(field.strip() for field in row):
            yield reader.line_num, row


def iter_dpr_passages(path: str | os.PathLike, unique: bool = True) -> Iterator[Document]:
    """Stream DPR's ``psgs_w100.tsv`` (``.gz`` too) as ``Document(id, title, text)``; the header line is skipped.
    A row without exactly three columns, an empty id or (with ``unique``) a repeated id is a ``DataFormatError``."""
    path = Path(path)
    seen: set[str] = set()
    for number, row in _csv_rows(path):
        if row == HEADER:
            continue
        if len(row) != 3 or not row[0].strip():
            raise DataFormatError(f"{path}:{number}: expected 'id<TAB>text<TAB>title' (3 tab-separated columns), "
                                  f"got {len(row)}: {chr(9).join(row)[:80]!r}")
        docid, text, title = row[0].strip(), row[1], row[2]
        if unique:
            if docid in seen:
                raise DataFormatError(f"{path}:{number}: duplicate passage id {docid!r}")
            seen.add(docid)
        yield Document(docid, title, text)


def read_dpr_corpus(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(ids, ``title + " " + text``) of every passage, as the encoder reads them; an empty corpus is an error."""
    docids, texts = [], []
    for doc in iter_dpr_passages(path):
        docids.append(doc.docid)
        texts.append(doc.contents)
    if not docids:
        raise DataFormatError(f"{path}: no passages")
    return docids, texts


def passage_texts(path: str | os.PathLike, docids: Iterable[str]) -> dict[str, str]:
    """The text (without the title: what has_answer reads) of each of ``docids``, in one streaming pass."""
    wanted = set(docids)
    found = {}
    for doc in iter_dpr_passages(path, unique=False):
        if doc.docid in wanted:
            found[doc.docid] = doc.text
    missing = wanted - set(found)
    if missing:
        raise EvaluationError(f"{path}: {len(missing)} retrieved passages are not in the corpus (e.g. "
                              f"{sorted(missing)[:3]}): was the index built from another corpus?")
    return found


def load_dpr_questions(path: str | os.PathLike) -> list[Question]:
    """DPR's ``nq-test.qa.csv`` (``question<TAB>['answer', ...]``), ids ``"0"``, ``"1"``, ... in file order."""
    path = Path(path)
    questions = []
    for number, row in _csv_rows(path):
        if len(row) != 2 or not row[0].strip():
            raise DataFormatError(f"{path}:{number}: expected 'question<TAB>answers' (2 tab-separated columns), "
                                  f"got {len(row)}: {chr(9).join(row)[:80]!r}")
        try:
            answers = ast.literal_eval(row[1].strip())
        except (ValueError, SyntaxError):
            raise DataFormatError(f"{path}:{number}: answers {row[1][:80]!r} are not a Python list literal") from None
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a for a in answers):
            raise DataFormatError(f"{path}:{number}: answers must be a non-empty list of non-empty strings, "
                                  f"got {row[1][:80]!r}")
        questions.append(Question(str(len(questions)), row[0].strip(), tuple(answers)))
    if not questions:
        raise DataFormatError(f"{path}: no questions")
    return questions


# --- answers in passages, Pyserini's DPR retrieval JSON and its evaluator ---------------------------------------

class AnswerMatcher:
    """``has_answer(qid, docid)`` through Pyserini's ``has_answers`` with its ``SimpleTokenizer`` (DPR's rule),
    memoised: the modes of one run share most of their (question, passage) pairs."""

    def __init__(self, questions: dict[str, Question], texts: dict[str, str]):
        from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer

        self.questions, self.texts = questions, texts
        self.tokenizer = SimpleTokenizer()
        self._memo: dict[tuple[str, str], bool] = {}

    def __call__(self, qid: str, docid: str) -> bool:
        from pyserini.eval.evaluate_dpr_retrieval import has_answers

        key = (qid, docid)
        if key not in self._memo:
            self._memo[key] = bool(has_answers(self.texts[docid], list(self.questions[qid].answers), self.tokenizer))
        return self._memo[key]


def dpr_retrieval(run: Run, questions: list[Question], has_answer, depth: int) -> dict:
    """Pyserini's DPR retrieval JSON: every question, its top ``depth`` passages in ``ranked`` order (the TREC run's
    order) with ``has_answer``. A question without hits keeps an empty context list (a miss at every k)."""
    out = {}
    for q in questions:
        hits = ranked(run.get(q.qid, {}))[:depth]
        out[q.qid] = {"question": q.question, "answers": list(q.answers),
                      "contexts": [{"docid": docid, "score": float(score), "has_answer": has_answer(q.qid, docid)}
                                   for docid, score in hits]}
    return out


def write_dpr_retrieval(path: str | os.PathLike, retrieval: dict) -> Path:
    with atomic_write(path) as out:
        json.dump(retrieval, out, indent=1, ensure_ascii=False)
    return Path(path)


_ACCURACY_LINE = re.compile(r"^Top(\d+)\taccuracy: ([0-9.]+)$")


def top_k_accuracy(retrieval_file: str | os.PathLike, ks: Iterable[int] = TOP_K) -> dict[int, float]:
    """``{k: accuracy}`` as ``pyserini.eval.evaluate_dpr_retrieval.evaluate_retrieval`` computes it (the mean over
    the file's questions of "an answer among the top k"); it prints its figures (4 decimals), which are read back."""
    from pyserini.eval.evaluate_dpr_retrieval import evaluate_retrieval

    ks = sorted(set(ks))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        evaluate_retrieval(str(retrieval_file), ks, regex=False)
    found = {}
    for line in printed.getvalue().splitlines():
        match = _ACCURACY_LINE.match(line.strip())
        if match:
            found[int(match.group(1))] = float(match.group(2))
    if sorted(found) != ks:
        raise RuntimeError(f"pyserini's evaluate_retrieval printed {printed.getvalue()!r}, not an accuracy for each "
                           f"of {ks}")
    return found


# --- encoding and search -----------------------------------------------------------------------------------------

SEARCH_MODES = {"dense", "sparse", "hybrid"}
RESULTS_STEM = "nq-results"  # the driver's table (eval/nq.py), written once every mode is scored


def index_is_current(index_dir: Path, model, docids: list[str], texts: list[str]) -> bool:
    """Built from these passages (ids and texts) by this card, weights, precision and encoding code: reused, never
    re-encoded."""
    from retromae_ir.encode.corpus import corpus_digest
    from retromae_ir.encode.manifest import reusable_manifest

    data = reusable_manifest(index_dir, model)
    return (data is not None and data.get("weights") == model.checkpoint_digests()
            and data.get("corpus_digest") == corpus_digest(docids, texts))


def build_index(model, corpus: Path, index_dir: Path, shard_id: int | None = None, shard_count: int = 1,
                chunk_size: int = 4096, batch_size: int = 64, threads: int = 1) -> str | None:
    """Encode DPR's passages into ``index_dir`` (faiss flat, plus the sparse side for a DupMAE card).

    ``shard_id`` given (with ``shard_count`` > 1): encode that shard's contiguous slice of the passages into
    ``index_dir/.work/<sources>-of-<n>/shard-<i>/`` (resumable chunks, the shard folder locked) and return None;
    shards run side by side, on other GPUs or machines sharing the folder. Otherwise (the index folder locked): reuse
    an index of these passages, this card, weights, precision and encoding code; else encode (one shard) or join the
    ``shard_count`` finished shards (an unfinished one is an error naming it), then build the indexes and the
    manifest. Returns the manifest's text as checked under the lock (None for a shard): :func:`evaluate_modes` holds
    what it opens to it."""
    from retromae_ir.encode.corpus import corpus_digest, encode_shard, find_work, merge, precision
    from retromae_ir.encode.manifest import MANIFEST
    from retromae_ir.io import claim_output

    docids, texts = read_dpr_corpus(corpus)
    logger.info("%s: %d passages", corpus, len(docids))
    if shard_id is not None and shard_count > 1:
        folder = encode_shard(model, docids, texts, index_dir, shard_id, shard_count, chunk_size, batch_size)
        logger.info("shard %d of %d encoded in %s", shard_id, shard_count, folder)
        return None
    with claim_output(index_dir):
        if index_is_current(index_dir, model, docids, texts):
            logger.info("reusing the index %s", index_dir)
            return (index_dir / MANIFEST).read_text()
        if shard_count == 1:
            work = encode_shard(model, docids, texts, index_dir, 0, 1, chunk_size, batch_size).parent
        else:
            work = find_work(index_dir, model.card, shard_count, model.int8, precision=precision(model),
                             corpus_digest=corpus_digest(docids, texts))  # whatever --chunk-size the shards had
        del texts
        merge(index_dir, model.card, model.vocab, shard_count, threads, work=work,
              extra={"corpus": str(corpus), "bf16": model.bf16})
        return (index_dir / MANIFEST).read_text()


def search(model, index_dir: Path, mode: str, questions: list[Question], hits: int = 100, batch_size: int = 64,
           threads: int = 1, checked: str | None = None) -> Run:
    """``{qid: {docid: score}}``: the top ``hits`` passages of each question, by the exact searcher in ``mode``.
    ``checked``: the manifest text :func:`build_index` checked under the lock; the opened index must still be it
    (another run of another corpus may have rebuilt the folder since, while earlier modes were searched)."""
    from retromae_ir.encode.manifest import MANIFEST
    from retromae_ir.io import check_unchanged
    from retromae_ir.search.exact_hybrid import ExactHybridSearcher

    searcher = ExactHybridSearcher(index_dir, model, mode, candidates=1000, threads=threads)
    if checked is not None:
        check_unchanged(index_dir / MANIFEST, checked)
    return searcher.batch_search([q.question for q in questions], [q.qid for q in questions], k=hits,
                                 batch_size=batch_size)


@dataclass
class ModeResult:
    mode: str
    run_file: Path
    retrieval_file: Path
    accuracy: dict[int, float]
    questions: int
    without_hits: int


def evaluate_modes(model, index_dir: Path, corpus: Path, questions: list[Question], modes: list[str],
                   out_dir: Path, ks: Iterable[int] = TOP_K, hits: int | None = None, batch_size: int = 64,
                   threads: int = 1, checked: str | None = None) -> list[ModeResult]:
    """Search each mode, write ``out_dir/<mode>.trec`` and ``out_dir/<mode>.dpr.json`` and score the latter with
    Pyserini's evaluator. A mode that finds nothing for any question is an error (nothing is written for it).
    ``checked``: :func:`build_index`'s manifest text, which each mode's opened index must still match."""
    from retromae_ir.runs import write_trec_run

    ks = sorted(set(ks))
    hits = hits or max(ks)
    if hits < max(ks):
        raise ValueError(f"--hits {hits} is below the largest k ({max(ks)}): top-{max(ks)} accuracy needs them")
    runs = {}
    for mode in modes:
        run = search(model, index_dir, mode, questions, hits, batch_size, threads, checked)
        if not any(run.values()):
            raise EvaluationError(f"{mode} search of {index_dir} found no passage for any of the "
                                  f"{len(questions)} questions")
        runs[mode] = run
    for stale in SEARCH_MODES - set(runs):  # an earlier run's other modes (other weights, perhaps) would sit beside
        for suffix in (".trec", ".dpr.json"):  # this run's files as if they were its results
            (out_dir / f"{stale}{suffix}").unlink(missing_ok=True)
    for suffix in (".md", ".csv"):  # nor an earlier table beside the files about to be replaced, should this run fail
        (out_dir / f"{RESULTS_STEM}{suffix}").unlink(missing_ok=True)
    retrieved = {docid for run in runs.values() for hits_of in run.values() for docid in hits_of}
    matcher = AnswerMatcher({q.qid: q for q in questions}, passage_texts(corpus, retrieved))
    results = []
    for mode, run in runs.items():
        tag = f"{model.card.name}-{mode}"
        run_file = write_trec_run(out_dir / f"{mode}.trec", run, tag, k=hits)
        retrieval_file = write_dpr_retrieval(out_dir / f"{mode}.dpr.json", dpr_retrieval(run, questions, matcher,
                                                                                          hits))
        accuracy = top_k_accuracy(retrieval_file, ks)
        without = sum(1 for q in questions if not run.get(q.qid))
        if without:
            logger.warning("%s: %d of %d questions have no hits (counted as misses)", mode, without, len(questions))
        logger.info("%s: %s", mode, "  ".join(f"top-{k} {v:.4f}" for k, v in accuracy.items()))
        results.append(ModeResult(mode, run_file, retrieval_file, accuracy, len(questions), without))
    return results


def results_frame(results: list[ModeResult], card_name: str, dense_index: str = "Flat"):
    """One row a mode; ``dense_index``: the faiss index searched (``Flat``, or what ``encode dense-index`` made)."""
    import pandas as pd

    return pd.DataFrame([{"encoder": card_name, "mode": r.mode, "dense index": dense_index, "questions": r.questions,
                          "without hits": r.without_hits, **{f"top-{k}": v for k, v in r.accuracy.items()}}
                         for r in results])
