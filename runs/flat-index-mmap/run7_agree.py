"""Whether two commits' exact searchers return the same hits over hybrid_scale.py's 540,000 x 768 index: run once
per commit (PYTHONPATH picks the commit), each writing every query's top 10 in hybrid and dense mode, then compare.

    PYTHONPATH=/work/wt-old7 .venv/bin/python runs/flat-index-mmap/run7_agree.py /tmp/hs-540k-768 before.json
    PYTHONPATH=$PWD .venv/bin/python runs/flat-index-mmap/run7_agree.py /tmp/hs-540k-768 after.json
    PYTHONPATH=$PWD .venv/bin/python runs/flat-index-mmap/run7_agree.py /tmp/hs-540k-768 scanned.json --scanned
    .venv/bin/python runs/flat-index-mmap/run7_agree.py --compare before.json after.json
"""
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse


def search(work: Path, output: Path, scanned: bool) -> None:
    import retromae_ir.hardware
    from retromae_ir.encode.base import Encoded
    from retromae_ir.search import ExactHybridSearcher

    with np.load(work / "queries" / "float.npz") as saved:
        sparse = scipy.sparse.csr_matrix((saved["data"], saved["indices"], saved["indptr"]),
                                         shape=(len(saved["indptr"]) - 1, int(saved["vocab"])))
        encoded = Encoded(saved["dense"], sparse)
    if scanned:  # as if the machine had no memory for the index: FlatScan
        retromae_ir.hardware.memory_available = lambda: 0
    found = {}
    for mode in ("hybrid", "dense"):
        searcher = ExactHybridSearcher(work / "index", work / "card.yaml", mode=mode, candidates=100, threads=2)
        assert searcher.index.scans_file == scanned
        step = searcher.queries_at_once(64)
        hits = []
        for first in range(0, len(encoded), step):
            hits += searcher.search_encoded(Encoded(encoded.dense[first:first + step],
                                                    encoded.sparse[first:first + step]), 10)
        found[mode] = hits
    output.write_text(json.dumps(found))


def compare(before: Path, after: Path) -> None:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    for mode in old:
        same_ids = sum([d for d, _ in a] == [d for d, _ in b] for a, b in zip(old[mode], new[mode]))
        gap = max(abs(x[1] - y[1]) for a, b in zip(old[mode], new[mode]) for x, y in zip(a, b))
        same_scores = sum(a == b for a, b in zip(old[mode], new[mode]))
        print(json.dumps({"mode": mode, "queries": len(old[mode]), "top-10 docids identical": same_ids,
                          "top-10 docids and scores identical": same_scores, "largest score difference": gap}))


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        search(Path(sys.argv[1]), Path(sys.argv[2]), "--scanned" in sys.argv[3:])
