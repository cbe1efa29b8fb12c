"""--compile openvino under bf16 (what `--dtype auto` picks on a CPU with avx512_bf16): dupmae-minilm on 500 scifact
documents, bf16 eager, bf16 --compile inductor and bf16 --compile openvino, each against eager fp32 (dense cosine,
top-k overlap), with docs/s (one pass after a warm-up batch; 2 threads).

    .venv/bin/python runs/encode-openvino/bf16.py > runs/encode-openvino/bf16.jsonl
"""
import json, time, numpy as np, torch
from pathlib import Path
from retromae_ir.encode.base import EncoderModel
CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout
torch.set_num_threads(2)
texts = [f"{r['title']} {r['text']}" for r in map(json.loads, open(CORPUS))][:500]
ref = EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False).encode_passage(texts)
for name, backend in [("bf16 eager", None), ("bf16 inductor", "inductor"), ("bf16 openvino", "openvino")]:
    m = EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=True)
    if backend: m.compile_backbone(backend)
    m.encode_passage(texts[-64:])
    t = time.perf_counter(); e = m.encode_passage(texts); dt = time.perf_counter() - t
    cos = (ref.dense * e.dense).sum(1) / np.linalg.norm(ref.dense, axis=1) / np.linalg.norm(e.dense, axis=1)
    ov = [len(set(ref.sparse[i].indices) & set(e.sparse[i].indices)) / ref.sparse[i].nnz
          for i in range(len(texts))]
    print(json.dumps({"system": name, "docs_per_s": len(texts) / dt, "cos_min_vs_fp32": float(cos.min()),
                      "cos_mean": float(cos.mean()), "topk_overlap_min": min(ov),
                      "topk_overlap_mean": float(np.mean(ov))}), flush=True)
