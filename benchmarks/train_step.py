"""Where a fine-tuning step's time goes: one stage-1 step (forward + backward, no optimizer) of a DupMAE card on
real scifact text, with and without attention dropout, against the dense-only step sentence-transformers runs.

    .venv/bin/python benchmarks/train_step.py --encoder encoders/dupmae-minilm.yaml \
        --corpus ../shared/data/beir/scifact/corpus.jsonl --queries ../shared/data/beir/scifact/queries.jsonl --bf16

Rows (best of ``--rounds``, interleaved, seconds a step of ``--batch`` queries and as many passages):
- ``dense only``: the encoder, mean pooling and the in-batch loss on the cosine (MultipleNegativesRankingLoss's work);
- ``DupMAE``: ``BiEncoder.forward`` + the Eq. 12 contrastive loss with the OT side, as ``retromae_ir.finetune
  --stage 1`` runs it without the added dense and OT terms (each costs one [32, 32] score matrix more);
each with the checkpoint's attention dropout and with ``--attention-dropout 0`` (PyTorch's fused attention kernel).
The matmul ceiling is measured in the same run (``encode_search.matmul_ceiling``, 2048 x 2048, the same precision).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time

import torch


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def batches(args, tokenizer):
    with open(args.corpus) as handle:
        docs = [json.loads(line) for line in itertools.islice(handle, args.batch)]
    with open(args.queries) as handle:
        queries = [json.loads(line)["text"] for line in itertools.islice(handle, args.batch)]
    passages = tokenizer([f"{d.get('title', '')} {d['text']}".strip() for d in docs], padding=True, truncation=True,
                         max_length=args.passage_length, return_tensors="pt")
    return tokenizer(queries, padding=True, truncation=True, max_length=args.query_length,
                     return_tensors="pt"), passages


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/train_step.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="dupmae-minilm", help="a DupMAE card (name or YAML)")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--queries", required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--query-length", type=int, default=64)
    parser.add_argument("--passage-length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast, as the chain on a bf16 CPU")
    args = parser.parse_args(argv)
    from encode_search import matmul_ceiling  # benchmarks/ is the script's own folder, first on sys.path

    from retromae_ir.encode.cards import load_card
    from retromae_ir.encode.representation import pool
    from retromae_ir.finetune.arguments import DataArguments, LossArguments
    from retromae_ir.finetune.losses import contrastive_loss
    from retromae_ir.finetune.model import BiEncoder, hf_model, load_encoder, set_attention_dropout

    torch.set_num_threads(args.threads)
    card = load_card(args.encoder)
    model = BiEncoder(load_encoder(card), DataArguments(train="unused"), LossArguments(stage="1"))
    queries, passages = batches(args, model.tokenizer)
    configured = hf_model(model.encoder).config.attention_probs_dropout_prob
    precision = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else contextlib.nullcontext

    def dense_only():
        backbone = hf_model(model.encoder).base_model
        with precision():
            sides = [torch.nn.functional.normalize(pool(backbone(**batch).last_hidden_state,
                                                        batch["attention_mask"], "mean").float(), dim=-1)
                     for batch in (queries, passages)]
        contrastive_loss(sides[0] @ sides[1].T, 1, 0.05).backward()

    def dupmae():
        batch = {**{f"query_{k}": v for k, v in queries.items()}, **{f"passage_{k}": v for k, v in passages.items()}}
        with precision():
            outputs = model(batch)
        model.loss(outputs, batch)["loss"].backward()

    rows = {(name, p): float("inf") for name in ("dense only", "DupMAE") for p in (configured, 0.0)}
    for round_ in range(args.rounds + 1):  # the first round warms up
        for (name, p) in rows:
            set_attention_dropout(hf_model(model.encoder), p)
            seconds = _timed(dense_only if name == "dense only" else dupmae)
            model.zero_grad(set_to_none=True)
            if round_:
                rows[name, p] = min(rows[name, p], seconds)
    precision_name = "bf16" if args.bf16 else "fp32"
    ceiling = matmul_ceiling(args.threads, size=2048, dtypes=(precision_name,))[precision_name]
    print(json.dumps({"batch": args.batch, "passage_tokens": int(passages["attention_mask"].sum()),
                      "bf16": args.bf16, "threads": args.threads, "matmul_ceiling_gflops": round(ceiling, 1),
                      "seconds_per_step": {f"{name}, attention dropout {p}": round(s, 3)
                                           for (name, p), s in rows.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
