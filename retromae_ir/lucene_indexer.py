"""Running Pyserini's Lucene indexer (``python -m pyserini.index.lucene``) and checking what it indexed.

The indexer exits 0 whatever its threads hit: an exception while adding a document (a docid over Lucene's
32,766-byte term limit, say) ends that thread's whole collection file, which it logs and leaves out of the index.
A one-file collection of 4 documents with one such id indexed none of them, exit 0. So every build reads the
indexer's final counters and requires each document written to be indexed, or counted empty (Lucene keeps no
document without terms: such a document matches nothing either way).
"""
from __future__ import annotations

import logging
import re
import sys

from retromae_ir.process import run_child

logger = logging.getLogger(__name__)

# the count as Java formats it in the indexer's locale: 5,183,123, 5.183.123, 5 183 123 (U+202F), ...
COUNTER = re.compile(r"AbstractIndexer\b.* - (indexed|unindexable|empty|skipped|errors):\s+(\d[^\n]*?)\s*$",
                     re.MULTILINE)


class IndexingError(ValueError):
    """The indexer indexed other documents than the collection holds (bad input, most often: one line, exit 2,
    under the commands' error rule)."""


def build_lucene_index(arguments: list[str], documents: int, what: str) -> None:
    """Run ``python -m pyserini.index.lucene ARGUMENTS`` over a collection of ``documents`` documents (``what``
    names it in errors); raises :class:`IndexingError` unless every document was indexed or counted empty. The
    command and the indexer's own lines (its progress, its counters) go to the job's log as they come: an MS MARCO
    build ran silent, and its output was dropped when it succeeded."""
    logger.info("indexing %d documents of %s: python -m pyserini.index.lucene %s", documents, what,
                " ".join(arguments))
    done = run_child([sys.executable, "-m", "pyserini.index.lucene", *arguments],
                     on_line=lambda line: logger.info("lucene: %s", line) if line.strip() else None)
    if done.returncode != 0:  # the indexer itself failed (a JVM error, memory): not the input's fault
        raise RuntimeError(f"Lucene indexing of {what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
    check_counters(done.stdout, documents, what)


def check_counters(log: str, documents: int, what: str) -> None:
    """Compare the indexer's final counters in ``log`` with the ``documents`` written."""
    counters = {name: int(re.sub(r"\D", "", value)) for name, value in COUNTER.findall(log)}
    if set(counters) != {"indexed", "unindexable", "empty", "skipped", "errors"}:
        raise IndexingError(f"Lucene indexing of {what}: the indexer's final counters are not in its output, so "
                            f"what it indexed cannot be checked:\n{log[-3000:]}")
    accounted = counters["indexed"] + counters["empty"]
    if accounted != documents or counters["unindexable"] or counters["skipped"] or counters["errors"]:
        failure = next((line for line in log.splitlines() if "Exception" in line), "")
        raise IndexingError(f"Lucene indexing of {what}: {documents} documents written, "
                            f"{counters['indexed']} indexed and {counters['empty']} empty "
                            f"({', '.join(f'{k} {v}' for k, v in counters.items() if k not in ('indexed', 'empty'))})"
                            f"{': ' + failure.strip()[:500] if failure else ''}")
