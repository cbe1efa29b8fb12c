#!/usr/bin/env bash
# Part 6 (2026-11-28): the whole searcher over the mapped flat index without a limit, before (8e32e9d, worktree
# /work/wt-old6: batches of 64 scored pair by pair) and after 7953492 (padded to faiss's BLAS size), alternating
# twice, warm. Usage from the repository root: git worktree add /work/wt-old6 8e32e9d; bash runs/flat-index-mmap/run6.sh
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run6-commit.txt
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
for i in 1 2; do
  PYTHONPATH=/work/wt-old6 run search-mapped-unpadded-unlimited-$i "${S[@]}"
  cp $WORK/results.json $HERE/search-mapped-unpadded-unlimited-$i-results.json
  PYTHONPATH=$PWD run search-mapped-padded-unlimited-$i "${S[@]}"
  cp $WORK/results.json $HERE/search-mapped-padded-unlimited-$i-results.json
done
