"""``python -m retromae_ir.search``: exact Eq. 12 search of a retromae_ir index, written as a TREC run."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from retromae_ir.cli import add_debug_flag, check_at_least_one, command
from retromae_ir.search.index import MODES


DEFAULT_CANDIDATES = 1000
logger = logging.getLogger("retromae_ir.search")


def build_parser() -> argparse.ArgumentParser:
    parser = add_debug_flag(argparse.ArgumentParser(prog="python -m retromae_ir.search", description=__doc__))
    parser.add_argument("--index", required=True, type=Path, help="output of `python -m retromae_ir.encode corpus`")
    parser.add_argument("--encoder", required=True, help="the card that built the index (name or YAML path)")
    parser.add_argument("--topics", required=True, type=Path, help="topics file (TSV, .gz, JSONL or TREC)")
    parser.add_argument("--output", required=True, type=Path, help="TREC run file to write")
    parser.add_argument("--mode", choices=MODES, default="hybrid")
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=None,
                        help="K': top hits taken from each side in --mode hybrid (default 1000; raised to --hits "
                             "where lower)")
    parser.add_argument("--brute-force", action="store_true", help="score every document (small corpora)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default=None)
    parser.add_argument("--tag", default=None,
                        help="run tag (default: retromae_ir-<mode>, retromae_ir-brute-<mode> with --brute-force)")
    parser.add_argument("--remove-query", action="store_true",
                        help="drop a hit whose docid is its query's id, keeping --hits hits (BEIR's evaluation does: "
                             "ArguAna's and Quora's queries are corpus documents), as Pyserini's flag of that name")
    return parser


@command
def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.candidates is not None and (args.mode != "hybrid" or args.brute_force):
        parser.error("--candidates (K') applies to --mode hybrid without --brute-force: the other searches score "
                     "every candidate of their one side")
    args.candidates = DEFAULT_CANDIDATES if args.candidates is None else args.candidates
    check_at_least_one(args, "hits", "candidates", "batch_size", "threads")  # --batch-size -1 searched nothing
    import torch

    from retromae_ir.data.readers import load_topics
    from retromae_ir.io import claim_output
    from retromae_ir.logs import log_beside, setup_logging
    from retromae_ir.runs import remove_self_hits, write_trec_run

    setup_logging()
    torch.set_num_threads(args.threads)
    # one writer per run file; written atomically, once the search is done; the log beside it (OUTPUT.log)
    with claim_output(args.output), log_beside(args.output):
        if args.remove_query:  # one hit deeper, so that a dropped self-hit leaves --hits behind
            run, tag = _search(args, load_topics(args.topics), args.hits + 1)
            run = remove_self_hits(run, args.hits)
        else:
            run, tag = _search(args, load_topics(args.topics), args.hits)
        write_trec_run(args.output, run, tag, args.hits)
        found = sum(1 for hits in run.values() if hits)
        summary = f"wrote {args.output}: {found} queries" + (f" ({len(run) - found} of {len(run)} without any hit: "
                                                             "not in the run file)" if found < len(run) else "")
        logger.info(summary)
    print(summary)
    return 0


def _search(args, topics: dict[str, str], hits: int) -> tuple[dict, str]:
    from tqdm import tqdm

    from retromae_ir.search import BruteForceScorer, ExactHybridSearcher

    searcher = ExactHybridSearcher(args.index, args.encoder, args.mode, args.candidates, args.threads, args.device)
    qids, texts = list(topics), list(topics.values())
    logger.info("searching %d topics of %s in %s: %s%s, %d hits a topic%s", len(qids), args.topics, args.index,
                "brute-force " if args.brute_force else "", args.mode, hits,
                f", K' {args.candidates}" if args.mode == "hybrid" and not args.brute_force else "")
    if args.brute_force:
        scorer = BruteForceScorer(searcher.index)
        run = {}
        for start in tqdm(range(0, len(texts), args.batch_size), desc=f"brute-force {args.mode}", unit="batch"):
            encoded = searcher.model.encode_query(texts[start:start + args.batch_size], args.batch_size)
            found = scorer.search(encoded.dense, encoded.sparse, hits, args.mode)
            run.update({qid: dict(h) for qid, h in zip(qids[start:start + args.batch_size], found)})
    else:
        run = searcher.batch_search(texts, qids, hits, args.batch_size)
    return run, args.tag or f"retromae_ir-{'brute-' if args.brute_force else ''}{args.mode}"


if __name__ == "__main__":
    sys.exit(main())
