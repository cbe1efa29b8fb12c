"""A dev split carved from the training qrels: hyper-parameters are chosen on it, never on the test split.

The held-out queries (a seeded sample of the training queries) are removed from the training qrels, so a
configuration tuned on dev has not trained on them. Written in BEIR's qrels layout (``query-id corpus-id score``)
beside a ``split.json`` that records the source file's digest, the size and the seed: a changed source or setting
writes the split anew instead of reusing an old one.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from retromae_ir.data.readers import PathLike, load_qrels
from retromae_ir.io import atomic_write, file_digest


def carve_dev_split(qrels: PathLike, size: int, output: PathLike, seed: int = 0) -> tuple[Path, Path]:
    """``output/train.tsv`` (the qrels minus ``size`` seeded queries) and ``output/dev.tsv`` (those queries)."""
    output = Path(output)
    train_path, dev_path, meta_path = output / "train.tsv", output / "dev.tsv", output / "split.json"
    meta = {"source": str(qrels), "source_sha256": file_digest(qrels), "size": size, "seed": seed}
    if train_path.is_file() and dev_path.is_file() and meta_path.is_file() \
            and json.loads(meta_path.read_text()) == meta:
        return train_path, dev_path
    labels = load_qrels(qrels)
    if not 0 < size < len(labels):
        raise ValueError(f"{qrels}: a dev split of {size} queries needs 0 < size < {len(labels)} (its query count)")
    dev = set(random.Random(seed).sample(sorted(labels), size))
    meta_path.unlink(missing_ok=True)  # until the new record, the pair being rewritten is never taken as finished
    for path, keep in ((train_path, lambda q: q not in dev), (dev_path, lambda q: q in dev)):
        with atomic_write(path) as handle:
            handle.write("query-id\tcorpus-id\tscore\n")
            for qid, docs in labels.items():
                if keep(qid):
                    handle.writelines(f"{qid}\t{docid}\t{label}\n" for docid, label in docs.items())
    with atomic_write(meta_path) as handle:
        json.dump(meta, handle, indent=2)
    return train_path, dev_path
