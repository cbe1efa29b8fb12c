"""--compile kernels against eager fp32 on real text: the first 300 scifact documents, both cards (minilm-cls:
last layer trimmed to [CLS]; dupmae-minilm: every row, its OT head on top). Prints the lowest dense cosine, the
largest absolute difference, and for DupMAE how many documents keep the same top-k term set.

    .venv/bin/python runs/compile-kernels/agreement.py > runs/compile-kernels/agreement.log 2>&1
"""
import json
import logging
from pathlib import Path

import numpy as np
import torch

from retromae_ir.encode import EncoderModel

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def main() -> None:
    logging.disable(logging.WARNING)
    torch.set_num_threads(2)
    rows = [json.loads(line) for line, _ in zip(CORPUS.open(), range(300))]
    texts = [f"{row['title']} {row['text']}" for row in rows]
    for card in ("minilm-cls", "dupmae-minilm"):
        eager = EncoderModel.from_card(card, device="cpu", bf16=False).encode_passage(texts)
        ours = EncoderModel.from_card(card, device="cpu", bf16=False).compile_backbone("kernels").encode_passage(texts)
        a, b = eager.dense, ours.dense
        cosine = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))
        print(f"{card}: {len(texts)} documents, dense: lowest cosine {cosine.min():.8f}, "
              f"largest absolute difference {np.abs(a - b).max():.2e}")
        if eager.sparse is not None:
            same = sum(set(eager.sparse[i].indices) == set(ours.sparse[i].indices) for i in range(len(texts)))
            difference = abs(eager.sparse - ours.sparse).max()
            print(f"{card}: sparse: the same top-k term set for {same} of {len(texts)} documents, "
                  f"largest absolute weight difference {difference:.2e}")


if __name__ == "__main__":
    main()
