"""Evaluate a retriever on BEIR: ``python eval/beir_all.py (--retriever bm25 | --encoder CARD [--search MODE])``.

Thin front end over :mod:`retromae_ir.evaluate.beir_suite`: writes ``runs/<retriever>/beir-<dataset>.trec`` (for an
encoder card, ``runs/<card>/``; ``runs/<card>-<mode>/`` for a non-default search mode), a results table (markdown +
CSV), a bar chart and a log. Datasets whose run file exists are re-scored, not re-run, unless ``--force``; an
encoded corpus is reused while the card and the corpus are unchanged. Datasets that cannot be resolved are listed
with the reason (an error, exit 2, for one named by ``--datasets``). A dataset that gives no valid result (malformed
files, an empty corpus, no hits at all) is an ``error:`` line naming its file and line, and makes the exit status 2
(the other datasets' results are kept); so does evaluating nothing, which leaves no runs folder behind. The runs
folder and the index folder are locked for the whole run: a second driver writing either exits at once with status
2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retromae_ir.data.beir import BEIR_DATASETS
from retromae_ir.evaluate.beir_suite import BeirSuite, result_notes, write_results
from retromae_ir.evaluate.report import format_markdown
from retromae_ir.cli import Repeatable, add_debug_flag, command
from retromae_ir.evaluate.retrievers import add_retriever_arguments, check_retriever_arguments, evaluation_session
from retromae_ir.evaluate.runs import EvaluationError


def parse_args(argv=None) -> argparse.Namespace:
    parser = add_debug_flag(argparse.ArgumentParser(prog="eval/beir_all.py", description=__doc__.split("\n")[0]))
    add_retriever_arguments(parser)
    parser.add_argument("--datasets", nargs="+", action=Repeatable, choices=list(BEIR_DATASETS), metavar="NAME",
                        help="default: all 18 (those that cannot be resolved are listed, not fatal); a dataset "
                             "named here that cannot be resolved is an error (exit 2)")
    parser.add_argument("--data-dir", type=Path, help="folder holding <dataset>/corpus.jsonl; when given, the only "
                        "place looked in (default: $RETROMAE_IR_DATA, then the cache, then a download)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs go to RUNS_DIR/<retriever>/")
    parser.add_argument("--no-download", action="store_true", help="never download; list missing datasets instead")
    parser.add_argument("--force", action="store_true", help="re-run datasets that already have a run file")
    args = parser.parse_args(argv)
    check_retriever_arguments(parser, args)
    return args


@command  # a bad card (CardError) or retriever option, a held output: one line, exit 2
def main(argv=None) -> int:
    args = parse_args(argv)
    with evaluation_session(args, "beir.log") as (retriever, out_dir):
        return evaluate(args, retriever, out_dir)


def evaluate(args: argparse.Namespace, retriever, out_dir: Path) -> int:
    """Run the suite with the locks held; 2 when a dataset failed, or was named by ``--datasets`` and could not be
    resolved (a table without it is not the one asked for), ``EvaluationError`` when none was evaluated (each
    failed or missing dataset first gets an ``error:`` line), else 0."""
    suite = BeirSuite(retriever, out_dir, args.data_dir, force=args.force, download=not args.no_download)
    results = suite.run(args.datasets)
    evaluated = any(r.evaluated for r in results)
    failed = [r for r in results if r.status == "failed" or (args.datasets and r.status == "missing")]
    if evaluated:
        frame = write_results(results, retriever.name, out_dir)
        print(format_markdown(frame))
        for note in result_notes(results):
            print(note)
        print(f"tables: {out_dir / 'beir-results.md'}, {out_dir / 'beir-results.csv'}; log: {out_dir / 'beir.log'}")
    for result in failed if evaluated else results:
        print(f"error: {result.dataset}: {result.reason}", file=sys.stderr)
    if not evaluated:
        raise EvaluationError("no dataset could be evaluated")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
