"""Flat scans of a memory-mapped dense index: seconds and bytes read from disk per scan of 64 queries.

    .venv/bin/python runs/flat-index-mmap/scan_from_disk.py /tmp/hs-540k-768/index/dense/index [scans] [blocked]

Opens the index with ``retromae_ir.flat_index.read_index`` (whichever retromae_ir PYTHONPATH gives) and searches 64
random queries ``scans`` times (default 3), printing each scan's seconds, the bytes this process read from disk
(/proc/self/io read_bytes) and their rate. Run under a memory limit smaller than the index to measure scans from disk.
With ``blocked`` (added 2026-11-28) the searches go through ``flat_index.FlatScan`` (blocks read with pread and
dropped from the cache behind) instead of faiss's search of the mapped index.
"""
import json
import sys
import time

import numpy as np

from retromae_ir.flat_index import FlatScan, read_index


def read_bytes() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("read_bytes"))


def main() -> None:
    path, scans = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    index = read_index(path)
    queries = np.random.default_rng(0).standard_normal((64, index.d)).astype(np.float32)
    if len(sys.argv) > 3 and sys.argv[3] == "blocked":
        index = FlatScan(path, index.d, index.ntotal)
    for scan in range(scans):
        before, start = read_bytes(), time.perf_counter()
        index.search(queries, 10)
        seconds, read = time.perf_counter() - start, read_bytes() - before
        print(json.dumps({"scan": scan, "s": round(seconds, 2), "read_GB": round(read / 1e9, 3),
                          "MB_per_s": round(read / 1e6 / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
