"""Retrieval quality of int8 encoding (``--dtype int8``: dynamic quantisation of the linear layers) against fp32,
on a BEIR-layout folder's test split, the whole corpus, one encoder card per run.

The corpus is encoded with each precision into its own index (``INDEX_ROOT/<card>/<name>`` and ``...-int8``; an
existing fp32 index of the same card, corpus and weights is reused, e.g. the one ``eval/chain_scifact.py``
built) and searched in the card's modes, the queries encoded by the same (fp32 or int8) model; nDCG@10 and R@100 by pytrec_eval, wall
seconds of each build. Throughput ratios are ``benchmarks/encode_search.py``'s job (interleaved rounds).

    python benchmarks/precision_ndcg.py --folder ../shared/data/beir/scifact --encoder minilm-mean \
        --index-root outputs/chain-scifact-short/indexes --index-name scifact-chain-scifact-short-baseline-minilm-mean
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
from retromae_ir.search.retriever import EncoderRetriever  # noqa: E402

METRICS = ("ndcg@10", "recall@100")


def measure(card: str, modes: list[str], folder: Path, index_root: Path, name: str, int8: bool,
            test: tuple[dict[str, str], dict[str, dict[str, int]]]) -> dict:
    queries, qrels = test
    index_name = f"{name}-int8" if int8 else name
    retrievers = {mode: EncoderRetriever(card, mode=mode, index_root=index_root, hits=100, bf16=False, int8=int8)
                  for mode in modes}
    start = time.time()
    retrievers[modes[0]].build_index(folder / "corpus.jsonl", index_name)
    result = {"build_wall_s": round(time.time() - start, 1)}
    for mode, retriever in retrievers.items():
        run = retriever.retrieve(folder / "corpus.jsonl", index_name, queries)
        result[mode] = evaluate_run(run, qrels, METRICS)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/precision_ndcg.py", description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="BEIR layout: corpus.jsonl, queries.jsonl, qrels/")
    parser.add_argument("--encoder", required=True, help="encoder card name or path")
    parser.add_argument("--modes", nargs="+", default=None, help="default: dense, plus sparse and hybrid for DupMAE")
    parser.add_argument("--index-root", type=Path, required=True)
    parser.add_argument("--index-name", required=True, help="the fp32 index's name; int8 gets NAME-int8")
    parser.add_argument("--output", type=Path, default=None, help="results JSON (default: print only)")
    args = parser.parse_args(argv)
    from retromae_ir.encode.cards import load_card

    modes = args.modes or (["dense", "sparse", "hybrid"] if load_card(args.encoder).sparse else ["dense"])
    results, test = {"encoder": args.encoder, "folder": str(args.folder)}, judged_queries(args.folder, "test")
    for precision in ("fp32", "int8"):
        results[precision] = measure(args.encoder, modes, args.folder, args.index_root, args.index_name,
                                     precision == "int8", test)
        print(precision, json.dumps(results[precision]), flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
