"""DupMAE's decoder tile ([rows, 384] x [384, 4096], the OT head's product) on each route this CPU has: MKL's
F.linear, oneDNN's PackedLinear (what the head runs on now) and OpenVINO's CPU plugin (not used by the head yet),
beside MKL's square product (the ceiling), alternating routes over three rounds; GFLOP/s.

    .venv/bin/python runs/head-openvino-probe/decoder_routes.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from encode_search import gflops, openvino_linear  # noqa: E402

from retromae_ir.encode.packed_linear import PackedLinear  # noqa: E402

torch.set_num_threads(2)
torch.manual_seed(0)
linear = torch.nn.Linear(384, 4096).eval()
packed = PackedLinear.of(linear)
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
print("| round | rows | MKL F.linear | oneDNN PackedLinear | OpenVINO | square a @ b |")
print("| --- | --- | --- | --- | --- | --- |")
with torch.inference_mode():
    for round_ in range(3):
        for rows in (256, 1024):
            x = torch.randn(rows, 384)
            flops = 2 * rows * 384 * 4096
            routes = {"mkl": lambda: torch.nn.functional.linear(x, linear.weight, linear.bias),
                      "onednn": lambda: packed(x), "openvino": openvino_linear(linear, x),
                      "square": lambda: a @ b}
            speed = {name: gflops(run, 2 * 2048 ** 3 if name == "square" else flops, "cpu", 0.3)
                     for name, run in routes.items()}
            print(f"| {round_} | {rows} | {speed['mkl']:.0f} | {speed['onednn']:.0f} | {speed['openvino']:.0f} | "
                  f"{speed['square']:.0f} |", flush=True)
