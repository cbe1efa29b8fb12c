"""Is the distillation teacher better than its student? The cross-encoder reranks the student's own top candidates.

    .venv/bin/python benchmarks/teacher_rerank.py --encoder outputs/chain-X/2-stage2/card.yaml \
        --index outputs/chain-X/indexes/2-stage2/scifact-chain-X-2-stage2 --teacher outputs/chain-X/4-cross-encoder \
        --folder ../shared/data/beir/scifact --dev-qrels outputs/chain-X/splits/dev.tsv [--depth 20]

Distillation (Eq. 15) moves the bi-encoder towards the teacher's ranking of each query's group, so it can only
help where the teacher ranks better than the student. For the dev split (the chain's held-out training queries)
and the test split, this prints nDCG@10 of the student's exact hybrid ranking and of the same top ``--depth``
candidates reordered by the teacher (R@depth bounds both), so the comparison costs depth x queries pairs.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def rerank(run: dict[str, dict[str, float]], queries: dict[str, str], passages: dict[str, str], teacher,
           batch_size: int) -> dict[str, dict[str, float]]:
    """Each query's candidates rescored by the teacher (the candidate set is unchanged)."""
    from tqdm import tqdm

    pairs = [(qid, docid) for qid, hits in run.items() for docid in hits]
    scores = []
    for first in tqdm(range(0, len(pairs), batch_size), desc="teacher scoring", unit="batch"):
        batch = pairs[first:first + batch_size]
        scores += teacher.score([queries[qid] for qid, _ in batch], [passages[docid] for _, docid in batch])
    reranked: dict[str, dict[str, float]] = {}
    for (qid, docid), score in zip(pairs, scores):
        reranked.setdefault(qid, {})[docid] = score
    return reranked


def main(argv=None) -> None:
    import torch

    from retromae_ir.data.readers import load_beir_queries, load_qrels
    from retromae_ir.encode import EncoderModel
    from retromae_ir.evaluate import evaluate_run
    from retromae_ir.evaluate.beir_suite import judged_queries
    from retromae_ir.finetune.data import load_passages
    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments
    from retromae_ir.search.exact_hybrid import ExactHybridSearcher

    parser = argparse.ArgumentParser(prog="benchmarks/teacher_rerank.py", description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", required=True, help="the student's card (the index was built with it)")
    parser.add_argument("--index", type=Path, required=True, help="the student's retromae_ir index of the corpus")
    parser.add_argument("--teacher", required=True, help="a cross-encoder from python -m retromae_ir.rerank train")
    parser.add_argument("--folder", type=Path, required=True, help="BEIR folder (corpus, queries, qrels/test.tsv)")
    parser.add_argument("--dev-qrels", type=Path, required=True, help="the chain's splits/dev.tsv")
    parser.add_argument("--depth", type=int, default=20, help="candidates reranked per query (default: %(default)s)")
    parser.add_argument("--max-length", type=int, default=256, help="the teacher's pair length (the chain's ce_length)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    student = EncoderModel.from_card(args.encoder, device="cpu")
    teacher = CrossEncoder.load(CrossEncoderArguments(args.teacher, args.max_length))
    teacher.eval()
    passages = load_passages(args.folder / "corpus.jsonl")
    searcher = ExactHybridSearcher(args.index, student, "hybrid")
    all_queries = load_beir_queries(args.folder / "queries.jsonl")
    dev_qrels = load_qrels(args.dev_qrels)
    splits = {"dev": ({qid: all_queries[qid] for qid in dev_qrels}, dev_qrels),
              "test": judged_queries(args.folder, "test")}
    metrics = ("ndcg@10", f"recall@{args.depth}")
    print(f"| split | queries | student hybrid nDCG@10 | teacher rerank of its top {args.depth} nDCG@10 | "
          f"R@{args.depth} | teacher s |\n| --- | --- | --- | --- | --- | --- |", flush=True)
    for split, (queries, qrels) in splits.items():
        run = searcher.batch_search(list(queries.values()), list(queries), k=args.depth)
        start = time.perf_counter()
        with torch.inference_mode():
            reranked = rerank(run, queries, passages, teacher, args.batch_size)
        seconds = time.perf_counter() - start
        own, taught = evaluate_run(run, qrels, metrics), evaluate_run(reranked, qrels, metrics)
        print(f"| {split} | {len(queries)} | {own['ndcg@10']:.4f} | {taught['ndcg@10']:.4f} | "
              f"{own[metrics[1]]:.4f} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
