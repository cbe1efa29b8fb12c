"""fp32 GEMM speed of each route PyTorch has on this CPU, at the encoders' shapes (a batch of 64 x 256 tokens,
as before the token cap of :mod:`retromae_ir.encode.batching`, and DupMAE's decoder).

    .venv/bin/python benchmarks/gemm_routes.py --threads 2
    .venv/bin/python benchmarks/gemm_routes.py --threads 2 --tokens 2048 4096 5120 6144 8192 16384
    .venv/bin/python benchmarks/gemm_routes.py --threads 2 --attention
    LD_PRELOAD=$(.venv/bin/python -m retromae_ir.mkl_shim) .venv/bin/python benchmarks/gemm_routes.py --attention

Routes: ``F.linear`` (MKL's sgemm), a frozen ``torch.compile``d ``nn.Linear`` (``FrozenCompiled``: inductor
pre-packs the weight for oneDNN when the batch is symbolic), and :class:`retromae_ir.encode.packed_linear.PackedLinear`
(oneDNN with a pre-packed weight, no compilation). Shapes: a square 2048 product, MiniLM's attention projection and
FFN over 64 x 256 tokens, and DupMAE's decoder over ``CPU_ROWS`` packed rows (``max_pool_logits``' CPU tile; logs
before 2026-11-25 timed its earlier tile of 137 rows).
Timed as the encode benchmark's ceiling is (``encode_search.gflops``: best of three rounds of about ``--seconds``
each, after an untimed call); GFLOP/s = 2 M K N / seconds.

``--tokens`` instead times MiniLM's FFN-in product (384 -> 1536, ``PackedLinear``) at each number of tokens, with
the size of its output beside the CPU's last-level cache: the measurement behind the encoders' token cap per
forward pass (:mod:`retromae_ir.encode.batching`).

``--attention`` times PyTorch's fused CPU attention (``scaled_dot_product_attention``, MiniLM's 12 heads of 32,
a padding mask) and MKL's square product, the two that run on MKL, and says whether the process runs with
:mod:`retromae_ir.mkl_shim` (MKL's AVX-512 kernels on AMD CPUs).
"""
from __future__ import annotations

import argparse
import json

import torch

from retromae_ir.cli import Repeatable
from retromae_ir.encode.representation import CPU_ROWS

SHAPES = {"square 2048": (2048, 2048, 2048), "attention projection": (16384, 384, 384),
          "FFN in": (16384, 384, 1536), "FFN out": (16384, 1536, 384), "DupMAE decoder": (CPU_ROWS, 384, 30522)}


def main(argv=None) -> int:
    from encode_search import gflops  # benchmarks/ is the script's own folder, first on sys.path

    from retromae_ir.encode.base import FrozenCompiled
    from retromae_ir.encode.packed_linear import PackedLinear

    parser = argparse.ArgumentParser(prog="benchmarks/gemm_routes.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of each timed round")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--tokens", type=int, nargs="+", action=Repeatable,
                      help="time FFN-in at these token counts instead")
    mode.add_argument("--attention", action="store_true", help="time fused attention and MKL's product instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.tokens:
        return token_sweep(args.tokens, args.seconds, gflops, PackedLinear.of)
    if args.attention:
        return attention_routes(args.seconds, gflops)
    rows = ["| shape (M x K x N) | F.linear (MKL) | frozen torch.compile (oneDNN) | PackedLinear (oneDNN) |",
            "| --- | --- | --- | --- |"]
    results = {}
    with torch.no_grad():
        for name, (m, k, n) in SHAPES.items():
            x, linear = torch.randn(m, k), torch.nn.Linear(k, n).eval()
            flops = 2 * m * k * n
            compiled, packed = FrozenCompiled(linear), PackedLinear.of(linear)
            results[name] = {route: gflops(lambda: call(x), flops, "cpu", args.seconds)
                             for route, call in (("F.linear", linear), ("frozen torch.compile", compiled),
                                                 ("PackedLinear", packed))}
            rows.append(f"| {name} ({m} x {k} x {n}) | " + " | ".join(f"{v:.0f}" for v in results[name].values())
                        + " |")
            print(rows[-1], flush=True)
    print(json.dumps({"threads": args.threads, "gflops": results}))
    print("\n".join(rows))
    return 0


def token_sweep(token_counts: list[int], seconds: float, gflops, packed_linear) -> int:
    """FFN-in GFLOP/s by the number of tokens in the product, against the last-level cache."""
    from retromae_ir.hardware import last_level_cache_bytes

    k, n = SHAPES["FFN in"][1:]
    cache = last_level_cache_bytes()
    print(f"last-level cache: {'unknown' if cache is None else f'{cache / 2 ** 20:.0f} MiB'}")
    rows = ["| tokens (M) | output (MiB) | PackedLinear GFLOP/s |", "| --- | --- | --- |"]
    with torch.no_grad():
        linear = packed_linear(torch.nn.Linear(k, n).eval())
        for m in token_counts:
            x = torch.randn(m, k)
            speed = gflops(lambda: linear(x), 2 * m * k * n, "cpu", seconds)
            rows.append(f"| {m} | {m * n * 4 / 2 ** 20:.0f} | {speed:.0f} |")
            print(rows[-1], flush=True)
    print("\n".join(rows))
    return 0


def attention_routes(seconds: float, gflops) -> int:
    """GFLOP/s of fused attention at MiniLM's shapes (4 b h L^2 d FLOPs) and of MKL's 2048 product."""
    from retromae_ir.mkl_shim import loaded

    print(f"retromae_ir.mkl_shim loaded: {loaded()}")
    rows = ["| product | GFLOP/s |", "| --- | --- |"]
    with torch.no_grad():
        a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
        rows.append(f"| a @ b (MKL), 2048 x 2048 x 2048 | {gflops(lambda: a @ b, 2 * 2048 ** 3, 'cpu', seconds):.0f} |")
        print(rows[-1], flush=True)
        for batch, length in ((16, 256), (16, 128)):
            q, k, v = (torch.randn(batch, 12, length, 32) for _ in range(3))
            mask = torch.zeros(batch, 1, length, length)
            speed = gflops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                           4 * batch * 12 * length ** 2 * 32, "cpu", seconds)
            rows.append(f"| scaled_dot_product_attention, {batch} x 12 heads x {length} tokens x 32 | {speed:.0f} |")
            print(rows[-1], flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
