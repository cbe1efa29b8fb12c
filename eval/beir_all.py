"""Evaluate a retriever on BEIR: ``python eval/beir_all.py (--retriever bm25 | --encoder CARD [--search MODE])``.

Thin front end over :mod:`retromae_ir.evaluate.beir_suite`: writes ``runs/<retriever>/beir-<dataset>.trec`` (for
an encoder card, ``runs/<card>/``; ``runs/<card>-<mode>/`` for a non-default search mode), a results table
(markdown + CSV), a bar chart and a log. Datasets whose run file exists are re-scored, not re-run, unless
``--force``; an encoded corpus is reused while the card and the corpus are unchanged. Datasets that cannot be
resolved are listed with the reason.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from retromae_ir.bm25 import BM25Params, BM25Retriever
from retromae_ir.data.beir import BEIR_DATASETS
from retromae_ir.evaluate.beir_suite import BeirSuite, write_results
from retromae_ir.evaluate.report import format_markdown
from retromae_ir.logs import setup_logging


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    chooser = parser.add_mutually_exclusive_group()
    chooser.add_argument("--retriever", choices=["bm25"], help="a lexical retriever (the default: bm25)")
    chooser.add_argument("--encoder", help="an encoder card: a name in encoders/ or a YAML path")
    parser.add_argument("--search", choices=["hybrid", "dense", "sparse"],
                        help="with --encoder: default hybrid for DupMAE cards, dense for dense-only cards")
    parser.add_argument("--datasets", nargs="+", choices=list(BEIR_DATASETS), metavar="NAME",
                        help="default: all 18 (those that cannot be resolved are listed, not fatal)")
    parser.add_argument("--data-dir", type=Path, help="folder holding <dataset>/corpus.jsonl (before $RETROMAE_IR_DATA)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="runs go to RUNS_DIR/<retriever>/")
    parser.add_argument("--index-dir", type=Path, default=Path("indexes"), help="indexes go to INDEX_DIR/<retriever or card>/")
    parser.add_argument("--no-download", action="store_true", help="never download; list missing datasets instead")
    parser.add_argument("--force", action="store_true", help="re-run datasets that already have a run file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k1", type=float, default=BM25Params.k1)
    parser.add_argument("--b", type=float, default=BM25Params.b)
    parser.add_argument("--batch-size", type=int, default=64, help="encoding batch size (--encoder)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast when encoding (--encoder)")
    args = parser.parse_args(argv)
    if args.search and not args.encoder:
        parser.error("--search goes with --encoder")
    return args


def make_retriever(args):
    if args.encoder:
        from retromae_ir.search.retriever import EncoderRetriever

        return EncoderRetriever(args.encoder, args.search, args.index_dir, batch_size=args.batch_size,
                                threads=args.threads, bf16=args.bf16 or None)
    return BM25Retriever(args.index_dir / "bm25", BM25Params(args.k1, args.b), args.threads)


def main(argv=None) -> int:
    args = parse_args(argv)
    retriever = make_retriever(args)
    out_dir = args.runs_dir / retriever.name
    setup_logging(out_dir / "beir.log")
    suite = BeirSuite(retriever, out_dir, args.data_dir, force=args.force, download=not args.no_download)
    results = suite.run(args.datasets)
    frame = write_results(results, retriever.name, out_dir)
    print(format_markdown(frame) if len(frame) else "no dataset could be evaluated")
    for result in results:
        if result.status == "missing":
            print(f"not evaluated: {result.dataset}: {result.reason}")
    print(f"tables: {out_dir / 'beir-results.md'}, {out_dir / 'beir-results.csv'}; log: {out_dir / 'beir.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
