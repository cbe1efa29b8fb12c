"""TREC DL 2019/2020 and MS MARCO dev: ``python eval/trec_dl.py (--retriever bm25 | --encoder CARD) --collection TSV``.

Thin front end over :mod:`retromae_ir.evaluate.trec_dl`: writes ``runs/<retriever>/{dl19,dl20,msmarco-dev}.trec``,
(``runs/<card>/`` for an encoder card), a results table (markdown + CSV) and a log. Run files that exist are re-scored unless ``--force``;
a run file is written only for a valid run (an empty collection or a run without hits is an error). The runs folder and
the index folder are locked for the whole run: a second driver writing either exits at once with status 2.
"""
from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

import pandas as pd

from retromae_ir.evaluate.report import format_markdown, write_table
from retromae_ir.cli import Repeatable, add_debug_flag, command
from retromae_ir.evaluate.retrievers import add_retriever_arguments, check_retriever_arguments, evaluation_session
from retromae_ir.evaluate.trec_dl import TOPIC_SETS, evaluate_topic_set


def parse_args(argv=None) -> argparse.Namespace:
    parser = add_debug_flag(argparse.ArgumentParser(prog="eval/trec_dl.py", description=__doc__.split("\n")[0]))
    add_retriever_arguments(parser)
    parser.add_argument("--collection", type=Path, required=True,
                        help="MS MARCO passage collection.tsv (pid<TAB>passage), or a BEIR-style corpus.jsonl")
    parser.add_argument("--sets", nargs="+", action=Repeatable, choices=list(TOPIC_SETS), default=list(TOPIC_SETS))
    parser.add_argument("--topics-dir", type=Path,
                        help="folder of Anserini topic/qrels files (default $RETROMAE_IR_TOPICS, else Pyserini names)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    check_retriever_arguments(parser, args)
    return args


@command  # bad card, empty collection, missing topic files, a held output: one line, exit 2
def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.collection.is_file():
        raise FileNotFoundError(errno.ENOENT, "collection not found (the MS MARCO passage collection is not "
                                "bundled: download collection.tsv from the MS MARCO site and pass its path)",
                                str(args.collection))
    with evaluation_session(args, "trec-dl.log") as (retriever, out_dir):
        return evaluate(args, retriever, out_dir)


def evaluate(args: argparse.Namespace, retriever, out_dir: Path) -> int:
    rows = [{"set": name, **evaluate_topic_set(retriever, args.collection, TOPIC_SETS[name], out_dir,
                                               args.topics_dir, args.force)} for name in args.sets]
    frame = pd.DataFrame(rows)
    write_table(frame, out_dir / "trec-dl-results", f"TREC DL / MS MARCO dev: {retriever.name}",
                ["DL: nDCG@10 graded; MAP and R@1000 count relevance >= 2. Dev: MRR@10, R@1000."])
    print(format_markdown(frame))
    return 0


if __name__ == "__main__":
    sys.exit(main())
