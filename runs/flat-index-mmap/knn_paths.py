"""faiss's two routes for an exact inner-product search: GFLOP/s of ``faiss.knn`` by number of queries.

    .venv/bin/python runs/flat-index-mmap/knn_paths.py > runs/flat-index-mmap/knn_paths.txt

One block of 20,480 random rows (FlatScan's block at 768-d), k = 10, 2 threads, best of 3 after an untimed call,
at 768 and 384 dimensions, on either side of ``distance_compute_blas_threshold`` (128,000 query floats in faiss
1.15): below it faiss scores pair by pair, from it with one BLAS product per block of queries.
"""
import json
import time

import faiss
import numpy as np


def main() -> None:
    rng = np.random.default_rng(0)
    print(json.dumps({"faiss": faiss.__version__, "threshold": faiss.cvar.distance_compute_blas_threshold,
                      "threads": faiss.omp_get_max_threads()}))
    for dims, counts in [(768, (16, 21, 64, 128, 166, 167, 200, 256, 512)), (384, (64, 333, 334))]:
        rows = rng.standard_normal((20480, dims)).astype(np.float32)
        for count in counts:
            queries = rng.standard_normal((count, dims)).astype(np.float32)
            faiss.knn(queries, rows, 10, faiss.METRIC_INNER_PRODUCT)
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                faiss.knn(queries, rows, 10, faiss.METRIC_INNER_PRODUCT)
                best = min(best, time.perf_counter() - start)
            print(json.dumps({"dims": dims, "queries": count, "s": round(best, 4),
                              "gflops": round(2 * count * len(rows) * dims / best / 1e9, 1)}))


if __name__ == "__main__":
    main()
