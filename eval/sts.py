"""Sentence-embedding quality: ``python eval/sts.py --encoder CARD [--sets STS12 ... SICK-R]``.

Thin front end over :mod:`retromae_ir.evaluate.sts`: the cosine similarity of each pair's dense embeddings (the
card's document-side encoder; a DupMAE card's dense side only), Spearman x 100 against the gold scores, for
STS12-16 (each as "all", pooled, and as the mean of its subsets), STS-B and SICK-R (test splits). Writes
``sts-results.{md,csv,png}``, ``sts-subsets.{md,csv}`` and ``sts.log`` into ``--output`` (default
``outputs/sts/<card name>``), each file atomically; the folder is locked for the run, so a second writer exits
at once with status 2. Data: ``--data-dir`` (then the only place looked in), else ``$RETROMAE_IR_STS``, the cache,
the official download. A missing set, a malformed line or a bad card is one ``error:`` line naming the file (and
line) or the field, exit 2 (``--debug`` adds the traceback).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from retromae_ir.cli import Repeatable, add_debug_flag, command
from retromae_ir.evaluate.sts import ENV_VAR, STS_SETS

logger = logging.getLogger("eval.sts")


def parse_args(argv=None) -> argparse.Namespace:
    parser = add_debug_flag(argparse.ArgumentParser(prog="eval/sts.py", description=__doc__.split("\n")[0]))
    parser.add_argument("--encoder", required=True,
                        help="an encoder card: a name in encoders/ (e.g. minilm-mean) or a YAML path (a fine-tuned "
                             "checkpoint's card.yaml)")
    parser.add_argument("--sets", nargs="+", action=Repeatable, choices=list(STS_SETS), default=list(STS_SETS), metavar="NAME",
                        help=f"default: all ({', '.join(STS_SETS)}); each must be found")
    parser.add_argument("--data-dir", type=Path,
                        help=f"folder holding STS12-en-test/ ... stsb-en-test.csv, SICK-test.tsv; when given, the "
                             f"only place looked in (default: ${ENV_VAR}, then the cache, then a download)")
    parser.add_argument("--no-download", action="store_true", help="never download; a set not found is an error")
    parser.add_argument("--output", type=Path, help="output folder (default: outputs/sts/<card name>)")
    parser.add_argument("--batch-size", type=int, default=64, help="encoding batch size")
    parser.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast when encoding")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    args.sets = [name for name in STS_SETS if name in args.sets]  # the table's order, whatever the command's
    return args


@command  # a bad card, a missing set, a malformed line, a held output: one error: line, exit 2
def main(argv=None) -> int:
    return evaluate(parse_args(argv))


def evaluate(args: argparse.Namespace) -> int:
    from retromae_ir.encode.cards import load_card
    from retromae_ir.evaluate.sts import (embed_with, load_sentence_encoder, read_sts_set, resolve_sts,
                                          result_notes, results_frame, score_sets, write_sts_results)
    from retromae_ir.evaluate.report import format_markdown
    from retromae_ir.io import claim_output
    from retromae_ir.logs import setup_logging

    setup_logging()  # stderr until the output folder is claimed
    card = load_card(args.encoder)
    # every set is found and read (so checked) before anything is written or the model is loaded
    places = {name: resolve_sts(name, args.data_dir, download=not args.no_download) for name in args.sets}
    data = {name: read_sts_set(name, place) for name, place in places.items()}
    out_dir = args.output or Path("outputs") / "sts" / card.name
    with claim_output(out_dir):
        setup_logging(out_dir / "sts.log")
        logger.info("card %s (%s, fingerprint %s, checkpoint %s)", card.name, card.kind, card.fingerprint(),
                    card.checkpoint)
        for name, place in places.items():
            logger.info("%s: %s, %d pairs", name, place, sum(len(pairs) for pairs in data[name]))
        if card.sparse:
            logger.info("%s is a DupMAE card: only its dense side is scored (one embedding per sentence)", card.name)
        start = time.perf_counter()
        model = load_sentence_encoder(card, args.device, args.bf16)
        scores = score_sets(data, embed_with(model, args.batch_size))
        seconds = time.perf_counter() - start
        notes = result_notes(scores, args.sets) + [
            f"Card {card.name} ({card.kind}, fingerprint {card.fingerprint()}), passage length "
            f"{card.max_passage_length}, {'bf16' if model.bf16 else 'fp32'} on {model.device}; "
            f"{seconds:.0f} s to load and encode."]
        written = write_sts_results(scores, card.name, out_dir, notes)
    print(format_markdown(results_frame(scores, card.name), digits=2), end="")
    for note in notes:
        print(f"- {note}")
    print(f"written: {', '.join(str(path) for path in written.values())}; log: {out_dir / 'sts.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
