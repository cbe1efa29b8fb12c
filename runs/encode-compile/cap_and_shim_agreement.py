"""Vectors of the CPU token cap and of the MKL shim against the default's: dupmae-minilm, eager fp32, 500 scifact docs.

    .venv/bin/python runs/encode-compile/cap_and_shim_agreement.py > runs/encode-compile/cap_and_shim_agreement.jsonl

Encodes here with the token cap and without it (max_batch_tokens None: batches of 64), then in a child process
with LD_PRELOAD=$(python -m retromae_ir.mkl_shim); prints one JSON line per comparison against the default."""
import json, os, subprocess, sys, tempfile
from pathlib import Path
import numpy as np, scipy.sparse, torch
CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout
from retromae_ir.encode.base import EncoderModel
from retromae_ir.mkl_shim import build, loaded


def encode(out, cap=True):
    torch.set_num_threads(2)
    texts = [json.loads(l)["title"] + " " + json.loads(l)["text"] for l in open(CORPUS)][:500]
    model = EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False)
    if not cap:
        model.batch_tokens = None
    e = model.encode_passage(texts)
    np.save(f"{out}.dense.npy", e.dense); scipy.sparse.save_npz(f"{out}.sparse.npz", e.sparse)
    return loaded()


def compare(name, a, b):
    da, db = np.load(f"{a}.dense.npy"), np.load(f"{b}.dense.npy")
    sa, sb = scipy.sparse.load_npz(f"{a}.sparse.npz"), scipy.sparse.load_npz(f"{b}.sparse.npz")
    cos = (da * db).sum(1) / np.linalg.norm(da, axis=1) / np.linalg.norm(db, axis=1)
    same = [set(sa[i].indices) == set(sb[i].indices) for i in range(sa.shape[0])]
    swaps = [{"doc": int(i), "only_in_default": {int(t): float(sa[i, t]) for t in set(sa[i].indices) - set(sb[i].indices)},
              "only_in_other": {int(t): float(sb[i, t]) for t in set(sb[i].indices) - set(sa[i].indices)},
              "smallest_kept_weight": float(sa[i].data.min())} for i in np.flatnonzero(~np.array(same))]
    print(json.dumps({"comparison": name, "docs": len(da), "dense_cosine_min": float(cos.min()),
                      "dense_max_abs_diff": float(abs(da - db).max()), "identical_topk_sets": float(np.mean(same)),
                      "sparse_max_abs_diff": float(abs(sa - sb).max()), "rows_with_other_top_k": swaps}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 2:  # the child: encode with the cap, under whatever LD_PRELOAD it was given
        assert encode(sys.argv[1]), "the MKL shim is not loaded in the child"
        raise SystemExit(0)
    with tempfile.TemporaryDirectory() as work:
        default, uncapped, shim = (f"{work}/{name}" for name in ("default", "uncapped", "shim"))
        encode(default); encode(uncapped, cap=False)
        subprocess.run([sys.executable, __file__, shim], check=True, env={**os.environ, "LD_PRELOAD": str(build())})
        compare("token cap vs batches of 64 (no cap)", default, uncapped)
        compare("MKL shim vs default", default, shim)
