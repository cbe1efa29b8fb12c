#!/usr/bin/env bash
# Part 5 (2026-11-28): run4.sh's FlatScan rows again after FlatScan pads a small batch of queries to faiss's BLAS
# size (run4's, before it: the *-unpadded-* files). Usage from the repository root: bash runs/flat-index-mmap/run5.sh
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run5-commit.txt
for i in 1 2; do
  cold; run scan-blocked-limited-$i limited $LIMIT timeout 300 \
    .venv/bin/python $HERE/scan_from_disk.py $WORK/index/dense/index 3 blocked
done
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
cold; run search-scan-limited limited $LIMIT timeout 900 "${S[@]}"
cp $WORK/results.json $HERE/search-scan-limited-results.json
rmdir "$CG"
