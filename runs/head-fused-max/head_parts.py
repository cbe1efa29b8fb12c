"""What a max fused into the OT head's products could save: the head (``max_pool_logits``) against its parts, on
random hidden states of four batch shapes, in one process with the fp32 ceiling (GFLOP/s by the head's count).

    .venv/bin/python runs/head-fused-max/head_parts.py      # bash runs/head-fused-max/run.sh: twice, logged

Parts: the transform (dense, GELU, LayerNorm) on the packed rows; the decoder's packed 4,096-column tiles over the
same 256-row tiles ``max_pool_logits`` forms, logits written and dropped (what a fused kernel would still run at
oneDNN's speed); the rest of the head's time is the ``amax`` reductions, the row gather and Python.
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "head-full-tiles"))
from head_alone import CASES, batch  # noqa: E402

from retromae_ir.encode.packed_linear import PackedLinear  # noqa: E402
from retromae_ir.encode.representation import CPU_ROWS, max_pool_logits, row_tiles  # noqa: E402


def best_seconds(call, rounds: int = 5, minimum: float = 0.3) -> float:
    """Fastest of ``rounds`` rounds (each repeats ``call`` for about ``minimum`` s), per call."""
    call()
    start = time.perf_counter()
    call()
    repeats = max(1, int(minimum / (time.perf_counter() - start)))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(prog="runs/head-fused-max/head_parts.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    head = BertOnlyMLMHead(BertConfig(hidden_size=384, vocab_size=30522)).eval()
    head.predictions.decoder = PackedLinear.of(head.predictions.decoder)  # as DupMAEEncoderModel packs them
    head.predictions.transform.dense = PackedLinear.of(head.predictions.transform.dense)
    transform, tiles = head.predictions.transform, head.predictions.decoder.column_tiles(4096)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    ceiling = max(2 * 2048 ** 3 / best_seconds(lambda: a @ b) / 1e9 for _ in range(2))
    print(f"fp32 ceiling {ceiling:.1f} GFLOP/s (MKL, 2048^3, best of two)")
    print("| batch | head GFLOP/s | of the ceiling | transform | decoder products | amax, gather, rest "
          "| head with the rest fused away: of the ceiling |\n| --- | --- | --- | --- | --- | --- | --- |")
    with torch.inference_mode():
        for name, lengths in CASES.items():
            hidden, mask = batch(lengths)
            packed = hidden[mask]
            rows = transform(packed)
            spans = [(begin, end) for begin, end, _ in row_tiles(mask.sum(1).tolist(), CPU_ROWS)]

            def products():
                for begin, end in spans:
                    for tile in tiles:
                        tile(rows[begin:end])

            flops = 2 * (384 * 384 + 384 * 30522) * len(packed)
            whole = best_seconds(lambda: max_pool_logits(head, hidden, mask))
            part_transform = best_seconds(lambda: transform(packed))
            part_products = best_seconds(products)
            rest = whole - part_transform - part_products
            fused = flops / (whole - rest) / 1e9
            print(f"| {name} | {flops / whole / 1e9:.0f} | {flops / whole / 1e9 / ceiling:.2f} "
                  f"| {part_transform / whole:.1%} | {part_products / whole:.1%} | {rest / whole:.1%} "
                  f"| {fused / ceiling:.2f} |", flush=True)


if __name__ == "__main__":
    main()
