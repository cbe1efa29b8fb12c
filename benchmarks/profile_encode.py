"""Where an encoder's time goes: ``torch.profiler``'s table of one encode pass, eager or ``--compile``d.

    .venv/bin/python benchmarks/profile_encode.py                              # minilm-cls, eager
    .venv/bin/python benchmarks/profile_encode.py --compile                    # compile_frozen
    .venv/bin/python benchmarks/profile_encode.py --compile --attention eager  # bmm + softmax attention, compiled

The first ``--docs`` scifact documents are encoded once untimed (compilation, warm-up), then once under the
profiler; prints the ops by self CPU time, and each op's share.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from retromae_ir.cli import add_compile_argument

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/profile_encode.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="minilm-cls")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--docs", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    add_compile_argument(parser)  # EncoderModel.compile_backbone
    parser.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa",
                        help="transformers' attention: PyTorch's fused kernel (sdpa) or bmm + softmax (eager)")
    args = parser.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    from retromae_ir.encode.base import EncoderModel

    torch.set_num_threads(args.threads)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, args.corpus.open())][:args.docs]
    model = EncoderModel.from_card(args.encoder, device="cpu", bf16=False)
    owner, name = model._backbone()
    getattr(owner, name).set_attn_implementation(args.attention)
    if args.compile:
        model.compile_backbone(args.compile)
    model.encode_passage(texts)  # untimed: compilation, allocator warm-up
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        model.encode_passage(texts)
    ids = model.tokenizer(texts, truncation=True, max_length=model.card.max_passage_length)["input_ids"]
    tokens = sum(map(len, ids))
    print(f"{args.encoder}, {args.docs} documents ({tokens} tokens), fp32, {args.threads} threads, attention "
          f"{args.attention}{', --compile ' + args.compile if args.compile else ''}")
    print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
