"""Micro-benchmark of the OT max-pool (#12 item 2): the naive LM head over [chunk, L, V] against the packed,
vocabulary-tiled ``retromae_ir.encode.representation.max_pool_logits``, on random hidden states.

A BERT MLM head of MiniLM's shape (hidden 384, vocabulary 30522; random weights, what is timed is the same
either way) pools ``--batch`` documents padded to ``--length`` positions, each with a random number of positions
between ``--min-length`` and ``--length``, [CLS] and [SEP] excluded from the ordinary tokens. Both run
interleaved, best of ``--rounds``, in fp32 (``--bf16``: bf16 autocast) inference mode (``--backward`` times
forward + backward, what fine-tuning runs, after Eq. 11's top-``--k``); prints ms per batch of each, the ratio and
the largest difference between the two results.

    python benchmarks/ot_maxpool.py --batch 64 --length 256 --tile 4096 --threads 2
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def build(args):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertOnlyMLMHead

    torch.manual_seed(0)
    head = BertOnlyMLMHead(BertConfig(hidden_size=args.hidden, vocab_size=args.vocab)).eval()
    hidden = torch.randn(args.batch, args.length, args.hidden)
    lengths = torch.randint(args.min_length, args.length + 1, (args.batch,))
    positions = torch.arange(args.length)
    mask = (positions > 0) & (positions < lengths[:, None] - 1)  # [CLS] at 0, [SEP] at length - 1, then padding
    return head, hidden, mask


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/ot_maxpool.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="documents per batch")
    parser.add_argument("--length", type=int, default=256, help="padded length (positions) of the batch")
    parser.add_argument("--min-length", type=int, default=None, help="shortest document (default: length // 2)")
    parser.add_argument("--tile", type=int, default=4096, help="vocabulary tile of the new path")
    parser.add_argument("--rows", type=int, default=None,
                        help="packed rows per tile of the new path (default: max_pool_logits' own, 512 on a CPU)")
    parser.add_argument("--chunk", type=int, default=16, help="documents per chunk of the naive path")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; the best of each is kept")
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--backward", action="store_true", help="time forward + backward instead of inference")
    parser.add_argument("--k", type=int, default=384,
                        help="with --backward: Eq. 11's top-k before the loss, as fine-tuning does (0: every entry)")
    parser.add_argument("--bf16", action="store_true", help="under bf16 autocast (the chain's default on bf16 CPUs)")
    parser.add_argument("--packed", action="store_true",
                        help="the new path's decoder pre-packed for oneDNN (PackedLinear), as --compile encodes")
    args = parser.parse_args(argv)
    args.min_length = args.length // 2 if args.min_length is None else args.min_length
    if not 2 <= args.min_length <= args.length:
        parser.error(f"--min-length must be between 2 and --length ({args.length}), got {args.min_length}")
    import contextlib

    from retromae_ir.encode.representation import CPU_ROWS, max_pool_logits, max_pool_logits_naive, top_k

    torch.set_num_threads(args.threads)
    head, hidden, mask = build(args)
    tiled_head = head
    if args.packed:
        if args.backward:
            parser.error("--packed is inference only (PackedLinear has no gradient)")
        import copy

        from retromae_ir.encode.packed_linear import PackedLinear

        tiled_head = copy.deepcopy(head)
        tiled_head.predictions.decoder = PackedLinear.of(head.predictions.decoder)
    systems = {"naive": lambda h: max_pool_logits_naive(head, h, mask, chunk=args.chunk),
               "packed+tiled": lambda h: max_pool_logits(tiled_head, h, mask, rows=args.rows, vocab_tile=args.tile)}

    precision = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()

    def run(pool):
        with precision:
            if not args.backward:
                with torch.inference_mode():
                    return pool(hidden).float()
            leaf = hidden.clone().requires_grad_(True)
            out = pool(leaf)
            top_k(torch.log1p(torch.relu(out.float())), args.k or None).sum().backward()
            return out.detach().float()

    best, outputs = {name: float("inf") for name in systems}, {}
    for name, pool in systems.items():  # warm-up
        outputs[name] = run(pool)
    for _ in range(args.rounds):
        for name, pool in systems.items():
            start = time.perf_counter()
            run(pool)
            best[name] = min(best[name], time.perf_counter() - start)
    finite = torch.isfinite(outputs["naive"])
    results = {"batch": args.batch, "length": args.length, "ordinary_tokens": int(mask.sum()),
               "positions": args.batch * args.length, "tile": args.tile, "rows": args.rows or CPU_ROWS,
               "threads": args.threads,
               "backward": args.backward, "k": args.k if args.backward else None, "bf16": args.bf16,
               "packed_decoder": args.packed,
               **{f"{name}_ms_per_batch": 1000 * seconds for name, seconds in best.items()},
               "speedup_naive_over_new": best["naive"] / best["packed+tiled"],
               "max_abs_difference": float((outputs["naive"] - outputs["packed+tiled"])[finite].abs().max()),
               "same_minus_inf": bool(torch.equal(finite, torch.isfinite(outputs["packed+tiled"])))}
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
