"""The retriever options every evaluation driver shares: BM25, or an encoder card with a search mode; and the
locks a driver holds on what it writes. The options are explicit: ``--encoder`` names a card (a missing one is an
error, see ``load_card``) and ``--index-dir`` is where indexes go; no environment variable replaces either."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
from pathlib import Path
from typing import Iterator

from retromae_ir.bm25 import BM25Params, BM25Retriever
from retromae_ir.cli import add_compile_argument, check_at_least_one, finite_float
from retromae_ir.io import as_stored, atomic_write, claim_output
from retromae_ir.logs import setup_logging
from retromae_ir.runs import MAX_DEPTH


def add_retriever_arguments(parser: argparse.ArgumentParser) -> None:
    chooser = parser.add_mutually_exclusive_group()
    chooser.add_argument("--retriever", choices=["bm25"], help="a lexical retriever (the default: bm25)")
    chooser.add_argument("--encoder", help="an encoder card: a name in encoders/ or a YAML path")
    parser.add_argument("--search", choices=["hybrid", "dense", "sparse"],
                        help="with --encoder: default hybrid for DupMAE cards, dense for dense-only cards")
    parser.add_argument("--index-dir", type=Path, default=Path("indexes"),
                        help="indexes go to INDEX_DIR/<retriever or card>/")
    parser.add_argument("--threads", type=int, default=2)
    # defaults None: a flag given to the other retriever is an error, not silently unused (make_retriever fills them)
    parser.add_argument("--k1", type=finite_float, default=None, help=f"BM25 k1 (default {BM25Params.k1})")
    parser.add_argument("--b", type=finite_float, default=None, help=f"BM25 b (default {BM25Params.b})")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"encoding batch size (--encoder; default {ENCODER_DEFAULTS['batch_size']})")
    parser.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default=None,
                        help="encoding precision (--encoder): bf16 autocast or fp32; auto (the default) = bf16 where "
                             "the hardware runs it natively (retromae_ir/hardware.py), as `encode corpus --dtype auto`")
    add_compile_argument(parser, "with --encoder, as `encode corpus --compile`: ")


ENCODER_DEFAULTS = {"batch_size": 64, "dtype": "auto"}
# hits the drivers retrieve: one more than a run file keeps, so that dropping a query's own id (BEIR) leaves
# 1,000 (runs of 999 were written before); cached_run cuts every run to MAX_DEPTH
DEPTH = MAX_DEPTH + 1
BM25_DEFAULTS = {"k1": BM25Params.k1, "b": BM25Params.b}


def check_retriever_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a flag of the retriever not chosen: given, it would be accepted and ignored; and sizes below 1."""
    check_at_least_one(args, "threads", "batch_size")
    for flag in ("search", "compile", *ENCODER_DEFAULTS):
        if getattr(args, flag) is not None and not args.encoder:
            parser.error(f"--{flag.replace('_', '-')} goes with --encoder")
    for flag in BM25_DEFAULTS:
        if getattr(args, flag) is not None and args.encoder:
            parser.error(f"--{flag} goes with --retriever bm25, not --encoder")


def make_retriever(args: argparse.Namespace):
    """An object with ``name`` and ``retrieve(corpus, index_name, queries)``."""
    given = {name: default if getattr(args, name) is None else getattr(args, name)
             for name, default in {**ENCODER_DEFAULTS, **BM25_DEFAULTS}.items()}
    if args.encoder:
        from retromae_ir.search.retriever import EncoderRetriever

        return EncoderRetriever(args.encoder, args.search, args.index_dir, hits=DEPTH,
                                batch_size=given["batch_size"], threads=args.threads,
                                bf16=None if given["dtype"] == "auto" else given["dtype"] == "bf16",
                                compile_backend=args.compile)
    return BM25Retriever(args.index_dir / "bm25", BM25Params(given["k1"], given["b"], hits=DEPTH), args.threads)


@contextlib.contextmanager
def evaluation_session(args: argparse.Namespace, log_name: str) -> Iterator[tuple[object, Path]]:
    """A driver's set-up: the retriever of ``args`` and its runs folder ``RUNS_DIR/<retriever>/`` (the run files,
    i.e. the evaluation cache), locked for the whole block so a second driver writing it fails at once, logging to
    ``<runs folder>/<log_name>``; ``claim_output`` deletes the ``.*.tmp`` a killed run-file write left. (Each index is
    locked by the code that builds it, see ``bm25.build_index`` and ``EncoderRetriever.build_index``.) A runs folder
    this session created is removed again when the block fails before writing a run file (what it added, see
    ``runs_folder_claimed``), so a failed driver leaves nothing behind; one that wrote run files keeps them."""
    retriever = make_retriever(args)
    out_dir = args.runs_dir / retriever.name
    before = (logging.getLogger().handlers[:], logging.getLogger().level)
    with claim_output(out_dir), runs_folder_claimed(out_dir, retriever.owner, out_dir / log_name):
        setup_logging(out_dir / log_name)
        try:
            yield retriever, out_dir
        finally:
            _restore_logging(*before)  # the log file closed before a failed session's folder goes


@contextlib.contextmanager
def runs_folder_claimed(out_dir: Path, owner: dict, log: Path | None = None,
                        results: Path | None = None) -> Iterator[None]:
    """``claim_runs_folder`` for a block that writes in ``out_dir``; if the block fails before it has written a run
    file, what it added is taken back: the record (so it does not take an older folder for its retriever: a
    mistyped checkpoint), the ``log`` it started, and the folder if that leaves it empty, so a failed driver leaves
    nothing behind. Only what it added: another driver may be writing beside it (eval/nq.py's ``runs/<card>/nq``
    is locked on its own). Run files it did write stay, with the record they belong to and the log: each is a
    finished result under its key (a suite stopped at its 17th dataset re-scores the 16 done; removing the folder
    threw them away with the traceback). ``results``: the folder the block writes its run files in (default
    ``out_dir``; eval/nq.py's is its subfolder)."""
    results = results or out_dir
    created = not out_dir.exists()
    logged = log is not None and not log.exists()
    before = _run_files(results)
    adopted = claim_runs_folder(out_dir, owner)
    try:
        yield
    except BaseException:
        if _run_files(results).items() - before.items():
            raise
        if created or adopted:
            (out_dir / OWNER_FILE).unlink(missing_ok=True)
        if logged:
            log.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):  # another driver wrote in it meanwhile: it stays
                out_dir.rmdir()
        raise


def _run_files(folder: Path) -> dict[str, tuple[int, int]]:
    """The run files in ``folder``, each with its inode and modification time: a run file is replaced by a
    rename, so a rewritten one counts as written even within one clock tick."""
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in folder.glob("*.trec")}


OWNER_FILE = "retriever.json"


# an encoder's checkpoint is its own by either: moved or copied it keeps its files, trained again in place its path
EITHER_IDENTIFIES = ("checkpoint", "weights")


def claim_runs_folder(out_dir: Path, owner: dict) -> bool:
    """Record which retriever ``out_dir`` (``RUNS_DIR/<retriever name>``) belongs to, or refuse another one whose
    name is the same: two fine-tuned checkpoints in folders of one name (every chain's ``2-stage2``), a card named
    ``bm25``, or ``x`` searched dense beside a card named ``x-dense``. Its results table replaced the other's under
    the same title, and its runs the other's files (exit 0). The record follows its retriever (a moved checkpoint);
    a folder from before records is adopted. Returns whether this call adopted one."""
    path = out_dir / OWNER_FILE
    adopted = not path.is_file() and out_dir.is_dir()
    if path.is_file():
        try:
            recorded = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not the record of a retriever ({error}); remove it") from None
        if not same_retriever(recorded, as_stored(owner)):
            raise ValueError(f"{out_dir} holds the runs of another retriever ({recorded}), not of this one "
                             f"({as_stored(owner)}); give --runs-dir (eval/nq.py: --output) another folder, or the card "
                             "another name")
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as handle:
        json.dump(owner, handle, indent=2)
    return adopted


def same_retriever(recorded: dict, owner: dict) -> bool:
    """Equal in every field but ``EITHER_IDENTIFIES``, and equal in one of those that is set."""
    def fixed(record: dict) -> dict:
        return {key: value for key, value in record.items() if key not in EITHER_IDENTIFIES}

    either = [key for key in EITHER_IDENTIFIES if key in owner or key in recorded]
    return fixed(recorded) == fixed(owner) and (not either or any(
        owner.get(key) is not None and recorded.get(key) == owner.get(key) for key in either))


def _restore_logging(handlers: list[logging.Handler], level: int) -> None:
    """The root logger as it was before a session (its log file closed), so a driver called in process (tests,
    notebooks) leaves no handler writing to its file or to a stream that is gone."""
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
