"""``--compile kernels``' kernels alone, against the library routes a user would otherwise run, in one process:
MiniLM's linear layers at a full pass's rows (2,730 tokens: the CPU token cap) on our kernel (plain, with GELU,
with the residual add and LayerNorm in its epilogue), MKL's ``F.linear`` and oneDNN's pre-packed product; and
attention over 12 heads of 32 for batches of three lengths, ours against PyTorch's fused
``scaled_dot_product_attention`` on the same (padding-free) documents. GFLOP/s, best of ``--rounds`` with the
routes alternating, and the fraction of the fp32 matmul ceiling (``encode_search.matmul_paths``, the highest route
measured before and after).

    .venv/bin/python benchmarks/bert_kernels.py --threads 2 > runs/compile-kernels/kernels.log 2>&1
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

ROWS = 2730  # tokens of a full pass (retromae_ir.encode.batching's cap for MiniLM)
LINEAR_SHAPES = {"Q, K, V (384 -> 1152)": (384, 1152), "attention output (384 -> 384)": (384, 384),
                 "FFN in (384 -> 1536)": (384, 1536), "FFN out (1536 -> 384)": (1536, 384)}
ATTENTION_BATCHES = {"12 x 227 tokens": (12, 227), "20 x 130 tokens": (20, 130), "40 x 60 tokens": (40, 60)}
HEADS, HEAD_SIZE = 12, 32


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/bert_kernels.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    from encode_search import matmul_paths  # benchmarks/ is on sys.path

    torch.set_num_threads(args.threads)
    routes = matmul_paths(args.threads, dtypes=("fp32",))["fp32"]
    cases = {**linear_cases(), **attention_cases()}
    best = {name: 0.0 for name in cases}
    for round_ in range(args.rounds):
        order = list(cases.items())
        for name, (run, flops) in order[::-1] if round_ % 2 else order:
            run()
            start = time.perf_counter()
            run()
            best[name] = max(best[name], flops / (time.perf_counter() - start) / 1e9)
    for route, gflops in matmul_paths(args.threads, dtypes=("fp32",))["fp32"].items():
        routes[route] = max(routes[route], gflops)
    ceiling = max(routes.values())
    print(json.dumps({"threads": args.threads, "fp32_matmul_routes_gflops": routes, "gflops": best}, indent=1))
    print(f"\n| kernel (fp32, {args.threads} threads) | GFLOP/s | of the ceiling ({ceiling:.1f}) |")
    print("| --- | --- | --- |")
    for name, gflops in best.items():
        print(f"| {name} | {gflops:.1f} | {gflops / ceiling:.2f} |")
    return 0


def linear_cases() -> dict:
    from retromae_ir.encode.kernel_backbone import PackedProduct, _norm
    from retromae_ir.encode.packed_linear import PackedLinear

    torch.manual_seed(0)
    cases = {}
    for label, (depth, width) in LINEAR_SHAPES.items():
        linear, x = torch.nn.Linear(depth, width), torch.randn(ROWS, depth)
        ours, packed, flops = PackedProduct(linear), PackedLinear.of(linear), 2 * ROWS * depth * width
        cases[f"{label}: ours"] = (lambda ours=ours, x=x: ours(x), flops)
        if width == 1536:
            cases[f"{label}: ours, GELU fused"] = (lambda ours=ours, x=x: ours(x, gelu=True), flops)
        if width == 384:
            out, norm = torch.randn(ROWS, width), _norm(torch.nn.LayerNorm(width))
            cases[f"{label}: ours, residual + LayerNorm fused"] = (
                lambda ours=ours, x=x, out=out, norm=norm: ours(x, out=out, residual_norm=norm), flops)
        cases[f"{label}: MKL F.linear"] = (lambda linear=linear, x=x: F.linear(x, linear.weight, linear.bias), flops)
        cases[f"{label}: oneDNN pre-packed"] = (lambda packed=packed, x=x: packed(x), flops)
    return cases


def attention_cases() -> dict:
    from types import SimpleNamespace

    from retromae_ir.encode.kernel_backbone import KernelLayer

    layer = SimpleNamespace(heads=HEADS, head_size=HEAD_SIZE, first_only=False)
    cases = {}
    for label, (documents, length) in ATTENTION_BATCHES.items():
        starts = torch.arange(documents + 1, dtype=torch.int64) * length
        queries, keys, values = (torch.randn(HEADS, documents * length, HEAD_SIZE) for _ in range(3))
        flops = documents * HEADS * 2 * 2 * length * length * HEAD_SIZE
        cases[f"attention, {label}: ours"] = (
            lambda q=queries, k=keys, v=values, s=starts: KernelLayer._attend(layer, q, k, v, s), flops)
        shaped = [t.view(HEADS, documents, length, HEAD_SIZE).transpose(0, 1) for t in (queries, keys, values)]
        cases[f"attention, {label}: PyTorch scaled_dot_product_attention"] = (
            lambda q=shaped[0], k=shaped[1], v=shaped[2]: F.scaled_dot_product_attention(q, k, v), flops)
    return cases


if __name__ == "__main__":
    raise SystemExit(main())
