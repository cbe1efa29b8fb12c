"""NQ open-domain retrieval (top-k accuracy, MASTER Table 3): ``python eval/nq.py --encoder CARD --corpus
psgs_w100.tsv --qas nq-test.qa.csv``.

Thin front end over :mod:`retromae_ir.evaluate.nq`: encodes DPR's passages into ``INDEX_DIR`` (reused while the
card, its weights, the precision and the passages are unchanged), searches each mode, writes
``OUTPUT/<mode>.trec``, Pyserini's DPR retrieval JSON ``OUTPUT/<mode>.dpr.json`` and the table
``OUTPUT/nq-results.{md,csv}``, scored by ``pyserini.eval.evaluate_dpr_retrieval``.

Sharded encoding (the 21M-passage corpus is a GPU job): run ``--shard-id I --shard-count N`` for each I (encodes
that slice, then exits), then once with ``--shard-count N`` alone (joins the shards, searches, scores).
Errors a user can fix (a malformed line, named by file and line; a missing file; a card that does not fit the
modes; unfinished shards; an output another process is writing) are one ``error:`` line and exit status 2
(``retromae_ir.cli.command``; ``--debug`` shows the traceback).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import shutil
import sys
from pathlib import Path

from retromae_ir.cli import Repeatable, add_debug_flag, check_at_least_one, command

DTYPES = ("auto", "bf16", "fp32")


def parse_args(argv=None) -> argparse.Namespace:
    parser = add_debug_flag(argparse.ArgumentParser(prog="eval/nq.py", description=__doc__.split("\n\n")[0]))
    parser.add_argument("--encoder", required=True, help="encoder card: a name in encoders/ or a YAML path")
    parser.add_argument("--corpus", type=Path, required=True,
                        help="DPR's psgs_w100.tsv (id<TAB>text<TAB>title, header line; .gz too)")
    parser.add_argument("--qas", type=Path, required=True,
                        help="DPR's nq-test.qa.csv (question<TAB>python list of answers, no header)")
    parser.add_argument("--modes", nargs="+", action=Repeatable, choices=["dense", "sparse", "hybrid"],
                        help="default: dense, sparse and hybrid for a DupMAE card, dense for a dense-only card")
    parser.add_argument("--output", type=Path, help="runs, DPR JSON and tables (default runs/<card>/nq)")
    parser.add_argument("--index-dir", type=Path, help="the encoded corpus (default indexes/<card>/nq-dpr: BEIR's "
                        "nq, another corpus, is indexes/<card>/nq)")
    parser.add_argument("--top-k", type=int, nargs="+", action=Repeatable, default=[1, 5, 20, 100], help="accuracy cut-offs")
    parser.add_argument("--hits", type=int, default=None, help="passages kept per question (default: largest k)")
    parser.add_argument("--shard-id", type=int, default=None, help="encode only this shard (0-based), then exit")
    parser.add_argument("--shard-count", "--shard-num", type=int, default=1,
                        help="number of encoding shards (--shard-num, the encode command's name, is the same flag)")
    parser.add_argument("--chunk-size", type=int, default=4096, help="passages per resumable chunk")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--dtype", choices=DTYPES, default="auto",
                        help="bf16 autocast or fp32; auto = bf16 where the hardware runs it natively (all shards "
                             "and the final run must use the same precision)")
    parser.add_argument("--threads", type=int, default=2, help="torch / faiss CPU threads, Lucene indexing threads")
    args = parser.parse_args(argv)
    check_at_least_one(args, "chunk_size", "batch_size", "threads")
    if args.shard_count < 1:
        parser.error("--shard-count must be at least 1")
    if args.shard_id is not None and not 0 <= args.shard_id < args.shard_count:
        parser.error(f"--shard-id must be in [0, {args.shard_count}) (with --shard-count {args.shard_count})")
    if any(k < 1 for k in args.top_k):
        parser.error("--top-k values must be positive")
    args.hits = max(args.top_k) if args.hits is None else args.hits  # 0 is refused below, not read as unset
    if not max(args.top_k) <= args.hits <= 1000:
        parser.error(f"--hits must be in [{max(args.top_k)}, 1000] (the largest --top-k, TREC's depth)")
    return args


@command  # bad input (named by file and line), a missing file, a wrong card, unfinished shards: one line, exit 2
def main(argv=None) -> int:
    args = parse_args(argv)
    for flag, path in (("--corpus", args.corpus), ("--qas", args.qas)):
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, f"no such file ({flag})", str(path))
    return run(args)


def run(args: argparse.Namespace) -> int:
    import torch

    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.cards import load_card
    from retromae_ir.evaluate import nq
    from retromae_ir.evaluate.report import format_markdown, write_table
    from retromae_ir.evaluate.retrievers import runs_folder_claimed
    from retromae_ir.io import claim_output
    from retromae_ir.logs import FORMAT, log_beside
    from retromae_ir.search.retriever import EncoderRetriever, dense_index_name

    logging.basicConfig(level=logging.INFO, format=FORMAT)
    card = load_card(args.encoder)
    modes = args.modes or (["dense", "sparse", "hybrid"] if card.sparse else ["dense"])
    if not card.sparse and set(modes) - {"dense"}:
        raise ValueError(f"card {card.name!r} is dense-only: --modes {' '.join(modes)} needs a sparse side")
    questions = nq.load_dpr_questions(args.qas)  # checked before an hour of encoding, not after
    output = args.output or Path("runs") / card.name / "nq"
    index_dir = args.index_dir or Path("indexes") / card.name / "nq-dpr"  # not BEIR's nq: each replaced the other
    torch.set_num_threads(args.threads)
    model = EncoderModel.from_card(card, device=args.device, bf16=None if args.dtype == "auto" else
                                   args.dtype == "bf16")
    if args.shard_id is not None and args.shard_count > 1:  # hours on a GPU: its log beside the shards' index
        index_dir.mkdir(parents=True, exist_ok=True)
        with log_beside(index_dir / f"shard-{args.shard_id}-of-{args.shard_count}"):
            nq.build_index(model, args.corpus, index_dir, args.shard_id, args.shard_count, args.chunk_size,
                           args.batch_size, args.threads)
        print(f"shard {args.shard_id} of {args.shard_count} encoded under {index_dir}; when every shard is, run "
              f"again with --shard-count {args.shard_count} and no --shard-id")
        return 0
    # in the card's runs folder (the default), NQ's results are that checkpoint's, as BEIR's and TREC DL's beside them
    card_runs = Path("runs") / card.name
    with claim_output(output), (runs_folder_claimed(card_runs, EncoderRetriever(card).owner, results=output)
                                if output.resolve().parent == card_runs.resolve() else contextlib.nullcontext()):
        created = not output.exists()
        output.mkdir(parents=True, exist_ok=True)
        log = logging.FileHandler(output / "nq.log", encoding="utf-8")
        log.setFormatter(logging.Formatter(FORMAT))
        logging.getLogger().addHandler(log)
        try:
            checked = nq.build_index(model, args.corpus, index_dir, None, args.shard_count, args.chunk_size,
                                     args.batch_size, args.threads)
            results = nq.evaluate_modes(model, index_dir, args.corpus, questions, modes, output, args.top_k,
                                        args.hits, args.batch_size, args.threads, checked)
            dense_index = dense_index_name(index_dir)  # searched as it is, flat, rebuilt or replaced by hand
            frame = nq.results_frame(results, card.name, dense_index)
            write_table(frame, output / nq.RESULTS_STEM, f"NQ test, top-k retrieval accuracy: {card.name}",
                        [f"{len(questions)} questions from {args.qas}; passages from {args.corpus}; dense index "
                         f"{dense_index} ({index_dir})",
                         "scored by pyserini.eval.evaluate_dpr_retrieval (an answer in a passage's text, "
                         "SimpleTokenizer: DPR's rule)"])
        except BaseException:
            if created:  # a failed run leaves no runs folder that looks like a result (the index keeps its chunks)
                shutil.rmtree(output, ignore_errors=True)
            raise
        finally:
            logging.getLogger().removeHandler(log)
            log.close()
    print(format_markdown(frame))
    print(f"runs: {output}/<mode>.trec; DPR JSON: {output}/<mode>.dpr.json; table: {output / nq.RESULTS_STEM}.md")
    return 0

if __name__ == "__main__":
    sys.exit(main())
