"""A dev split carved from the training qrels: hyper-parameters are chosen on it, never on the test split.

The held-out queries (a seeded sample of the training queries) are removed from the training qrels, so a
configuration tuned on dev has not trained on them; given the query texts, so is every other training query with
the same text as a held-out one (scifact's train split holds one text under two ids, with the same positives).
Written in BEIR's qrels layout (``query-id corpus-id score``) beside a ``split.json`` that records the source
file's digest (and the queries'), the size and the seed: a changed source or setting writes the split anew instead
of reusing an old one.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from retromae_ir.data.readers import PathLike, iter_topics, load_qrels
from retromae_ir.io import atomic_write, file_digest


def carve_dev_split(qrels: PathLike, size: int, output: PathLike, seed: int = 0,
                    queries: PathLike | None = None) -> tuple[Path, Path]:
    """``output/train.tsv`` (the qrels minus ``size`` seeded queries, and minus any query of ``queries`` whose text
    is one of theirs) and ``output/dev.tsv`` (those ``size`` queries)."""
    output = Path(output)
    train_path, dev_path, meta_path = output / "train.tsv", output / "dev.tsv", output / "split.json"
    meta = {"source": str(qrels), "source_sha256": file_digest(qrels), "size": size, "seed": seed}
    if queries is not None:
        meta.update(queries=str(queries), queries_sha256=file_digest(queries))
    if train_path.is_file() and dev_path.is_file() and meta_path.is_file() \
            and json.loads(meta_path.read_text()) == meta:
        return train_path, dev_path
    labels = load_qrels(qrels)
    if not 0 < size < len(labels):
        raise ValueError(f"{qrels}: a dev split of {size} queries needs 0 < size < {len(labels)} (its query count)")
    dev = set(random.Random(seed).sample(sorted(labels), size))
    held_out = dev | (same_text_queries(queries, dev) if queries is not None else set())
    meta_path.unlink(missing_ok=True)  # until the new record, the pair being rewritten is never taken as finished
    for path, keep in ((train_path, lambda q: q not in held_out), (dev_path, lambda q: q in dev)):
        with atomic_write(path) as handle:
            handle.write("query-id\tcorpus-id\tscore\n")
            for qid, docs in labels.items():
                if keep(qid):
                    handle.writelines(f"{qid}\t{docid}\t{label}\n" for docid, label in docs.items())
    with atomic_write(meta_path) as handle:
        json.dump(meta, handle, indent=2)
    return train_path, dev_path


def same_text_queries(queries: PathLike, held_out: set[str]) -> set[str]:
    """Ids of ``queries`` outside ``held_out`` whose text (case and spacing aside) is a held-out query's."""
    texts = {qid: " ".join(text.lower().split()) for qid, text in iter_topics(queries)}
    dev_texts = {texts[qid] for qid in held_out if qid in texts}
    return {qid for qid, text in texts.items() if qid not in held_out and text in dev_texts}
