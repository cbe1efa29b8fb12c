"""A judged sub-corpus: every document some query's qrels name, plus a seeded sample of the rest.

It keeps each query's positives retrievable while making the corpus small enough to encode in a minute or two
on a CPU (the quick reproduction configuration). Metrics over it are comparable only with systems searched over
the same sub-corpus, so whoever uses one also runs its baselines on it.
"""
from __future__ import annotations

import json
import random

from retromae_ir.data.readers import PathLike, iter_beir_corpus, load_qrels
from retromae_ir.io import atomic_write


def judged_ids(qrels_files: list[PathLike]) -> set[str]:
    """Every document id the qrels files name (any label, zero included: a judged non-relevant document is a
    meaningful distractor)."""
    return {docid for path in qrels_files for labels in load_qrels(path).values() for docid in labels}


class SubCorpusSizeError(ValueError):
    """The size asked for is below the judged documents or above the corpus."""


def write_judged_subcorpus(corpus: PathLike, qrels_files: list[PathLike], size: int, output: PathLike,
                           seed: int = 0) -> int:
    """Write ``size`` documents of ``corpus`` to ``output`` (BEIR JSONL, corpus order): the judged ones and a
    ``seed``-ed sample of the others. Returns the number written. ``size`` below the judged count or above the
    corpus's (it was the whole corpus, reported as a ``size``-document sub-corpus), or judged ids missing from the
    corpus, are errors and leave no file behind."""
    documents = list(iter_beir_corpus(corpus))
    judged = judged_ids(qrels_files)
    missing = judged - {doc.docid for doc in documents}
    if missing:
        raise ValueError(f"{corpus}: {len(missing)} judged document ids are not in the corpus, e.g. "
                         f"{sorted(missing)[:3]}")
    if size < len(judged):
        raise SubCorpusSizeError(f"sub-corpus size {size} is below the {len(judged)} judged documents of "
                                 f"{', '.join(map(str, qrels_files))}")
    if size > len(documents):
        raise SubCorpusSizeError(f"sub-corpus size {size} is above the {len(documents)} documents of {corpus}: "
                                 f"ask for at most {len(documents)}, or use the whole corpus")
    others = [doc.docid for doc in documents if doc.docid not in judged]
    keep = judged | set(random.Random(seed).sample(others, size - len(judged)))
    with atomic_write(output) as handle:
        for doc in documents:
            if doc.docid in keep:
                handle.write(json.dumps({"_id": doc.docid, "title": doc.title, "text": doc.text}) + "\n")
    return len(keep)
