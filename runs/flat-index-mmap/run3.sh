#!/usr/bin/env bash
# Part 3: (a) encode dense-index before its storage was reserved (1444288, worktree /work/wt-noreserve) under the
# 1.25 GiB limit; (b) flat scans from disk under the limit, faiss's random-access mapping (373a4c8, worktree
# /work/wt-mid) against read-ahead put back (this checkout). Usage from the repository root: bash runs/flat-index-mmap/run3.sh
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run3-commit.txt
rm -rf $WORK/index-SQfp16
cold; PYTHONPATH=/work/wt-noreserve run sqfp16-rebuild-unreserved-limited limited $LIMIT \
  .venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK \
  --faiss SQfp16 --skip ours brute
rm -rf $WORK/index-SQfp16
for i in 1 2; do
  cold; PYTHONPATH=/work/wt-mid run scan-random-access-limited-$i limited $LIMIT timeout 300 \
    .venv/bin/python $HERE/scan_from_disk.py $WORK/index/dense/index 3
  cold; PYTHONPATH=$PWD run scan-readahead-limited-$i limited $LIMIT timeout 300 \
    .venv/bin/python $HERE/scan_from_disk.py $WORK/index/dense/index 3
done
rmdir "$CG"
