"""Brute force's dense side at 300,000 x 384 with 64 queries: BLAS's product against dense_scores (row by row)."""
import time

import numpy as np
import torch

from retromae_ir.search.dense_top import dense_scores

torch.set_num_threads(2)
rng = np.random.default_rng(0)
docs = rng.standard_normal((300_000, 384)).astype(np.float32)
queries = rng.standard_normal((64, 384)).astype(np.float32)
for name, run in (("BLAS queries @ docs.T", lambda: queries @ docs.T),
                  ("dense_scores", lambda: dense_scores(docs, queries))):
    run()
    best = min((lambda s: (run(), time.perf_counter() - s)[1])(time.perf_counter()) for _ in range(3))
    print(f"{name}: {best:.3f} s")
