"""The token cap regroups documents only: dupmae-minilm (eager fp32) on the first 300 scifact documents without a cap
and with the automatic one; prints the smallest dense cosine, the largest OT weight difference and how many rows
keep the same top-k term set."""
import json
from pathlib import Path

import numpy as np
import torch

from retromae_ir.encode import EncoderModel

torch.set_num_threads(2)
corpus = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
texts = [f"{row['title']} {row['text']}" for row in map(json.loads, corpus.open())][:300]
model = EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False)
out = {}
for cap in (None, "auto"):
    model.batch_tokens = cap
    out[str(cap)] = model.encode_passage(texts)
    print(f"cap {cap}: {model.max_batch_tokens} tokens per pass", flush=True)
a, b = out["None"], out["auto"]
cosine = (a.dense * b.dense).sum(1) / np.linalg.norm(a.dense, axis=1) / np.linalg.norm(b.dense, axis=1)
same = sum(set(a.sparse[i].indices) == set(b.sparse[i].indices) for i in range(len(texts)))
print(json.dumps({"documents": len(texts), "min_dense_cosine": float(cosine.min()),
                  "max_ot_weight_difference": float(abs(a.sparse - b.sparse).max()), "same_top_k_sets": int(same)}))
for i in range(len(texts)):
    if set(a.sparse[i].indices) != set(b.sparse[i].indices):
        swapped = sorted(set(a.sparse[i].indices) ^ set(b.sparse[i].indices))
        kth = min(a.sparse[i].data.min(), b.sparse[i].data.min())
        weights = {int(t): float(max(a.sparse[i][0, t], b.sparse[i][0, t])) for t in swapped}
        print(json.dumps({"row": i, "swapped_terms": weights, "kth_weight": float(kth)}))
