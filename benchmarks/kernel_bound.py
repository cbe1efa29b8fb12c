"""The fastest an encoder pass can be on this CPU when built from the library kernels it runs: each batch's
products, attention and (DupMAE) max-pooled OT head, timed alone on random inputs of that batch's real shapes, with
nothing between them (no LayerNorm, GELU, residual adds, transposes, tokenisation or Python). Then the encoder itself
on the same documents in the same run, and both as fractions of the fp32 matmul ceiling measured in that run (before
and after; the higher of the two).

Why: issue #12 asks a dense pass for >= 90% of the ceiling and a DupMAE pass for >= 85%. If the kernels alone,
summed, stay below a target, no graph, fusion or compiler over those kernels reaches it; only faster kernels do.

    .venv/bin/python benchmarks/kernel_bound.py --encoder minilm-cls --compile openvino
    .venv/bin/python benchmarks/kernel_bound.py --encoder dupmae-minilm --compile openvino

Batches are those ``EncoderModel.encode`` forms (longest first, at most 64 documents and the token cap a pass).
Per batch and kernel class, each route is timed (best of ``--repeats`` after one untimed call) and the faster kept:
products by MKL (``F.linear``) and by oneDNN with a pre-packed weight (``PackedLinear``), attention by PyTorch's fused
``scaled_dot_product_attention`` (with the padding mask; none when a batch has no padding) and by two batched
products around a softmax. The OT head runs the encoder's own ``max_pool_logits`` on random hidden states, with its
decoder packed when ``--compile`` packs it (the model is compiled first). GFLOP/s count the work on real tokens
(``encode_search.model_flops_per_doc``, the count of every encode benchmark here); padded rows cost time but count
nothing.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from retromae_ir.cli import add_compile_argument

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def best_seconds(call, repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def linear_seconds(rows: int, fan_in: int, fan_out: int, repeats: int) -> dict[str, float]:
    """Seconds of a [rows, fan_in] x [fan_in, fan_out] product (with bias) by each CPU route."""
    from retromae_ir.encode.packed_linear import PackedLinear

    x, linear = torch.randn(rows, fan_in), torch.nn.Linear(fan_in, fan_out).eval()
    packed = PackedLinear.of(linear)
    return {"F.linear": best_seconds(lambda: linear(x), repeats),
            "PackedLinear": best_seconds(lambda: packed(x), repeats)}


def attention_seconds(lengths: list[int], queries: int | None, heads: int, head_dim: int,
                      repeats: int) -> dict[str, float]:
    """Seconds of one layer's attention over a padded batch of ``lengths`` (``queries``: only that many query rows
    a document, the [CLS]-only last layer), by each route."""
    batch, longest = len(lengths), max(lengths)
    q = torch.randn(batch, heads, queries or longest, head_dim)
    k, v = torch.randn(batch, heads, longest, head_dim), torch.randn(batch, heads, longest, head_dim)
    mask = None
    if min(lengths) < longest:
        mask = (torch.arange(longest)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]
    scale = head_dim ** -0.5

    def products():
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.matmul(scores.softmax(-1), v)

    return {"sdpa": best_seconds(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), repeats),
            "matmul + softmax": best_seconds(products, repeats)}


def head_seconds(model, lengths: list[int], ordinary: list[int], repeats: int) -> dict[str, float]:
    """Seconds of the encoder's own max-pooled OT head over a batch's ordinary tokens (random hidden states)."""
    from retromae_ir.encode.representation import max_pool_logits

    longest, hidden_size = max(lengths), model.backbone_config.hidden_size
    hidden = torch.randn(len(lengths), longest, hidden_size)
    mask = torch.zeros(len(lengths), longest, dtype=torch.bool)
    for row, count in enumerate(ordinary):
        mask[row, 1:1 + count] = True
    return {"max_pool_logits": best_seconds(lambda: max_pool_logits(model.lm_head, hidden, mask), repeats)}


def batch_kernels(model, lengths: list[int], ordinary: list[int], repeats: int) -> dict[str, tuple[float, float]]:
    """Per kernel class: (FLOPs on real tokens, seconds of the fastest route) for one batch."""
    config = model.backbone_config
    d, f = config.hidden_size, config.intermediate_size
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    batch, padded, tokens = len(lengths), len(lengths) * max(lengths), sum(lengths)
    attention_flops = sum(4 * n * n * d for n in lengths)
    full_layers = layers - 1 if model.first_token_last_layer else layers
    out = defaultdict(lambda: [0.0, 0.0])

    def add(name, flops, seconds):
        out[name][0] += flops
        out[name][1] += min(seconds.values())

    for name, fan_in, fan_out, count in (("Q, K, V, O (d x d)", d, d, 4), ("FFN in", d, f, 1), ("FFN out", f, d, 1)):
        add(name, full_layers * count * 2 * tokens * fan_in * fan_out,
            {route: full_layers * count * s for route, s in linear_seconds(padded, fan_in, fan_out, repeats).items()})
    add("attention", full_layers * attention_flops,
        {route: full_layers * s for route, s in attention_seconds(lengths, None, heads, d // heads, repeats).items()})
    if model.first_token_last_layer:  # keys and values of every token, the rest for the first row of each
        add("Q, K, V, O (d x d)", 2 * 2 * tokens * d * d,
            {route: 2 * s for route, s in linear_seconds(padded, d, d, repeats).items()})
        first_rows = (("Q, K, V, O (d x d)", d, d, 2), ("FFN in", d, f, 1), ("FFN out", f, d, 1))
        for name, fan_in, fan_out, count in first_rows:
            add(name, count * 2 * batch * fan_in * fan_out,
                {route: count * s for route, s in linear_seconds(batch, fan_in, fan_out, repeats).items()})
        add("attention", sum(4 * n * d for n in lengths), attention_seconds(lengths, 1, heads, d // heads, repeats))
    if hasattr(model, "lm_head"):
        add("OT head (transform + decoder, max-pooled)", 2 * (d * d + d * config.vocab_size) * sum(ordinary),
            head_seconds(model, lengths, ordinary, repeats))
    return {name: tuple(value) for name, value in out.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/kernel_bound.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="minilm-cls", help="an encoder card (default: minilm-cls)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--docs", type=int, default=500, help="the first DOCS documents of --corpus")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timed calls a kernel, after an untimed one")
    add_compile_argument(parser)  # EncoderModel.compile_backbone, for the encoder's own pass
    args = parser.parse_args(argv)
    if args.docs < 1 or args.repeats < 1:
        parser.error("--docs and --repeats must be at least 1")
    from encode_search import matmul_ceiling, model_flops_per_doc, token_counts  # benchmarks/ is on sys.path

    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.batching import length_batches

    logging.disable(logging.WARNING)  # the packaged MiniLM's missing-MLM-head report
    torch.set_num_threads(args.threads)
    ceilings = [matmul_ceiling(args.threads, dtypes=("fp32",))["fp32"]]  # again at the end: a VM's clock drifts
    texts = [f"{row['title']} {row['text']}" for _, row in zip(range(args.docs), map(json.loads, args.corpus.open()))]
    model = EncoderModel.from_card(args.encoder, device="cpu")
    lengths, ordinary = token_counts(model.tokenizer, texts, model.card.max_passage_length)
    work = float(model_flops_per_doc(model.backbone_config, lengths, hasattr(model, "lm_head"),
                                     ordinary if hasattr(model, "lm_head") else None,
                                     first_token_last_layer=model.first_token_last_layer).sum())
    if args.compile:  # before the kernels: it also packs what runs outside the transformer (DupMAE's OT head)
        model.compile_backbone(args.compile)
    classes = defaultdict(lambda: [0.0, 0.0])
    with torch.inference_mode():
        batches = list(length_batches(lengths.tolist(), 64, model.max_batch_tokens))
        for rows in tqdm(batches, desc="kernels", unit="batch"):
            for name, (flops, seconds) in batch_kernels(model, lengths[rows].tolist(), ordinary[rows].tolist(),
                                                        args.repeats).items():
                classes[name][0] += flops
                classes[name][1] += seconds
    kernel_seconds = sum(seconds for _, seconds in classes.values())
    counted = sum(flops for flops, _ in classes.values())
    model.encode_passage(texts[-64:])  # compilation, warm-up
    encoder_seconds = min(_timed(model, texts) for _ in range(args.repeats))
    ceilings.append(matmul_ceiling(args.threads, dtypes=("fp32",))["fp32"])
    ceiling = max(ceilings)  # fractions of the higher: never flattered by a slow moment
    compiled = f" --compile {args.compile}" if args.compile else ""
    print(f"{args.encoder}, first {len(texts)} documents of {args.corpus.parent.name} ({int(lengths.sum())} tokens), "
          f"fp32, {args.threads} threads, {model.max_batch_tokens} tokens a pass; fp32 ceiling {ceiling:.1f} GFLOP/s "
          f"(measured {ceilings[0]:.1f} before, {ceilings[1]:.1f} after)")
    print(f"counted FLOPs: kernels {counted / 1e9:.1f} G, encode benchmarks' count {work / 1e9:.1f} G")
    print("\n| kernel class | GFLOP | s (fastest route) | GFLOP/s | of the ceiling | share of kernel time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (flops, seconds) in classes.items():
        print(f"| {name} | {flops / 1e9:.1f} | {seconds:.3f} | {flops / seconds / 1e9:.0f} | "
              f"{flops / seconds / 1e9 / ceiling:.2f} | {seconds / kernel_seconds:.1%} |")
    print("\n| pass | s | docs/s | GFLOP/s | of the ceiling |")
    print("| --- | --- | --- | --- | --- |")
    for name, seconds in (("kernels alone, summed (the bound)", kernel_seconds),
                          (f"the encoder{compiled}", encoder_seconds)):
        print(f"| {name} | {seconds:.2f} | {len(texts) / seconds:.1f} | {work / seconds / 1e9:.0f} | "
              f"{work / seconds / 1e9 / ceiling:.2f} |")
    return 0


def _timed(model, texts) -> float:
    start = time.perf_counter()
    model.encode_passage(texts)
    return time.perf_counter() - start


if __name__ == "__main__":
    raise SystemExit(main())
