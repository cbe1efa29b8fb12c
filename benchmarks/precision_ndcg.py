"""Retrieval quality of an int8 or bf16 encoding against fp32 on a BEIR folder's test split, one card per run.

``--dtype int8``: dynamic quantisation of the linear layers, on the CPU; ``--dtype bf16``: bf16 autocast, on a
CUDA GPU where there is one. The whole corpus of the BEIR-layout folder, its test queries.

The corpus is encoded with each precision into its own index (``INDEX_ROOT/<card>/<name>`` and ``...-int8`` or
``...-bf16``; an existing fp32 index of the same card, corpus and weights is reused, e.g. the one
``eval/chain_scifact.py`` built) and searched in the card's modes, the queries encoded by the same (fp32, int8 or
bf16) model; nDCG@10 and R@100 by pytrec_eval, wall seconds of each build. The fp32 side is really fp32 (no
autocast, whatever the hardware). Throughput ratios are ``benchmarks/encode_search.py``'s job (interleaved rounds).

    python benchmarks/precision_ndcg.py --folder ../shared/data/beir/scifact --encoder minilm-mean \
        --index-root outputs/chain-scifact-short/indexes --index-name scifact-chain-scifact-short-baseline-minilm-mean

bf16 against fp32 on a GPU (both indexes encoded on ``--device``; ``--no-lucene`` where there is no Java: the
exact searcher reads no Lucene index):

    python benchmarks/precision_ndcg.py --folder ../shared/data/beir/scifact --encoder dupmae-minilm \
        --index-root outputs/precision-bf16/indexes --index-name scifact --dtype bf16 --device cuda --no-lucene \
        --output outputs/precision-bf16/dupmae-minilm.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from retromae_ir.evaluate import evaluate_run  # noqa: E402
from retromae_ir.evaluate.beir_suite import judged_queries  # noqa: E402
from retromae_ir.io import atomic_write  # noqa: E402
from retromae_ir.search.retriever import EncoderRetriever  # noqa: E402
from retromae_ir.cli import Repeatable  # noqa: E402

METRICS = ("ndcg@10", "recall@100")


def retriever_options(precision: str) -> dict:
    """EncoderRetriever's precision keywords for ``precision``: fp32 is fp32 explicitly (not the hardware's pick)."""
    if precision not in ("fp32", "int8", "bf16"):
        raise ValueError(f"unknown precision {precision!r}")
    return {"bf16": precision == "bf16", "int8": precision == "int8"}


def index_name_of(name: str, precision: str) -> str:
    return name if precision == "fp32" else f"{name}-{precision}"


def measure(card: str, modes: list[str], folder: Path, index_root: Path, name: str, precision: str,
            test: tuple[dict[str, str], dict[str, dict[str, int]]], device: str, lucene: bool = True) -> dict:
    queries, qrels = test
    index_name = index_name_of(name, precision)
    retrievers = {mode: EncoderRetriever(card, mode=mode, index_root=index_root, hits=100, lucene=lucene,
                                        device=device, **retriever_options(precision))
                  for mode in modes}
    manifest = index_root / retrievers[modes[0]].card.name / index_name / "manifest.json"
    before = manifest.read_text() if manifest.is_file() else None
    start = time.time()
    retrievers[modes[0]].build_index(folder / "corpus.jsonl", index_name)
    seconds = round(time.time() - start, 1)
    reused = before is not None and manifest.read_text() == before  # an index reused: no build time to report
    result = {"index": index_name, **({"reused": True} if reused else {"build_wall_s": seconds})}
    for mode, retriever in retrievers.items():
        run = retriever.retrieve(folder / "corpus.jsonl", index_name, queries)
        result[mode] = evaluate_run(run, qrels, METRICS)
    return result


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/precision_ndcg.py", description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="BEIR layout: corpus.jsonl, queries.jsonl, qrels/")
    parser.add_argument("--encoder", required=True, help="encoder card name or path")
    parser.add_argument("--modes", nargs="+", action=Repeatable,
                        default=None, help="default: dense, plus sparse and hybrid for DupMAE")
    parser.add_argument("--index-root", type=Path, required=True)
    parser.add_argument("--index-name", required=True, help="the fp32 index's name; the other gets NAME-<dtype>")
    parser.add_argument("--dtype", choices=["int8", "bf16"], default="int8",
                        help="the precision compared against fp32 (int8: CPU only; bf16: autocast)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="where both sides encode (default: cpu for int8; for bf16 cuda when available, else cpu)")
    parser.add_argument("--no-lucene", dest="lucene", action="store_false",
                        help="build no Lucene impact index (a host without Java; the exact searcher needs none)")
    parser.add_argument("--output", type=Path, default=None, help="results JSON (default: print only)")
    args = parser.parse_args(argv)
    if args.device is None:
        import torch

        args.device = "cuda" if args.dtype == "bf16" and torch.cuda.is_available() else "cpu"
    if args.dtype == "int8" and args.device != "cpu":
        parser.error("--dtype int8 runs on the CPU only (dynamic quantisation); use --device cpu, or --dtype bf16")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from retromae_ir.encode.cards import load_card

    modes = args.modes or (["dense", "sparse", "hybrid"] if load_card(args.encoder).sparse else ["dense"])
    results = {"encoder": args.encoder, "folder": str(args.folder), "device": args.device, "dtype": args.dtype}
    test = judged_queries(args.folder, "test")
    for precision in ("fp32", args.dtype):
        results[precision] = measure(args.encoder, modes, args.folder, args.index_root, args.index_name,
                                     precision, test, args.device, args.lucene)
        print(precision, args.device, json.dumps(results[precision]), flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(args.output) as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
