import json, time, torch, numpy as np
from pathlib import Path
CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout
from retromae_ir.encode.base import EncoderModel
torch.set_num_threads(2)
texts = [json.loads(l)["title"] + " " + json.loads(l)["text"] for l in open(CORPUS)][:1000]
for name in ("dupmae-minilm", "minilm-cls"):
    e = EncoderModel.from_card(name, device="cpu", bf16=False)
    c = EncoderModel.from_card(name, device="cpu", bf16=False).compile_frozen()
    t = time.perf_counter(); c.encode_passage(texts[:64]); comp = time.perf_counter() - t
    t = time.perf_counter(); a = e.encode_passage(texts); te = time.perf_counter() - t
    t = time.perf_counter(); b = c.encode_passage(texts); tc = time.perf_counter() - t
    cos = (a.dense * b.dense).sum(1) / np.linalg.norm(a.dense, axis=1) / np.linalg.norm(b.dense, axis=1)
    out = {"card": name, "docs": len(texts), "compile_and_first_batch_s": round(comp, 1), "eager_docs_per_s": round(len(texts) / te, 2),
           "compiled_docs_per_s": round(len(texts) / tc, 2), "dense_cosine_min": float(cos.min()), "dense_max_abs_diff": float(abs(a.dense - b.dense).max())}
    if a.sparse is not None:
        same = [set(a.sparse[i].indices) == set(b.sparse[i].indices) for i in range(len(texts))]
        ov = [len(set(a.sparse[i].indices) & set(b.sparse[i].indices)) / max(1, a.sparse[i].nnz) for i in range(len(texts))]
        out.update({"identical_topk_sets": float(np.mean(same)), "topk_overlap_min": float(min(ov)),
                    "sparse_max_abs_diff": float(abs(a.sparse - b.sparse).max())})
    print(json.dumps(out), flush=True)
