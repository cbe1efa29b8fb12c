"""Vectors of minilm-cls with its last layer trimmed to the first position (retromae_ir/encode/first_token.py), eager
and under both compile backends, against the full last layer, eager fp32: 500 scifact documents, 2 threads.

    .venv/bin/python runs/encode-first-token/agreement.py > runs/encode-first-token/agreement.jsonl

Prints one JSON line per comparison: smallest dense cosine and largest dense difference."""
import json
from pathlib import Path

import numpy as np
import torch

CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout


def main():
    from retromae_ir.encode import DenseEncoderModel, EncoderModel, load_card

    torch.set_num_threads(2)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, open(CORPUS))][:500]
    card = load_card("minilm-cls")
    full = DenseEncoderModel.from_checkpoint(card).eval()  # the path training takes: every layer in full
    assert not full.first_token_last_layer
    reference = full.encode_passage(texts)
    for backend in (None, "inductor", "openvino"):
        model = EncoderModel.from_card(card, device="cpu", bf16=False)
        assert model.first_token_last_layer
        dense = (model.compile_backbone(backend) if backend else model).encode_passage(texts).dense
        cos = (reference.dense * dense).sum(1) / np.linalg.norm(reference.dense, axis=1) / np.linalg.norm(dense, axis=1)
        print(json.dumps({"card": card.name, "docs": len(texts),
                          "comparison": f"first-token last layer{f' --compile {backend}' if backend else ''} vs "
                                        f"full last layer, eager fp32",
                          "dense_cosine_min": float(cos.min()),
                          "dense_max_abs_diff": float(abs(reference.dense - dense).max())}), flush=True)


if __name__ == "__main__":
    main()
