"""``python -m retromae_ir.encode {corpus,merge,dense-index,queries,verify}``: encode a corpus into faiss + Lucene
impact indexes, join shards, rebuild the flat dense index as another faiss index, pre-encode topics for Pyserini's
searchers, or check an index's files against its manifest. ``--encoder`` takes a card name or path."""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

from retromae_ir.cli import add_compile_argument, add_debug_flag, check_at_least_one, command
from retromae_ir.io import claim_output, make_dir
from retromae_ir.logs import FORMAT as LOG_FORMAT

DTYPES = ("auto", "bf16", "fp32", "int8")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--encoder", required=True, help="encoder card: a name in encoders/ or a YAML path")
    parser.add_argument("--output", required=True, type=Path, help="output directory")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available)")
    parser.add_argument("--dtype", choices=DTYPES, default="auto",
                        help="bf16 autocast, fp32, or int8 (dynamic quantisation of the linear layers, CPU only); "
                             "auto = bf16 where the hardware runs it natively (a GPU that has it, a CPU with "
                             "AVX512_BF16/AMX), else fp32 (AVX2-only CPUs emulate bf16 and run it slower; speed and "
                             "quality of each against fp32 in docs/encoders.md)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    add_compile_argument(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = add_debug_flag(argparse.ArgumentParser(prog="python -m retromae_ir.encode", description=__doc__))
    sub = parser.add_subparsers(dest="command", required=True)
    corpus = sub.add_parser("corpus", help="encode a corpus (a shard of it with --shard-id/--shard-num)")
    _common(corpus)
    source = corpus.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", type=Path, help="BEIR corpus.jsonl")
    source.add_argument("--dataset", help="BEIR dataset name (resolved by retromae_ir.data.beir)")
    corpus.add_argument("--data-dir", default=None,
                        help="the folder --dataset is read from (then only there; without it: $RETROMAE_IR_DATA, the "
                             "cache, the download)")
    corpus.add_argument("--shard-id", type=int, default=None, help="default: $RANK under torchrun, else 0")
    corpus.add_argument("--shard-num", type=int, default=None, help="default: $WORLD_SIZE under torchrun, else 1")
    corpus.add_argument("--chunk-size", type=int, default=4096, help="documents per resumable chunk")
    corpus.add_argument("--overwrite", action="store_true",
                        help="remove the output (its index and the chunks kept for resuming) and encode afresh")
    merge = sub.add_parser("merge", help="join finished shards into the indexes and write the manifest")
    merge.add_argument("--encoder", required=True)
    merge.add_argument("--output", required=True, type=Path)
    merge.add_argument("--shard-num", type=int, required=True)
    merge.add_argument("--threads", type=int, default=1, help="Lucene indexing threads")
    merge.add_argument("--int8", action="store_true", help="the shards were encoded with --dtype int8")
    dense = sub.add_parser("dense-index", help="rebuild an index's flat dense index as a faiss.index_factory index "
                                               "(e.g. SQfp16: half the memory, exact to float16), block by block")
    dense.add_argument("--index", dest="output", required=True, type=Path, help="an output of corpus or merge")
    dense.add_argument("--factory", required=True,
                       help="faiss.index_factory string: SQfp16, SQ8, HNSW32,Flat, IVF4096,Flat, IVF4096,PQ96 ... "
                            "(what each does to exactness: docs/encoders.md)")
    dense.add_argument("--train-size", type=int, default=100_000,
                       help="vectors an index that needs training (IVF, PQ, SQ8) is trained on")
    dense.add_argument("--nprobe", type=int, default=None, help="lists an IVF index searches (stored in the index)")
    dense.add_argument("--seed", type=int, default=0, help="draws the training vectors")
    queries = sub.add_parser("queries", help="pre-encode topics (Pyserini's embedding.pkl and sparse.jsonl)")
    _common(queries)
    queries.add_argument("--topics", required=True, type=Path, help="topics file (TSV, .gz, JSONL or TREC)")
    verify = sub.add_parser("verify", help="hash an index's files against the checksums its manifest recorded")
    verify.add_argument("--index", required=True, type=Path, help="an output of corpus or merge")
    return parser


def _model(args):
    import torch

    from retromae_ir.encode import EncoderModel

    if args.threads:
        torch.set_num_threads(args.threads)
    bf16 = None if args.dtype == "auto" else args.dtype == "bf16"
    model = EncoderModel.from_card(args.encoder, device=args.device, bf16=bf16)
    if args.dtype == "int8":
        model.quantize_int8()
    return model.compile_backbone(args.compile) if args.compile else model


def _vocab(card) -> list[str]:
    from transformers import AutoTokenizer

    from retromae_ir.encode.base import vocab_of

    return vocab_of(AutoTokenizer.from_pretrained(card.checkpoint_path()))


def _shard(args) -> tuple[int, int]:
    """Explicit flags, else torchrun's RANK/WORLD_SIZE, else the whole corpus."""
    shard_num = args.shard_num or int(os.environ.get("WORLD_SIZE", 1))
    shard_id = args.shard_id if args.shard_id is not None else int(os.environ.get("RANK", 0))
    if args.device is None and "LOCAL_RANK" in os.environ:
        import torch

        if torch.cuda.is_available():
            args.device = f"cuda:{os.environ['LOCAL_RANK']}"
    return shard_id, shard_num


def run_corpus(args) -> None:
    from retromae_ir.encode.corpus import encode_shard, merge, read_corpus

    path = args.corpus
    if args.dataset:
        from retromae_ir.data.beir import resolve_beir

        path = resolve_beir(args.dataset, args.data_dir) / "corpus.jsonl"
    shard_id, shard_num = args.shard_id, args.shard_num
    docids, texts = read_corpus(path)
    model = _model(args)
    vocab = model.lucene_terms if model.card.sparse else model.vocab  # checked before the encoding, not after it
    folder = encode_shard(model, docids, texts, args.output, shard_id, shard_num, args.chunk_size, args.batch_size)
    del docids, texts  # encoded: the merge reads the chunks (the texts are about 4 GB at MS MARCO's 8.8M)
    if shard_num == 1:
        merge(args.output, model.card, vocab, 1, args.threads or 1, extra={"corpus": str(path),
                                                                              "bf16": model.bf16}, work=folder.parent)
    else:
        logging.info("shard %d of %d done; run `merge --shard-num %d` once all are", shard_id, shard_num, shard_num)


def run_merge(args) -> None:
    from retromae_ir.encode.cards import load_card
    from retromae_ir.encode.corpus import merge

    card = load_card(args.encoder)
    merge(args.output, card, _vocab(card), args.shard_num, args.threads, int8=args.int8)


def run_queries(args) -> None:
    from retromae_ir.data.readers import load_topics
    from retromae_ir.encode.queries import encode_queries

    encode_queries(_model(args), load_topics(args.topics), args.output, args.batch_size)


def run_dense_index(args) -> None:
    from retromae_ir.encode.dense_index import rebuild_dense

    rebuild_dense(args.output, args.factory, args.train_size, args.nprobe, args.seed)


def _log_name(args) -> str:
    if args.command == "corpus" and args.shard_num > 1:
        return f"corpus-shard-{args.shard_id}-of-{args.shard_num}.log"
    return f"{args.command}.log"


@contextlib.contextmanager
def _writing(args) -> Iterator[None]:
    """Hold the output's lock (one shard of several locks only its own folder: shards run side by side), start
    afresh on --overwrite, log to a file in the output, and remove an output this run created if it fails before
    any vector is written, so a failed command leaves nothing that looks like a result."""
    sharded = args.command == "corpus" and args.shard_num > 1
    if sharded and args.overwrite:
        raise ValueError("--overwrite removes the whole output, which the other shards share: remove it before "
                         "starting the shards instead")
    with contextlib.nullcontext() if sharded else claim_output(args.output):
        if getattr(args, "overwrite", False) and args.output.exists():
            logging.info("--overwrite: removing %s", args.output)
            shutil.rmtree(args.output)
        created = not args.output.exists()
        make_dir(args.output)
        handler = logging.FileHandler(args.output / _log_name(args))
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(handler)
        try:
            yield
        except BaseException:
            if created and not sharded and not _has_vectors(args.output):
                logging.getLogger().removeHandler(handler)
                shutil.rmtree(args.output, ignore_errors=True)
            raise
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()


def _has_vectors(output: Path) -> bool:
    """Whether any encoded vectors (chunks to resume from, indexes, encoded queries) are in ``output``."""
    return any(output.glob(".work/*/shard-*/chunk-*.npz")) or any(
        (output / part).exists() for part in ("dense", "sparse", "sparse.jsonl", "manifest.json"))


@command  # errors a user can fix (bad input, a refused mismatch, a held output): one line, exit 2
def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "compile", False) and args.dtype == "int8":
        parser.error("--compile and --dtype int8 do not combine (int8's quantised layers are neither inductor's "
                     "nor OpenVINO's)")
    if args.command == "corpus" and args.data_dir is not None and args.corpus is not None:
        parser.error("--data-dir goes with --dataset (where to look for it), not --corpus")
    # 0 was read as unset: torch's threads, $WORLD_SIZE or 1 shard
    check_at_least_one(args, *[name for name in ("threads", "shard_num", "batch_size", "chunk_size", "train_size",
                                                 "nprobe")
                               if hasattr(args, name)])
    if args.command == "corpus":
        args.shard_id, args.shard_num = _shard(args)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    if args.command == "verify":  # reads only: no lock, no log file in the index
        from retromae_ir.encode.manifest import verify_files

        print(f"{args.index}: {verify_files(args.index)} files match its manifest")
        return 0
    with _writing(args):
        {"corpus": run_corpus, "merge": run_merge, "dense-index": run_dense_index,
         "queries": run_queries}[args.command](args)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
