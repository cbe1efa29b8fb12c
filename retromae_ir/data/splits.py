"""A dev split carved from the training qrels: hyper-parameters are chosen on it, never on the test split.

The held-out queries, a seeded sample of the training queries, are removed from the training qrels, so a
configuration tuned on dev has not trained on them. No evaluated (test) query is drawn, nor one whose text is an
evaluated query's, and given the query texts no such query trains either, nor one whose text is a dev query's:
scifact's train split holds test queries 870 and 1292 again as 871 and 1291, with the same positives, and two pairs
of its own (85/86 with the same positives, 89/90). Written in BEIR's qrels layout (``query-id corpus-id score``)
beside a ``split.json`` that records the source files' digests, the size, the seed and :data:`SPLIT_VERSION`: a
changed source, setting or rule writes the split anew instead of reusing an old one.
"""
from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

from retromae_ir.data.readers import PathLike, iter_topics, load_qrels
from retromae_ir.io import atomic_write, file_digest

# bumped when a rule changes: 2, dev holds no evaluated query nor its twin (1 drew dev among them); 3, twins are
# the same text up to punctuation too, and dev draws no query without a relevant judgement (2026-11-27)
SPLIT_VERSION = 3
SENTENCE_PUNCTUATION = ".,;:!?\"'()[]{}¿¡«»“”‘’…"


def carve_dev_split(qrels: PathLike, size: int, output: PathLike, seed: int = 0, queries: PathLike | None = None,
                    evaluated: tuple[PathLike, ...] = ()) -> tuple[Path, Path]:
    """``output/train.tsv`` and ``output/dev.tsv``: ``size`` seeded queries of ``qrels`` for dev, the rest for
    training, less the queries of the ``evaluated`` qrels files (the test split) and, given ``queries`` (the texts of
    every split's queries, as BEIR's queries.jsonl holds them), less every query whose text is a dev or an evaluated
    query's."""
    output = Path(output)
    train_path, dev_path, meta_path = output / "train.tsv", output / "dev.tsv", output / "split.json"
    meta = {"version": SPLIT_VERSION, "source": str(qrels), "source_sha256": file_digest(qrels), "size": size,
            "seed": seed}
    if queries is not None:
        meta.update(queries=str(queries), queries_sha256=file_digest(queries))
    if evaluated:
        meta.update(evaluated={str(path): file_digest(path) for path in evaluated})
    if train_path.is_file() and dev_path.is_file() and meta_path.is_file() \
            and json.loads(meta_path.read_text()) == meta:
        return train_path, dev_path
    labels = load_qrels(qrels)
    if not 0 < size < len(labels):
        raise ValueError(f"{qrels}: a dev split of {size} queries needs 0 < size < {len(labels)} (its query count)")
    evaluated_ids = {qid for path in evaluated for qid in load_qrels(path)}
    texts = normalized_texts(queries) if queries is not None else {}
    barred = evaluated_ids | same_text_queries(texts, evaluated_ids)
    # a query judged only non-relevant (label 0) would score 0 under every setting dev compares: never drawn
    unjudged = {qid for qid, docs in labels.items() if not any(label >= 1 for label in docs.values())}
    dev = dev_sample(sorted(labels), size, seed, barred | unjudged, qrels)
    held_out = dev | barred
    held_out |= same_text_queries(texts, held_out)
    if not set(labels) - held_out:
        raise ValueError(f"{qrels}: no training query is left once the dev and evaluated queries (and their "
                         f"same-text twins) are held out")
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


def dev_sample(candidates: list[str], size: int, seed: int, barred: set[str], source: PathLike) -> set[str]:
    """``size`` seeded queries of ``candidates``, none of them ``barred`` (an evaluated query or its twin, a query
    without a relevant judgement): a barred query the seeded sample draws is replaced by another draw, so a sample
    that draws none is unchanged."""
    rng = random.Random(seed)
    dev = set(rng.sample(candidates, size))
    drawn = dev & barred
    if drawn:
        others = sorted(set(candidates) - dev - barred)
        if len(others) < len(drawn):
            raise ValueError(f"{source}: a dev split of {size} queries needs {size} training queries that are not "
                             f"evaluated queries, their twins or judged only non-relevant; there are "
                             f"{len(set(candidates) - barred)}")
        dev = (dev - drawn) | set(rng.sample(others, len(drawn)))
    return dev


def normalized_query(text: str) -> str:
    """A query's text, case, spacing and the sentence punctuation around its words aside (what makes two queries
    the same: "What causes X?" in training and "what causes x" in the test set are one query). Characters inside a
    word stay ("c++" is not "c"), as do combining marks (a Devanagari vowel sign is part of its word)."""
    words = (word.strip(SENTENCE_PUNCTUATION) for word in unicodedata.normalize("NFKC", text).casefold().split())
    return " ".join(word for word in words if word)


def normalized_texts(queries: PathLike) -> dict[str, str]:
    """``{qid: text}`` of a topics file, by :func:`normalized_query`."""
    return {qid: normalized_query(text) for qid, text in iter_topics(queries)}


def same_text_queries(texts: dict[str, str], held_out: set[str]) -> set[str]:
    """Ids of ``texts`` (:func:`normalized_texts`) outside ``held_out`` whose text is a held-out query's."""
    held_texts = {texts[qid] for qid in held_out if qid in texts}
    return {qid for qid, text in texts.items() if qid not in held_out and text in held_texts}
