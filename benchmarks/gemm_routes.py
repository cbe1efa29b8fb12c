"""fp32 GEMM speed of each route PyTorch has on this CPU, at the shapes the encoders run.

    .venv/bin/python benchmarks/gemm_routes.py --threads 2

Routes: ``F.linear`` (MKL's sgemm), a frozen ``torch.compile``d ``nn.Linear`` (``FrozenCompiled``: inductor
pre-packs the weight for oneDNN when the batch is symbolic), and :class:`retromae_ir.encode.base.PackedLinear`
(oneDNN with a pre-packed weight, no compilation). Shapes: a square 2048 product, MiniLM's attention projection and
FFN over 64 x 256 tokens, and DupMAE's decoder over 137 packed rows (``max_pool_logits``' tile for another decoder).
Timed as the encode benchmark's ceiling is (``encode_search.gflops``: best of three rounds of about ``--seconds``
each, after an untimed call); GFLOP/s = 2 M K N / seconds.
"""
from __future__ import annotations

import argparse
import json

import torch

SHAPES = {"square 2048": (2048, 2048, 2048), "attention projection": (16384, 384, 384),
          "FFN in": (16384, 384, 1536), "FFN out": (16384, 1536, 384), "DupMAE decoder": (137, 384, 30522)}


def main(argv=None) -> int:
    from encode_search import gflops  # benchmarks/ is the script's own folder, first on sys.path

    from retromae_ir.encode.base import FrozenCompiled, PackedLinear

    parser = argparse.ArgumentParser(prog="benchmarks/gemm_routes.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of each timed round")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = ["| shape (M x K x N) | F.linear (MKL) | frozen torch.compile (oneDNN) | PackedLinear (oneDNN) |",
            "| --- | --- | --- | --- |"]
    results = {}
    with torch.no_grad():
        for name, (m, k, n) in SHAPES.items():
            x, linear = torch.randn(m, k), torch.nn.Linear(k, n).eval()
            flops = 2 * m * k * n
            compiled, packed = FrozenCompiled(linear), PackedLinear(linear)
            results[name] = {route: gflops(lambda: call(x), flops, "cpu", args.seconds)
                             for route, call in (("F.linear", linear), ("frozen torch.compile", compiled),
                                                 ("PackedLinear", packed))}
            rows.append(f"| {name} ({m} x {k} x {n}) | " + " | ".join(f"{v:.0f}" for v in results[name].values())
                        + " |")
            print(rows[-1], flush=True)
    print(json.dumps({"threads": args.threads, "gflops": results}))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
