import json, time, torch, numpy as np
from pathlib import Path
CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout
from retromae_ir.encode.base import EncoderModel
torch.set_num_threads(2)
texts = [json.loads(l)["title"] + " " + json.loads(l)["text"] for l in open(CORPUS)][:576]
for name in ("minilm-cls", "dupmae-minilm"):
    fp32 = EncoderModel.from_card(name, device="cpu", bf16=False).encode_passage(texts[64:])
    e = EncoderModel.from_card(name, device="cpu", bf16=True)
    c = EncoderModel.from_card(name, device="cpu", bf16=True).compile_frozen()
    t = time.perf_counter(); c.encode_passage(texts[:64]); comp = time.perf_counter() - t
    e.encode_passage(texts[:64])
    t = time.perf_counter(); a = e.encode_passage(texts[64:]); te = time.perf_counter() - t
    t = time.perf_counter(); b = c.encode_passage(texts[64:]); tc = time.perf_counter() - t
    cos = lambda x, y: ((x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)).min()
    out = {"card": name, "docs": 512, "compile_s": round(comp, 1), "bf16_eager_docs_per_s": round(512 / te, 2), "bf16_compiled_docs_per_s": round(512 / tc, 2),
           "min_cos_bf16eager_vs_fp32": float(cos(a.dense, fp32.dense)), "min_cos_bf16compiled_vs_fp32": float(cos(b.dense, fp32.dense))}
    if a.sparse is not None:
        ov = lambda x: float(np.mean([len(set(x[i].indices) & set(fp32.sparse[i].indices)) / max(1, fp32.sparse[i].nnz) for i in range(512)]))
        out.update({"topk_overlap_bf16eager_vs_fp32": ov(a.sparse), "topk_overlap_bf16compiled_vs_fp32": ov(b.sparse)})
    print(json.dumps(out), flush=True)
