#!/usr/bin/env bash
# Part 7 (2026-11-28): the whole searcher before (e6f0b6c, worktree /work/wt-old7: a mapped flat index's batches of
# 64 scored pair by pair) and after 46e1814 (batches of 167 on faiss's BLAS route, the nominees scored again row by
# row with a rounding bound: search/dense_top.py): mapped without a limit, alternating twice, warm; then scanned
# under the 1.25 GiB limit, cold, once each. Usage from the repository root:
#   git worktree add /work/wt-old7 e6f0b6c; bash runs/flat-index-mmap/run7.sh
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run7-commit.txt
lscpu > $HERE/lscpu-run7.txt
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
for i in 1 2; do
  for side in before after; do
    root=$PWD; [ $side = before ] && root=/work/wt-old7
    PYTHONPATH=$root run run7-mapped-$side-$i "${S[@]}"
    cp $WORK/results.json $HERE/run7-mapped-$side-$i-results.json
  done
done
for side in before after; do
  root=$PWD; [ $side = before ] && root=/work/wt-old7
  cold
  PYTHONPATH=$root run run7-scanned-$side limited $LIMIT "${S[@]}"
  cp $WORK/results.json $HERE/run7-scanned-$side-results.json
done
