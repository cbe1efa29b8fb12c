"""CLI: count the word statistics MASTER's keyword masking needs, once per corpus and tokenizer.

``python -m retromae_ir.pretrain.corpus_stats --corpus corpus.jsonl --model M --output stats.json``; the file
is then given to pre-training as ``--master_corpus_stats stats.json`` (see keywords.py).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from retromae_ir.pretrain.backbone import default_model
from retromae_ir.pretrain.data import iter_documents
from retromae_ir.pretrain.keywords import count_corpus

LOG = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m retromae_ir.pretrain.corpus_stats",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, type=Path,
                   help="the pre-training corpus: BEIR corpus.jsonl, {text} JSONL or plain text")
    p.add_argument("--model", default=None,
                   help="tokenizer: hub name or directory (default: packaged all-MiniLM-L6-v2)")
    p.add_argument("--output", required=True, type=Path, help="statistics JSON to write")
    p.add_argument("--batch-size", type=int, default=256, help="texts tokenised at once")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from transformers import AutoTokenizer

    name = args.model or default_model()
    tokenizer = AutoTokenizer.from_pretrained(name)
    texts = (text for _, text in tqdm(iter_documents(args.corpus), desc="count", unit="doc"))
    try:
        stats = count_corpus(texts, tokenizer, name, args.batch_size)
    except ValueError as error:  # CorpusError / DataFormatError name the file and line
        raise SystemExit(f"error: {error}") from error
    stats.save(args.output)
    LOG.info("%s: %d documents, %d words, %d distinct -> %s", args.corpus, stats.num_docs, stats.num_words,
             len(stats.cf), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
