"""``python -m retromae_ir.mine``: hard negatives for fine-tuning, written as the training JSONL.

Retrieves the top ``--max-rank`` documents of every judged training query, either with BM25 through Lucene
(``--retriever bm25``: stage 1's negatives) or with an encoder card through the project's own index and exact
hybrid searcher (``--retriever DIR/card.yaml``: stage 2's ANN negatives, Eq. 14). The query's positives are
dropped, and ``--negatives`` documents are sampled (per query, seeded by seed and qid) from ranks
``--min-rank``..``--max-rank`` of the ranking (1-based, counted with the positives in place): skipping the very
top avoids unlabelled positives. Output lines: ``{"qid", "query", "positives": [docid], "negatives": [docid]}``
in ranking order, negatives first-ranked first.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from retromae_ir.cli import check_at_least_one, command, dataclass_parser
from retromae_ir.data.readers import check_min_relevance, load_qrels, load_topics
from retromae_ir.runs import ranked
from retromae_ir.io import atomic_write, claim_output, file_digest, key_path
from retromae_ir.logs import log_beside, setup_logging

logger = logging.getLogger(__name__)


# Bumped in the commit that changes which negatives the same run and qrels give, so a chain's mined files made
# before are mined again. 2: the positives of every query of the same text are left out (2026-11-27). (Leaving
# out the documents judged relevant below --min-relevance changed nothing at the chain's --min-relevance 1.) 3: the
# same text up to punctuation too (2026-11-27).
MINING_VERSION = 3


@dataclass
class MiningArguments:
    retriever: str = field(metadata={"help": "'bm25', or an encoder card (name or YAML path, e.g. a stage-1 "
                                             "output's card.yaml)"})
    corpus: str = field(metadata={"help": "BEIR corpus.jsonl"})
    queries: str = field(metadata={"aliases": ["--topics"],  # every other command's name for the topics file
                                   "help": "topics file (BEIR queries.jsonl, TSV, ...)"})
    qrels: str = field(metadata={"help": "training qrels (BEIR qrels/train.tsv or TREC); positives are dropped"})
    output: str = field(metadata={"help": "JSONL to write"})
    min_rank: int = field(default=3, metadata={"help": "first rank negatives are sampled from (1-based)"})
    max_rank: int = field(default=200, metadata={"help": "last rank, also the retrieval depth"})
    negatives: int = field(default=30, metadata={"help": "negatives kept per query (all of the window if fewer)"})
    min_relevance: int = field(default=1, metadata={"help": "qrels label counted as a positive"})
    seed: int = field(default=42)
    index_root: str = field(default="indexes", metadata={"help": "where indexes are built / reused"})
    index_name: str | None = field(default=None, metadata={"help": "default: the corpus's folder name"})
    mode: str | None = field(default=None, metadata={"help": "card retrievers: hybrid, dense or sparse "
                                                             "(default: hybrid for DupMAE cards, else dense)"})
    threads: int = field(default=2)
    dtype: str | None = field(default=None, metadata={
        "help": "card retrievers: bf16 autocast or fp32; auto (the default) = bf16 where the hardware runs it "
                "natively, as `encode corpus --dtype auto`. An index of another precision is encoded again"})
    no_lucene: bool = field(default=False, metadata={"help": "card retrievers: build the index without its Lucene "
                                                              "impact index (a host without Java)"})

    def __post_init__(self):
        if not 1 <= self.min_rank <= self.max_rank:
            raise ValueError(f"need 1 <= --min-rank <= --max-rank, got {self.min_rank}..{self.max_rank}")
        check_at_least_one(self, "negatives")
        check_min_relevance(self.min_relevance)
        if self.dtype not in (None, "auto", "bf16", "fp32"):
            raise ValueError(f"--dtype must be auto, bf16 or fp32, got {self.dtype!r}")
        card_only = [flag for flag, given in (("--mode", self.mode is not None), ("--dtype", self.dtype is not None),
                                              ("--no-lucene", self.no_lucene)) if given]
        if self.retriever == "bm25" and card_only:  # accepted and ignored, then recorded in OUTPUT.args.json
            raise ValueError(f"{', '.join(card_only)} go with an encoder-card --retriever, not bm25")
        if self.retriever != "bm25" and self.dtype is None:
            self.dtype = "auto"  # recorded as used


def sample_negatives(ranking: list[str], positives: set[str], min_rank: int, max_rank: int, count: int,
                     rng: random.Random) -> list[str]:
    """Up to ``count`` documents of ``ranking[min_rank-1:max_rank]`` that are not positives, kept in rank order."""
    window = [docid for docid in ranking[min_rank - 1:max_rank] if docid not in positives]
    if len(window) <= count:
        return window
    keep = set(rng.sample(range(len(window)), count))
    return [docid for i, docid in enumerate(window) if i in keep]


def relevant_by_text(queries: dict[str, str], relevant: dict[str, set[str]]) -> dict[str, set[str]]:
    """The documents judged relevant to each query text (every query of ``relevant`` that ``queries`` names)."""
    from retromae_ir.data.splits import normalized_query

    by_text: dict[str, set[str]] = {}
    for qid, docs in relevant.items():
        if qid in queries:
            by_text.setdefault(normalized_query(queries[qid]), set()).update(docs)
    return by_text


def mine(run: dict[str, dict[str, float]], queries: dict[str, str], positives: dict[str, set[str]],
         args: MiningArguments, relevant: dict[str, set[str]] | None = None) -> list[dict]:
    """One training record per query that keeps at least one negative (the others are counted and logged). A
    query's negatives leave out the documents judged relevant to any query of the same text (scifact's train split
    has such twins with different judgements: one's positive was the other's hard negative): ``relevant`` by text
    (:func:`relevant_by_text`, every label >= 1, for a ``--min-relevance`` above 1), else the positives."""
    records, empty = mine_block(run, queries, positives, args, relevant)
    _warn_empty(empty, len(positives), args)
    return records


def mine_block(run: dict[str, dict[str, float]], queries: dict[str, str], positives: dict[str, set[str]],
               args: MiningArguments, relevant: dict[str, set[str]] | None = None) -> tuple[list[dict], int]:
    """:func:`mine`'s records of ``positives``' queries (in qid order) and how many kept no negative."""
    from retromae_ir.data.splits import normalized_query

    judged_for_text = relevant if relevant is not None else relevant_by_text(queries, positives)
    records, empty = [], 0
    for qid in sorted(positives):
        ranking = [docid for docid, _ in ranked(run.get(qid, {}))]
        excluded = judged_for_text.get(normalized_query(queries[qid]), set()) | positives[qid]
        negatives = sample_negatives(ranking, excluded, args.min_rank, args.max_rank, args.negatives,
                                     random.Random(f"{args.seed}:{qid}"))
        if not negatives:
            empty += 1
            continue
        records.append({"qid": qid, "query": queries[qid], "positives": sorted(positives[qid]),
                        "negatives": negatives})
    return records, empty


def _warn_empty(empty: int, queries: int, args: MiningArguments) -> None:
    if empty:
        logger.warning("%d of %d queries have no negative in ranks %d-%d and are left out", empty, queries,
                       args.min_rank, args.max_rank)


# queries searched and mined at a time: a run of every query held 113 B a hit, 11.4 GB for MS MARCO's 502,939 train
# queries at 200 hits, beside the searcher's own memory; a multiple of the search batch sizes (64, 256), so the
# queries are batched as one search of them all would batch them
MINING_BLOCK = 8192


def searcher(args: MiningArguments) -> Callable[[dict[str, str]], dict[str, dict[str, float]]]:
    """A function from ``{qid: text}`` to the top ``max_rank`` documents of each, by BM25 or the card's exact
    hybrid searcher, over an index of the corpus built (or reused) once."""
    corpus = Path(args.corpus)
    name = args.index_name or corpus.parent.name
    if args.retriever == "bm25":
        from retromae_ir.bm25 import BM25Params, open_searcher

        return open_searcher(corpus, Path(args.index_root) / "bm25" / name, BM25Params(hits=args.max_rank),
                             args.threads).search
    from retromae_ir.search.retriever import EncoderRetriever

    retriever = EncoderRetriever(args.retriever, args.mode, Path(args.index_root), hits=args.max_rank,
                                 threads=args.threads, lucene=not args.no_lucene,
                                 bf16=None if args.dtype == "auto" else args.dtype == "bf16")
    return retriever.searcher(corpus, name)


def judged_positives(qrels: dict[str, dict[str, int]], min_relevance: int) -> dict[str, set[str]]:
    positives = {qid: {d for d, label in judged.items() if label >= min_relevance} for qid, judged in qrels.items()}
    return {qid: docs for qid, docs in positives.items() if docs}


def run(args: MiningArguments) -> Path:
    """Mine and write ``args.output`` under its lock (a second miner of the same file is refused at once)."""
    with claim_output(args.output):
        return _mine_into(args)


def _mine_into(args: MiningArguments) -> Path:
    topics = load_topics(args.queries)
    qrels_digest = file_digest(args.qrels)  # of the judgements read here, whatever happens to the file meanwhile
    qrels = load_qrels(args.qrels)
    positives = judged_positives(qrels, args.min_relevance)
    missing = sorted(set(positives) - set(topics))
    if missing:
        raise ValueError(f"{args.qrels}: {len(missing)} judged queries are not in {args.queries} (e.g. {missing[:3]})")
    queries = {qid: topics[qid] for qid in sorted(positives)}
    # a document judged relevant below --min-relevance is no positive, and no negative either
    relevant = relevant_by_text(topics, judged_positives(qrels, 1))
    with log_beside(args.output):
        return _write_negatives(args, queries, positives, relevant, qrels_digest)


def _write_negatives(args: MiningArguments, queries: dict[str, str], positives: dict[str, set[str]],
                     relevant: dict[str, set[str]], qrels_digest: str) -> Path:
    corpus_digest = file_digest(args.corpus)  # of the passages the negatives' ids name, checked again at the end
    search, records, empty = searcher(args), [], 0
    qids = sorted(positives)
    for start in range(0, len(qids), MINING_BLOCK):
        block = {qid: queries[qid] for qid in qids[start:start + MINING_BLOCK]}
        found, left = mine_block(search(block), queries, {qid: positives[qid] for qid in block}, args, relevant)
        records += found
        empty += left
    _warn_empty(empty, len(positives), args)
    if not records:
        raise ValueError("no query kept a negative: widen --min-rank/--max-rank")
    if file_digest(args.corpus) != corpus_digest:  # the ids would be recorded against passages not searched
        raise ValueError(f"{args.corpus} changed while mining: run again on a corpus no one is writing")
    # never an earlier run's record (its arguments, or a `rerank score` key) beside new negatives
    key_path(args.output).unlink(missing_ok=True)
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    # the corpus's digest (its ids name its passages) and the training qrels', with their place relative to this
    # file (a dev split carved again since may hold some of these queries: finetune.data.check_made_from), and the
    # file's own digest: the record is written first, so a kill before the file is published leaves an earlier one
    # beside a record that is not its own (refused), never new negatives without a record
    here = os.path.relpath(Path(args.qrels).resolve(), Path(args.output).resolve().parent)
    with atomic_write(f"{args.output}.args.json") as handle:
        json.dump({**asdict(args), "corpus_sha256": corpus_digest, "qrels_sha256": qrels_digest,
                   "qrels_here": here, "output_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()},
                  handle, indent=2)
    with atomic_write(args.output) as handle:
        handle.write(text)
    logger.info("%s: %d queries, %.1f negatives each (ranks %d-%d, %s)", args.output, len(records),
                sum(len(r["negatives"]) for r in records) / len(records), args.min_rank, args.max_rank, args.retriever)
    return Path(args.output)


@command  # bad arguments or input (DataFormatError, CardError): one line, exit 2
def main(argv: list[str] | None = None) -> None:
    setup_logging()
    (args,) = dataclass_parser([MiningArguments], "python -m retromae_ir.mine",
                               description=__doc__).parse_args_into_dataclasses(argv)
    run(args)


if __name__ == "__main__":
    main()
