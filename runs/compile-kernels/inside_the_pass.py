"""Where `minilm-cls --compile kernels` spends a pass, and how fast its kernels run inside it: every product and
attention call timed during an encode of the first 300 scifact documents (after 50 untimed), GFLOP/s per kind
against MKL's square product measured before and after in the same process.

    .venv/bin/python runs/compile-kernels/inside_the_pass.py > runs/compile-kernels/inside-the-pass.log 2>&1
"""
import collections
import json
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from encode_search import gflops  # noqa: E402

from retromae_ir.encode import EncoderModel  # noqa: E402
from retromae_ir.encode import kernel_backbone as kb  # noqa: E402

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def main() -> None:
    logging.disable(logging.WARNING)
    torch.set_num_threads(2)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, CORPUS.open())][:300]
    square = torch.randn(2048, 2048)
    ceiling = [gflops(lambda: square @ square, 2 * 2048 ** 3, "cpu", 0.5)]
    model = EncoderModel.from_card("minilm-cls", device="cpu", bf16=False).compile_backbone("kernels")
    model.encode_passage(texts[:50])
    spent = collections.defaultdict(lambda: [0.0, 0.0])  # kind -> [seconds, flops]
    product, attend = kb.PackedProduct._run, kb.KernelLayer._attend

    def timed_product(self, x, out, *args):
        start = time.perf_counter()
        product(self, x, out, *args)
        kind = f"product {self.depth} -> {self.outputs}{'' if x.shape[0] > 100 else ' (first rows only)'}"
        spent[kind][0] += time.perf_counter() - start
        spent[kind][1] += 2 * x.shape[0] * self.depth * self.outputs

    def timed_attend(self, queries, keys, values, starts):
        start = time.perf_counter()
        context = attend(self, queries, keys, values, starts)
        lengths = (starts[1:] - starts[:-1]).double()
        rows = 1.0 if self.first_only else lengths
        spent["attention"][0] += time.perf_counter() - start
        spent["attention"][1] += float((4 * rows * lengths * self.head_size * self.heads).sum())
        return context

    kb.PackedProduct._run, kb.KernelLayer._attend = timed_product, timed_attend
    start = time.perf_counter()
    model.encode_passage(texts[50:])
    total = time.perf_counter() - start
    ceiling.append(gflops(lambda: square @ square, 2 * 2048 ** 3, "cpu", 0.5))
    top = max(ceiling)
    print(f"{len(texts) - 50} documents in {total:.2f} s; MKL's square product {ceiling[0]:.1f} before, "
          f"{ceiling[1]:.1f} after")
    print("| kind | seconds | share of the pass | GFLOP/s | of the higher MKL figure |")
    print("| --- | --- | --- | --- | --- |")
    for kind, (seconds, flops) in sorted(spent.items()):
        print(f"| {kind} | {seconds:.2f} | {seconds / total:.1%} | {flops / seconds / 1e9:.1f} | "
              f"{flops / seconds / 1e9 / top:.2f} |")
    rest = total - sum(seconds for seconds, _ in spent.values())
    print(f"| everything else (tokeniser, embeddings, padding, Python) | {rest:.2f} | {rest / total:.1%} | | |")


if __name__ == "__main__":
    main()
