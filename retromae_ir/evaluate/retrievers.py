"""The retriever options every evaluation driver shares: BM25, or an encoder card with a search mode."""
from __future__ import annotations

import argparse
from pathlib import Path

from retromae_ir.bm25 import BM25Params, BM25Retriever


def add_retriever_arguments(parser: argparse.ArgumentParser) -> None:
    chooser = parser.add_mutually_exclusive_group()
    chooser.add_argument("--retriever", choices=["bm25"], help="a lexical retriever (the default: bm25)")
    chooser.add_argument("--encoder", help="an encoder card: a name in encoders/ or a YAML path")
    parser.add_argument("--search", choices=["hybrid", "dense", "sparse"],
                        help="with --encoder: default hybrid for DupMAE cards, dense for dense-only cards")
    parser.add_argument("--index-dir", type=Path, default=Path("indexes"),
                        help="indexes go to INDEX_DIR/<retriever or card>/")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k1", type=float, default=BM25Params.k1, help="BM25 k1")
    parser.add_argument("--b", type=float, default=BM25Params.b, help="BM25 b")
    parser.add_argument("--batch-size", type=int, default=64, help="encoding batch size (--encoder)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast when encoding (--encoder)")


def check_retriever_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.search and not args.encoder:
        parser.error("--search goes with --encoder")


def make_retriever(args: argparse.Namespace):
    """An object with ``name`` and ``retrieve(corpus, index_name, queries)``."""
    if args.encoder:
        from retromae_ir.search.retriever import EncoderRetriever

        return EncoderRetriever(args.encoder, args.search, args.index_dir, batch_size=args.batch_size,
                                threads=args.threads, bf16=args.bf16 or None)
    return BM25Retriever(args.index_dir / "bm25", BM25Params(args.k1, args.b), args.threads)
