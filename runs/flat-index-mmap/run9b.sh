#!/usr/bin/env bash
# Part 9b: the scanned run (1.25 GiB limit, cold) alternating before (46dac5d, worktree /work/wt-old9: the dense
# top's rows read again for the hybrid's candidates) and after (HEAD: reused), twice.
#   git worktree add /work/wt-old9 46dac5d; bash runs/flat-index-mmap/run9b.sh
set -u
source runs/flat-index-mmap/common.sh
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
for i in 1 2; do
  for side in before after; do
    root=$PWD; [ $side = before ] && root=/work/wt-old9
    cold
    PYTHONPATH=$root run run9b-scanned-$side-$i limited $LIMIT "${S[@]}"
  done
done
