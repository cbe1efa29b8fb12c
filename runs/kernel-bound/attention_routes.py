"""MiniLM's attention (12 heads of 32) by each route PyTorch offers on a CPU, at two batch shapes of the encoders'
capped passes, as GFLOP/s (4 b h L^2 d) and a fraction of the fp32 ceiling measured in the same process: fused
``scaled_dot_product_attention``, two batched products around a softmax, the two products alone (no softmax: what
the matmuls by themselves allow), and ``flex_attention`` compiled by inductor.

    .venv/bin/python runs/kernel-bound/attention_routes.py
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from encode_search import gflops  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    ceiling = gflops(lambda: a @ b, 2 * 2048 ** 3, "cpu", 0.5)
    flex = torch.compile(flex_attention, dynamic=False)
    print(f"fp32 ceiling {ceiling:.1f} GFLOP/s")
    print("| batch x heads x tokens x width | route | GFLOP/s | of the ceiling |\n| --- | --- | --- | --- |")
    with torch.no_grad():
        for batch, length in ((11, 248), (10, 256)):
            q, k, v = (torch.randn(batch, 12, length, 32) for _ in range(3))
            routes = {"scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v),
                      "matmul, softmax, matmul": lambda: torch.matmul((q @ k.transpose(-1, -2)).softmax(-1), v),
                      "the two matmuls alone": lambda: torch.matmul(q @ k.transpose(-1, -2), v),
                      "flex_attention (torch.compile)": lambda: flex(q, k, v)}
            for name, route in routes.items():
                speed = gflops(route, 4 * batch * 12 * length ** 2 * 32, "cpu", 0.5)
                print(f"| {batch} x 12 x {length} x 32 | {name} | {speed:.0f} | {speed / ceiling:.2f} |", flush=True)


if __name__ == "__main__":
    main()
