"""TREC run files (``qid Q0 docid rank score tag``), the interface between search, mining, submission and evaluation:
the ranking order, a deterministic atomic writer and a validating reader.

The writer keeps the top ``k`` hits per topic in ``ranked`` order (score descending, docid ascending), writes
topics in sorted qid order and scores in Python's shortest exact form, so the same run always gives the same bytes
and reading it back gives the same scores, except ties (:func:`untied`): trec_eval ignores the rank column, reads a
score as a 32-bit float and orders equal ones by docid descending, so a tie is written a float32 step lower and
every trec_eval (Pyserini's, a submission's) scores the ranking we do. The validator is the reader: it rejects a
run trec_eval would misread.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from retromae_ir.data.readers import DataFormatError, iter_lines, plain_numeral
from retromae_ir.io import atomic_write

MAX_DEPTH = 1000
FLOAT32_MAX = 3.4028234663852886e38  # trec_eval reads scores as 32-bit floats (and torch's float32 tensors hold them)
Run = dict[str, dict[str, float]]


def ranked(hits: dict[str, float]) -> list[tuple[str, float]]:
    """``(docid, score)`` pairs in ranking order: score descending, ties by docid ascending."""
    return sorted(hits.items(), key=lambda item: (-item[1], item[0]))


def cut_run(run: Run, depth: int) -> Run:
    """Each topic's best ``depth`` hits, in ranking order (:func:`ranked`)."""
    return {qid: dict(ranked(hits)[:depth]) for qid, hits in run.items()}


def remove_self_hits(run: Run, depth: int | None = None) -> Run:
    """Drop each query's own id from its hits: BEIR's evaluation and Pyserini's BEIR 2CR do, on every dataset.
    ``depth``: then keep each query's best ``depth`` (ties by docid), for a run retrieved ``depth + 1`` deep so that
    a dropped self-hit does not leave ``depth - 1`` hits behind."""
    kept = {qid: {docid: score for docid, score in hits.items() if docid != qid} for qid, hits in run.items()}
    if depth is None:
        return kept
    return cut_run(kept, depth)


def untied(hits: list[tuple[str, float]]) -> tuple[list[tuple[str, float]], int]:
    """``hits`` in rank order (scores not increasing) with scores strictly decreasing as trec_eval reads them (32-bit
    floats), and how many moved: a score whose float32 is not below the one above it becomes the next float32 down
    from that one; every other score is kept exactly."""
    import numpy as np

    out, moved, above = [], 0, np.float32(np.inf)
    for docid, score in hits:
        single = np.float32(score)
        if single < above:
            out.append((docid, float(score)))
        else:
            with np.errstate(over="ignore"):  # below float32's lowest value: -inf, refused just below
                single = np.nextafter(above, np.float32(-np.inf))
            if not np.isfinite(single):
                raise ValueError(f"run score {score} of document {docid!r} ties at float32's lowest value: trec_eval "
                                 f"could not read the ranking")
            out.append((docid, float(single)))
            moved += 1
        above = single
    return out, moved


def write_trec_run(path: str | os.PathLike, run: Run, tag: str, k: int = MAX_DEPTH) -> Path:
    """Write the top ``k`` hits of every topic of ``run`` to ``path`` (atomically), ties :func:`untied`; returns
    the path."""
    _check_token(tag, "tag")
    with atomic_write(path) as out:
        for qid in sorted(run):
            _check_token(qid, "query id")
            for docid, score in run[qid].items():
                if not math.isfinite(score):
                    raise ValueError(f"run score for query {qid!r}, document {docid!r} is {score}")
                if abs(score) > FLOAT32_MAX:
                    raise ValueError(f"run score for query {qid!r}, document {docid!r} is {score}, beyond float32's "
                                     f"range: trec_eval would read it as infinite")
            for rank, (docid, score) in enumerate(untied(ranked(run[qid])[:k])[0], start=1):
                _check_token(docid, f"document id (query {qid!r})")
                out.write(f"{qid} Q0 {docid} {rank} {score!r} {tag}\n")
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
    """Parse and check a run; each violation raises ``DataFormatError``, or is passed to ``report`` when a caller
    wants every violation at once: the offending line is then skipped, except for a rank or score out of order,
    whose line is kept (scoring reads the scores, not the ranks)."""
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
    for name, text in (("rank", rank_text), ("score", score_text)):
        if not plain_numeral(text):
            raise DataFormatError(f"{path}:{number}: {name} {text!r} is not a number as trec_eval reads one")
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
