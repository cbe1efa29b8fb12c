"""Vectors of the document-aligned OT head tiles (37cd41f) against the code before them (a24db6e): dupmae-minilm,
fp32, 500 scifact docs, eager and --compile.

    git worktree add /tmp/old a24db6e
    OLD=/tmp/old .venv/bin/python runs/encode-alone/head_tiles_agreement.py > runs/encode-alone/head_tiles_agreement.jsonl

Each side encodes in a child process (the old one with PYTHONPATH=$OLD); prints one JSON line per comparison."""
import json, os, subprocess, sys, tempfile
from pathlib import Path
import numpy as np, scipy.sparse, torch
CORPUS = Path(__file__).resolve().parents[3] / "shared/data/beir/scifact/corpus.jsonl"  # ../shared beside the checkout


def encode(out, compiled):
    import retromae_ir
    from retromae_ir.encode.base import EncoderModel
    torch.set_num_threads(2)
    texts = [json.loads(l)["title"] + " " + json.loads(l)["text"] for l in open(CORPUS)][:500]
    model = EncoderModel.from_card("dupmae-minilm", device="cpu", bf16=False)
    if compiled:
        model.compile_frozen()
    e = model.encode_passage(texts)
    np.save(f"{out}.dense.npy", e.dense); scipy.sparse.save_npz(f"{out}.sparse.npz", e.sparse)
    print(retromae_ir.__file__, file=sys.stderr)


def compare(name, a, b):
    da, db = np.load(f"{a}.dense.npy"), np.load(f"{b}.dense.npy")
    sa, sb = scipy.sparse.load_npz(f"{a}.sparse.npz"), scipy.sparse.load_npz(f"{b}.sparse.npz")
    cos = (da * db).sum(1) / np.linalg.norm(da, axis=1) / np.linalg.norm(db, axis=1)
    same = [set(sa[i].indices) == set(sb[i].indices) for i in range(sa.shape[0])]
    print(json.dumps({"comparison": name, "docs": len(da), "dense_cosine_min": float(cos.min()),
                      "dense_max_abs_diff": float(abs(da - db).max()), "identical_topk_sets": float(np.mean(same)),
                      "sparse_max_abs_diff": float(abs(sa - sb).max())}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:  # the child
        encode(sys.argv[1], sys.argv[2] == "compile")
        raise SystemExit(0)
    old = os.environ["OLD"]
    with tempfile.TemporaryDirectory() as work:
        for mode in ("eager", "compile"):
            for tree, env in (("new", {}), ("old", {"PYTHONPATH": old})):
                subprocess.run([sys.executable, __file__, f"{work}/{tree}-{mode}", mode], check=True,
                               env={**os.environ, **env})
            compare(f"{mode}: a24db6e vs 37cd41f head tiles", f"{work}/old-{mode}", f"{work}/new-{mode}")
