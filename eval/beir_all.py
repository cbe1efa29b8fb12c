"""Evaluate a retriever on BEIR: ``python eval/beir_all.py (--retriever bm25 | --encoder CARD [--search MODE])``.

Thin front end over :mod:`retromae_ir.evaluate.beir_suite`: writes ``runs/<retriever>/beir-<dataset>.trec`` (for
an encoder card, ``runs/<card>/``; ``runs/<card>-<mode>/`` for a non-default search mode), a results table
(markdown + CSV), a bar chart and a log. Datasets whose run file exists are re-scored, not re-run, unless
``--force``; an encoded corpus is reused while the card and the corpus are unchanged. Datasets that cannot be
resolved, or give no valid result (an empty corpus, no hits at all), are listed with the reason; a failed one makes
the exit status 1, as does evaluating nothing. The runs folder and the index folder are locked for the whole run:
a second driver writing either exits at once with status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retromae_ir.data.beir import BEIR_DATASETS
from retromae_ir.evaluate.beir_suite import BeirSuite, result_notes, write_results
from retromae_ir.evaluate.report import format_markdown
from retromae_ir.evaluate.retrievers import add_retriever_arguments, check_retriever_arguments, evaluation_session
from retromae_ir.io import command_errors


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="eval/beir_all.py", description=__doc__.split("\n")[0])
    add_retriever_arguments(parser)
    parser.add_argument("--datasets", nargs="+", choices=list(BEIR_DATASETS), metavar="NAME",
                        help="default: all 18 (those that cannot be resolved are listed, not fatal)")
    parser.add_argument("--data-dir", type=Path, help="folder holding <dataset>/corpus.jsonl; when given, the only "
                        "place looked in (default: $RETROMAE_IR_DATA, then the cache, then a download)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs go to RUNS_DIR/<retriever>/")
    parser.add_argument("--no-download", action="store_true", help="never download; list missing datasets instead")
    parser.add_argument("--force", action="store_true", help="re-run datasets that already have a run file")
    args = parser.parse_args(argv)
    check_retriever_arguments(parser, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with command_errors(ValueError):  # a bad card (CardError) or retriever option
        with evaluation_session(args, "beir.log") as (retriever, out_dir):
            return evaluate(args, retriever, out_dir)


def evaluate(args: argparse.Namespace, retriever, out_dir: Path) -> int:
    """Run the suite with the locks held; 1 when a dataset failed or none was evaluated, else 0."""
    suite = BeirSuite(retriever, out_dir, args.data_dir, force=args.force, download=not args.no_download)
    results = suite.run(args.datasets)
    frame = write_results(results, retriever.name, out_dir)
    print(format_markdown(frame) if len(frame) else "no dataset could be evaluated")
    for note in result_notes(results):
        print(note)
    print(f"tables: {out_dir / 'beir-results.md'}, {out_dir / 'beir-results.csv'}; log: {out_dir / 'beir.log'}")
    failed = any(r.status == "failed" for r in results) or not any(r.evaluated for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
