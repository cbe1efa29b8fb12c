"""The run cache the evaluation drivers share (the run files themselves: ``retromae_ir.runs``).

``cached_run`` writes a run file only for a run that passed ``checked_run`` (hits for at least one query; the judged
queries without any are reported), so a failed retrieval is never reused as a result. Beside each run file it writes
the run's key (``<run>.key.json``: the retriever's model or parameters, the corpus bytes, the query texts); a run
file is reused only under an equal key, so another checkpoint of the same card name, retrained weights, other BM25
parameters or a changed corpus are retrieved again instead of scored from an old run.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from retromae_ir.data.readers import iter_corpus
from retromae_ir.io import as_stored, key_path, pairs_digest, read_key, write_key
from retromae_ir.runs import MAX_DEPTH, Run, cut_run, read_trec_run, write_trec_run

logger = logging.getLogger(__name__)


class EvaluationError(ValueError):
    """An evaluation that cannot give a valid result: an empty corpus, a retriever that found nothing."""


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


def run_key(retriever, corpus: str | os.PathLike, queries: dict[str, str], **extra) -> dict:
    """What a run depends on: ``retriever.run_key(corpus)`` (its model or parameters and the corpus bytes), the
    query ids and texts, and ``extra`` (a driver's own post-processing)."""
    return {**retriever.run_key(Path(corpus)), "queries_sha256": pairs_digest(sorted(queries.items())), **extra}


def cached_run(path: str | os.PathLike, retrieve: Callable[[], Run], queries: Iterable[str], tag: str,
               key: dict, force: bool = False) -> CachedRun:
    """The run in ``path`` if it was made under ``key`` (see ``run_key``) and is usable, unless ``force``; else
    ``retrieve()``'s cut to each query's best ``MAX_DEPTH`` (a retriever asked for one more, in case a self-hit
    is dropped), written to ``path`` atomically once it has passed ``checked_run``, then its key. Judged
    queries without hits are logged and returned."""
    path, queries = Path(path), list(queries)
    key = as_stored(key)
    run = None if force else _reusable(path, len(queries), key)
    reused = run is not None
    if run is None:
        run = checked_run(retrieve(), len(queries), f"{path.name}: retrieval")
        run = cut_run(run, MAX_DEPTH)  # what the file holds, as reused
        key_path(path).unlink(missing_ok=True)  # until the new key is written, the run file is not reusable
        write_trec_run(path, run, tag)
        write_key(path, key)
    no_hits = sorted(set(queries) - set(run))
    if no_hits:
        logger.warning("%s: %d of %d judged queries have no hits (they score 0), e.g. %s", path, len(no_hits),
                       len(queries), no_hits[0])
    return CachedRun(run, reused, no_hits)


def _reusable(path: Path, queries: int, key: dict) -> Run | None:
    """The run in ``path`` if it exists, was made under ``key`` and passes the reader and ``checked_run``; any other
    (no key: an older version's or an interrupted write; another key; the empty run an older version cached after a
    failed retrieval) is reported and redone, not scored."""
    if not path.is_file():
        return None
    recorded = read_key(path)
    if recorded != key:
        differing = "no key recorded" if recorded is None else "made with other " + ", ".join(
            sorted(name for name in set(key) | set(recorded) if key.get(name) != recorded.get(name)))
        logger.warning("%s is not reused (%s): retrieving again", path, differing)
        return None
    try:
        run = checked_run(read_trec_run(path), queries, str(path))
    except ValueError as error:  # DataFormatError, EvaluationError
        logger.warning("%s is not a usable run (%s): retrieving again", path, error)
        return None
    logger.info("reusing %s (pass --force to redo)", path)
    return run
