#!/usr/bin/env bash
# Part 4 (2026-11-28): flat scans from disk by flat_index.FlatScan (blocks read once with pread, dropped behind)
# against faiss's search of the mapped index, under the 1.25 GiB limit from a cold cache, both with this checkout;
# then the whole searcher (ours, flat, K' = 100) under the limit, which now scans the file (FlatScan), and without
# it (mapped). Usage from the repository root, after the synthetic index exists (README): bash runs/flat-index-mmap/run4.sh
set -u
source runs/flat-index-mmap/common.sh
lscpu > $HERE/lscpu-run4.txt
git rev-parse HEAD > $HERE/run4-commit.txt
for i in 1 2; do
  cold; run scan-blocked-limited-$i limited $LIMIT timeout 300 \
    .venv/bin/python $HERE/scan_from_disk.py $WORK/index/dense/index 3 blocked
  cold; run scan-mapped-limited-run4-$i limited $LIMIT timeout 300 \
    .venv/bin/python $HERE/scan_from_disk.py $WORK/index/dense/index 3
done
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
cold; run search-scan-limited limited $LIMIT timeout 900 "${S[@]}"
cp $WORK/results.json $HERE/search-scan-limited-results.json
cold; run search-mapped-unlimited "${S[@]}"
cp $WORK/results.json $HERE/search-mapped-unlimited-results.json
rmdir "$CG"
