"""TREC run files (``qid Q0 docid rank score tag``): a deterministic atomic writer, a validating reader, and the
run cache the evaluation drivers share.

The writer keeps the top ``k`` hits per topic in ``ranked`` order (score descending, docid ascending), writes
topics in sorted qid order and scores in Python's shortest exact form, so the same run always gives the same bytes
and reading it back gives the same scores. The validator is the reader: it rejects a run trec_eval would misread.
``cached_run`` writes a run file only for a run that passed ``checked_run`` (hits for at least one query; the judged
queries without any are reported), so a failed retrieval is never reused as a result.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from retromae_ir.data.readers import DataFormatError, iter_corpus, iter_lines
from retromae_ir.evaluate.metrics import Run, ranked
from retromae_ir.io import atomic_write

MAX_DEPTH = 1000
logger = logging.getLogger(__name__)


class EvaluationError(ValueError):
    """An evaluation that cannot give a valid result: an empty corpus, a retriever that found nothing."""


def write_trec_run(path: str | os.PathLike, run: Run, tag: str, k: int = MAX_DEPTH) -> Path:
    """Write the top ``k`` hits of every topic of ``run`` to ``path`` (atomically); returns the path."""
    _check_token(tag, "tag")
    with atomic_write(path) as out:
        for qid in sorted(run):
            _check_token(qid, "query id")
            for rank, (docid, score) in enumerate(ranked(run[qid])[:k], start=1):
                _check_token(docid, f"document id (query {qid!r})")
                if not math.isfinite(score):
                    raise ValueError(f"run score for query {qid!r}, document {docid!r} is {score}")
                out.write(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}\n")
    return Path(path)


def _check_token(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or len(value.split()) != 1 or value != value.strip():
        raise ValueError(f"{what} {value!r} cannot be a TREC run column (empty or holds whitespace)")


@dataclass
class RunSummary:
    """What ``validate_trec_run`` found in a well-formed run."""

    topics: int
    lines: int
    tags: set[str] = field(default_factory=set)


@dataclass
class _TopicState:
    rank: int
    score: float
    docids: set[str]


def _parse_run(path: Path, max_depth: int, report=None) -> tuple[Run, RunSummary]:
    """Parse and check a run; each violation raises ``DataFormatError``, or is passed to ``report`` (and the
    offending line skipped) when a caller wants every violation at once."""
    def fail(message: str) -> None:
        if report is None:
            raise DataFormatError(message)
        report(message)

    run: Run = {}
    state: dict[str, _TopicState] = {}
    summary = RunSummary(topics=0, lines=0)
    for number, line in iter_lines(path):
        try:
            qid, docid, rank, score, tag = _parse_line(path, number, line)
        except DataFormatError as exc:
            fail(str(exc))
            continue
        where = f"{path}:{number}:"
        topic = state.get(qid)
        if topic is not None:
            if docid in topic.docids:
                fail(f"{where} document {docid!r} appears twice for query {qid!r}")
                continue
            if len(topic.docids) >= max_depth:
                fail(f"{where} query {qid!r} has more than {max_depth} hits")
                continue
            if rank <= topic.rank:
                fail(f"{where} rank {rank} does not increase (previous rank {topic.rank} for query {qid!r})")
            elif score > topic.score:
                fail(f"{where} score {score} is higher than the score {topic.score} at the "
                     f"previous rank {topic.rank} for query {qid!r}")
            topic.rank, topic.score = rank, score
            topic.docids.add(docid)
        else:
            state[qid] = _TopicState(rank, score, {docid})
        run.setdefault(qid, {})[docid] = score
        summary.lines += 1
        summary.tags.add(tag)
    summary.topics = len(run)
    if not summary.lines:
        fail(f"{path}: empty run")
    return run, summary


def _parse_line(path: Path, number: int, line: str) -> tuple[str, str, int, float, str]:
    fields = line.split()
    if len(fields) != 6:
        raise DataFormatError(f"{path}:{number}: expected 6 columns 'qid Q0 docid rank score tag', "
                              f"got {len(fields)}: {line[:80]!r}")
    qid, _, docid, rank_text, score_text, tag = fields
    try:
        rank = int(rank_text)
    except ValueError:
        raise DataFormatError(f"{path}:{number}: rank {rank_text!r} is not an integer") from None
    try:
        score = float(score_text)
    except ValueError:
        raise DataFormatError(f"{path}:{number}: score {score_text!r} is not a number") from None
    if not math.isfinite(score):
        raise DataFormatError(f"{path}:{number}: score {score_text!r} is not finite")
    return qid, docid, rank, score, tag


def read_trec_run(path: str | os.PathLike, max_depth: int = MAX_DEPTH) -> Run:
    """``{qid: {docid: score}}`` from a run file, validated as ``validate_trec_run`` does."""
    return _parse_run(Path(path), max_depth)[0]


def validate_trec_run(path: str | os.PathLike, max_depth: int = MAX_DEPTH) -> RunSummary:
    """Raise ``DataFormatError`` naming the first bad line: wrong column count, non-numeric rank or score, a
    document twice in a topic, more than ``max_depth`` hits in a topic, ranks not increasing, or a score higher
    than the one at the topic's previous rank. A topic's lines need not be contiguous."""
    return _parse_run(Path(path), max_depth)[1]


def run_violations(path: str | os.PathLike, max_depth: int = MAX_DEPTH) -> tuple[Run, RunSummary, list[str]]:
    """Every violation ``validate_trec_run`` would stop at, collected; with the lines that passed."""
    violations: list[str] = []
    run, summary = _parse_run(Path(path), max_depth, violations.append)
    return run, summary, violations


@dataclass
class CachedRun:
    run: Run
    reused: bool
    no_hits: list[str]  # judged queries the run has no hits for (they score 0)


def require_documents(corpus: str | os.PathLike) -> None:
    """Refuse an empty corpus: retrieving from it would give (and cache) an index of nothing and a run of nothing."""
    if next(iter(iter_corpus(corpus)), None) is None:
        raise EvaluationError(f"{corpus}: the corpus holds no documents, so there is nothing to retrieve or score")


def checked_run(run: Run, queries: int, where: str) -> Run:
    """``run`` without its empty topics; refuses a run without any hit for its ``queries`` judged queries."""
    kept = {qid: hits for qid, hits in run.items() if hits}
    if not kept:
        raise EvaluationError(f"{where}: no hits for any of the {queries} judged queries; not a result to score or keep")
    return kept


def cached_run(path: str | os.PathLike, retrieve: Callable[[], Run], queries: Iterable[str], tag: str,
               force: bool = False) -> CachedRun:
    """The run in ``path`` unless ``force`` (or it is not usable, see ``_reusable``); else ``retrieve()``'s, written
    to ``path`` atomically once it has passed ``checked_run``. Judged queries without hits are logged and returned."""
    path, queries = Path(path), list(queries)
    run = None if force else _reusable(path, len(queries))
    reused = run is not None
    if run is None:
        run = checked_run(retrieve(), len(queries), f"{path.name}: retrieval")
        write_trec_run(path, run, tag)
    no_hits = sorted(set(queries) - set(run))
    if no_hits:
        logger.warning("%s: %d of %d judged queries have no hits (they score 0), e.g. %s", path, len(no_hits),
                       len(queries), no_hits[0])
    return CachedRun(run, reused, no_hits)


def _reusable(path: Path, queries: int) -> Run | None:
    """The run in ``path`` if it exists and passes the reader and ``checked_run``; a file that does not (e.g. the
    empty run an older version cached after a failed retrieval) is reported and redone, not scored."""
    if not path.is_file():
        return None
    try:
        run = checked_run(read_trec_run(path), queries, str(path))
    except ValueError as error:  # DataFormatError, EvaluationError
        logger.warning("%s is not a usable run (%s): retrieving again", path, error)
        return None
    logger.info("reusing %s (pass --force to redo)", path)
    return run
