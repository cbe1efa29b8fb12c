"""DupMAE's OT head alone on its two CPU routes: the fused AVX2 kernel (``retromae_ir.encode.fused_max_pool``)
against oneDNN's packed 256-row x 4,096-entry tiles with an ``amax`` per document, as GFLOP/s and a fraction of
the fp32 ceiling measured in the same process, before and after (the highest of every route, as
``encode_search.py`` takes it). Random hidden states of four batch shapes through MiniLM's head shape (384 ->
30,522), packed as ``DupMAEEncoderModel`` packs it; the routes alternate, ``--rounds`` times each, best kept; the
head's count is 2 (384 x 384 + 384 x 30,522) a token. Also prints how far the two routes' pooled logits are apart
and whether each document's top 384 entries are the same set.

    .venv/bin/python benchmarks/ot_kernel.py --threads 2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_search import gflops, matmul_ceiling  # noqa: E402

from retromae_ir.encode import fused_max_pool  # noqa: E402
from retromae_ir.encode.packed_linear import PackedLinear  # noqa: E402
from retromae_ir.encode.representation import CPU_ROWS, max_pool_logits  # noqa: E402

# tokens a document with [CLS] and [SEP]: scifact's cut documents, a mix of mid lengths, short passages
CASES = {"10 x 256 tokens": [256] * 10, "16 x 150-165 tokens": list(range(150, 166)),
         "12 x 200-244 tokens": list(range(200, 240, 4)) + [230, 235], "40 x 60 tokens": [60] * 40}


def batch(lengths: list[int], hidden_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    hidden = torch.randn(len(lengths), max(lengths), hidden_size)
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.bool)
    for row, length in enumerate(lengths):
        mask[row, 1:length - 1] = True
    return hidden, mask


def head(hidden_size: int, vocab: int):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertOnlyMLMHead

    module = BertOnlyMLMHead(BertConfig(hidden_size=hidden_size, vocab_size=vocab)).eval()
    module.predictions.decoder = PackedLinear.of(module.predictions.decoder)
    module.predictions.transform.dense = PackedLinear.of(module.predictions.transform.dense)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/ot_kernel.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two routes; the best is kept")
    parser.add_argument("--seconds", type=float, default=0.5, help="about how long each timing repeats its call")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if not fused_max_pool.chosen_here():
        print(f"the fused kernel does not run here (CPU capability {torch.backends.cpu.get_cpu_capability()}); "
              "see the log line above", file=sys.stderr)
        return 1
    ceilings = [matmul_ceiling(args.threads, dtypes=("fp32",))["fp32"]]
    module, hidden_size, vocab = head(384, 30522), 384, 30522
    routes = {"fused kernel": lambda h, m: max_pool_logits(module, h, m),
              "oneDNN tiles": lambda h, m: max_pool_logits(module, h, m, rows=CPU_ROWS)}
    results = []
    with torch.inference_mode():
        for name, lengths in CASES.items():
            hidden, mask = batch(lengths, hidden_size)
            flops = 2 * (hidden_size * hidden_size + hidden_size * vocab) * int(mask.sum())
            best = dict.fromkeys(routes, 0.0)
            for round_ in range(args.rounds):
                order = list(routes) if round_ % 2 == 0 else list(routes)[::-1]
                for route in order:
                    best[route] = max(best[route], gflops(lambda: routes[route](hidden, mask), flops, "cpu",
                                                          args.seconds))
            fused, tiled = (routes[route](hidden, mask) for route in routes)
            same_top = all(set(a.tolist()) == set(b.tolist())
                           for a, b in zip(fused.topk(384).indices, tiled.topk(384).indices))
            results.append((name, best, float((fused - tiled).abs().max()), same_top))
            print(f"{name}: {best}", file=sys.stderr, flush=True)
    ceilings.append(matmul_ceiling(args.threads, dtypes=("fp32",))["fp32"])
    ceiling = max(ceilings)
    print(f"fp32 ceiling {ceiling:.1f} GFLOP/s (the highest route, before {ceilings[0]:.1f}, after {ceilings[1]:.1f});"
          f" {args.threads} threads, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("| batch | fused kernel: GFLOP/s | of the ceiling | oneDNN tiles: GFLOP/s | of the ceiling | fused / tiles "
          "| largest difference | same top 384 |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, best, difference, same_top in results:
        fused, tiled = best["fused kernel"], best["oneDNN tiles"]
        print(f"| {name} | {fused:.1f} | {fused / ceiling:.2f} | {tiled:.1f} | {tiled / ceiling:.2f} "
              f"| {fused / tiled:.2f} | {difference:.1e} | {'yes' if same_top else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
