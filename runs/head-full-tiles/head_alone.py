"""The OT head alone (``max_pool_logits``: transform, packed decoder tiles, max per document) on random hidden
states of four batch shapes, as GFLOP/s and a fraction of the fp32 ceiling measured in the same process; run under
the code before and after full-height row tiles (``run.sh``) to compare them.

    PYTHONPATH=/tmp/old_rir .venv/bin/python runs/head-full-tiles/head_alone.py    # the code before
    .venv/bin/python runs/head-full-tiles/head_alone.py                            # this checkout
    .venv/bin/python runs/head-full-tiles/head_alone.py --rows 512                 # another row tile
"""
import argparse
import sys
from pathlib import Path

import torch
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from encode_search import gflops  # noqa: E402

from retromae_ir.encode.packed_linear import PackedLinear  # noqa: E402
from retromae_ir.encode.representation import max_pool_logits  # noqa: E402

CASES = {"10 x 256 tokens": [256] * 10, "16 x 150-165 tokens": list(range(150, 166)),
         "12 x 200-244 tokens": list(range(200, 240, 4)) + [230, 235], "40 x 60 tokens": [60] * 40}


def batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Random hidden states of documents of ``lengths`` tokens (with [CLS] and [SEP]) and their ordinary-token mask."""
    hidden = torch.randn(len(lengths), max(lengths), 384)
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.bool)
    for row, length in enumerate(lengths):
        mask[row, 1:length - 1] = True
    return hidden, mask


def main() -> None:
    parser = argparse.ArgumentParser(prog="runs/head-full-tiles/head_alone.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=None, help="packed rows a tile (default: the code's CPU_ROWS)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    head = BertOnlyMLMHead(BertConfig(hidden_size=384, vocab_size=30522)).eval()
    head.predictions.decoder = PackedLinear.of(head.predictions.decoder)  # as DupMAEEncoderModel packs them
    head.predictions.transform.dense = PackedLinear.of(head.predictions.transform.dense)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    ceiling = gflops(lambda: a @ b, 2 * 2048 ** 3, "cpu", 0.5)
    print(f"code: {Path(sys.modules['retromae_ir'].__file__).parents[1]}; rows {args.rows or 'default'}; "
          f"fp32 ceiling {ceiling:.1f} GFLOP/s")
    print("| batch (tokens with [CLS] and [SEP]) | GFLOP/s | of the ceiling |\n| --- | --- | --- |")
    with torch.inference_mode():
        for name, lengths in CASES.items():
            hidden, mask = batch(lengths)
            flops = 2 * (384 * 384 + 384 * 30522) * int(mask.sum())
            speed = gflops(lambda: max_pool_logits(head, hidden, mask, rows=args.rows), flops, "cpu", 0.5)
            print(f"| {name} | {speed:.0f} | {speed / ceiling:.2f} |", flush=True)


if __name__ == "__main__":
    main()
