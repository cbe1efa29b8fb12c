"""Eq. 12's OT weight (lambda) swept on a dev split carved from BEIR train queries, over an existing index.

    .venv/bin/python benchmarks/sparse_weight_sweep.py --encoder CARD --index INDEX_DIR \
        --folder ../shared/data/beir/scifact [--dev-queries 100 --seed 0]

Prints nDCG@10 / R@100 of ``dense + lambda * OT`` on the dev queries for every weight, the weight chosen on dev,
and the test split at that weight only (with the dense side alone, lambda 0, for reference). The chain
(eval/chain_scifact.py) makes the same choice with the same function; this script reads an index built earlier
(``python -m retromae_ir.encode corpus``), so it costs only the query encoding.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def main(argv=None) -> None:
    from retromae_ir.data.readers import load_qrels
    from retromae_ir.data.splits import carve_dev_split
    from retromae_ir.encode import EncoderModel
    from retromae_ir.evaluate.beir_suite import judged_queries
    from retromae_ir.evaluate.sparse_weight import GRID, best_weight, sweep_sparse_weight

    parser = argparse.ArgumentParser(prog="benchmarks/sparse_weight_sweep.py", description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", required=True, help="the card the index was built with")
    parser.add_argument("--index", type=Path, required=True, help="a retromae_ir index directory of the corpus")
    parser.add_argument("--folder", type=Path, required=True, help="BEIR folder with qrels/train.tsv and test.tsv")
    parser.add_argument("--dev-queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    model = EncoderModel.from_card(args.encoder, device="cpu")
    test_queries, test_qrels = judged_queries(args.folder, "test")
    train_queries, _ = judged_queries(args.folder, "train")
    with tempfile.TemporaryDirectory() as tmp:
        _, dev_path = carve_dev_split(args.folder / "qrels" / "train.tsv", args.dev_queries, tmp, args.seed,
                                      queries=args.folder / "queries.jsonl",  # the chain's split: no test twin
                                      evaluated=(args.folder / "qrels" / "test.tsv",))
        dev_qrels = load_qrels(dev_path)
    dev_queries = {qid: train_queries[qid] for qid in dev_qrels}
    sweep = sweep_sparse_weight(args.index, model, dev_queries, dev_qrels, weights=(0.0, *GRID))
    print("| lambda | dev nDCG@10 | dev R@100 |\n| --- | --- | --- |")
    for weight, metrics in sweep.items():
        print(f"| {weight:g} | {metrics['ndcg@10']:.4f} | {metrics['recall@100']:.4f} |")
    chosen = best_weight({w: m for w, m in sweep.items() if w > 0})
    test = sweep_sparse_weight(args.index, model, test_queries, test_qrels, weights=(0.0, chosen))
    print(f"\nchosen on dev: lambda = {chosen:g}\n\n| test ({len(test_queries)} queries) | nDCG@10 | R@100 |\n"
          "| --- | --- | --- |")
    for label, weight in (("dense alone (lambda 0)", 0.0), (f"hybrid, lambda {chosen:g}", chosen)):
        print(f"| {label} | {test[weight]['ndcg@10']:.4f} | {test[weight]['recall@100']:.4f} |")


if __name__ == "__main__":
    main()
