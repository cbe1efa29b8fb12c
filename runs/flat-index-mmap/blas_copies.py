"""Whether faiss scores two copies of a document alike on each of its routes.

    .venv/bin/python runs/flat-index-mmap/blas_copies.py > runs/flat-index-mmap/blas_copies.txt

2,048 random rows at 768-d, rows 0-39 copied to rows 1023 down to 984 (inside faiss's first 1,024-row product);
200 random queries scored on the BLAS route (the whole batch: 200 x 768 >= 128,000 query floats) and pair by pair
(the queries one at a time), with 1 and 2 threads: how many (query, copy pair) scores differ.
"""
import json

import faiss
import numpy as np


def main() -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((2048, 768)).astype(np.float32)
    copies = list(range(1023, 983, -1))
    rows[copies] = rows[:40]
    queries = rng.standard_normal((200, 768)).astype(np.float32)
    index = faiss.IndexFlatIP(768)
    index.add(rows)
    for threads in (1, 2):
        faiss.omp_set_num_threads(threads)
        blas = index.search(queries, 2048)
        pairs = [index.search(query[None], 2048) for query in queries]
        for route, found in (("blas", [(blas[0][q], blas[1][q]) for q in range(200)]),
                             ("pair by pair", [(scores[0], ids[0]) for scores, ids in pairs])):
            differ, queries_hit = 0, set()
            for q, (scores, ids) in enumerate(found):
                score = dict(zip(ids.tolist(), scores.tolist()))
                for original, copy in zip(range(40), copies):
                    if score[original] != score[copy]:
                        differ, queries_hit = differ + 1, queries_hit | {q}
            print(json.dumps({"threads": threads, "route": route, "copy pairs scored apart": differ,
                              "of": 200 * 40, "queries": sorted(queries_hit)[:3] + (["..."] if len(queries_hit) > 3
                                                                                   else [])}))


if __name__ == "__main__":
    main()
