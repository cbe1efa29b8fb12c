"""Vectors of --compile openvino against eager fp32 (and --compile inductor against eager, for scale): dupmae-minilm
and minilm-cls, 500 scifact documents, 2 threads.

    .venv/bin/python runs/encode-openvino/agreement.py > runs/encode-openvino/agreement.jsonl

Prints one JSON line per comparison: smallest dense cosine, largest dense and OT weight differences, the share of
documents whose top-k OT term sets are identical, and for each other document the terms where they differ."""
import json
from pathlib import Path

import numpy as np
import torch

CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout


def differing(a, b, doc: int) -> dict:
    """Where two top-k rows disagree: the terms only one side kept, with their weights, and each side's smallest
    kept weight (a tie at the k-th place shows as equal weights)."""
    wa, wb = dict(zip(a.indices.tolist(), a.data.tolist())), dict(zip(b.indices.tolist(), b.data.tolist()))
    return {"doc": doc, "only_eager": {t: wa[t] for t in wa.keys() - wb.keys()},
            "only_other": {t: wb[t] for t in wb.keys() - wa.keys()},
            "kth_weight_eager": min(wa.values()), "kth_weight_other": min(wb.values())}


def main():
    from retromae_ir.encode.base import EncoderModel

    torch.set_num_threads(2)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, open(CORPUS))][:500]
    for card in ("dupmae-minilm", "minilm-cls"):
        eager = EncoderModel.from_card(card, device="cpu", bf16=False).encode_passage(texts)
        for backend in ("inductor", "openvino"):
            other = EncoderModel.from_card(card, device="cpu", bf16=False).compile_backbone(backend)
            b = other.encode_passage(texts)
            cos = (eager.dense * b.dense).sum(1) / np.linalg.norm(eager.dense, axis=1) / np.linalg.norm(b.dense, axis=1)
            row = {"card": card, "comparison": f"--compile {backend} vs eager fp32", "docs": len(texts),
                   "dense_cosine_min": float(cos.min()), "dense_max_abs_diff": float(abs(eager.dense - b.dense).max())}
            if eager.sparse is not None:
                same = [set(eager.sparse[i].indices) == set(b.sparse[i].indices) for i in range(len(texts))]
                row.update(identical_topk_sets=float(np.mean(same)),
                           sparse_max_abs_diff=float(abs(eager.sparse - b.sparse).max()),
                           differing=[differing(eager.sparse[i], b.sparse[i], i) for i in range(len(texts))
                                      if not same[i]])
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
