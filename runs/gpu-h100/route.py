"""(On the device, from the repository root, .gpu/ built by bundle.sh and carried: `source .gpu/setup.sh &&
python3 runs/gpu-h100/route.py 2000`; as run 2026-11-27 it was a copy at .gpu/route.py.)
The OT max-pool route on a GPU after the change: DupMAE eager, default route (padded on an accelerator) vs the
packed, tiled one forced, alternating, 2,000 scifact documents, batches of 64, fp32 and bf16."""
import json, sys, time
import torch
import retromae_ir.encode.representation as representation
from retromae_ir.encode import EncoderModel

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
device = "cuda" if torch.cuda.is_available() else "cpu"
texts = []
with open(".gpu/data/corpus.jsonl") as f:
    for line in f:
        doc = json.loads(line)
        texts.append((doc.get("title", "") + " " + doc["text"]).strip())
texts = texts[:n]
padded = representation.padded_head_is_faster
routes = {"default": padded, "tiled (forced)": lambda hidden: False}
for bf16 in (False, True):
    model = EncoderModel.from_card("dupmae-minilm", device=device, bf16=bf16)
    model.encode_passage(texts[:64], 64)
    best = {}
    for round_ in range(4):
        for name in (list(routes) if round_ % 2 == 0 else list(routes)[::-1]):
            representation.padded_head_is_faster = routes[name]
            if device == "cuda": torch.cuda.synchronize()
            start = time.perf_counter()
            model.encode_passage(texts, 64)
            if device == "cuda": torch.cuda.synchronize()
            rate = len(texts) / (time.perf_counter() - start)
            print(f"{'bf16' if bf16 else 'fp32'} round {round_} {name}: {rate:.1f} docs/s", flush=True)
            best[name] = max(best.get(name, 0), rate)
    representation.padded_head_is_faster = padded
    print("best", "bf16" if bf16 else "fp32", json.dumps(best), flush=True)
