#!/usr/bin/env bash
# 2026-11-28, at c7bbb27 (2-core AVX2 EPYC, lscpu-2026-11-28.txt): the whole benchmark at 20,000 documents (run-2026-11-28.*),
# then ours alone before (e6f0b6c, worktree /work/wt-old7) and after (c7bbb27: the dense top k on faiss's BLAS route,
# search/dense_top.py), alternating twice (interleaved-{before,after}-{1,2}.*). From the repository root:
#   git worktree add /work/wt-old7 e6f0b6c; bash runs/hybrid-scale-20k/run-2026-11-28.sh
set -u
D=runs/hybrid-scale-20k
nice -n 19 .venv/bin/python benchmarks/hybrid_scale.py --docs 20000 --work /tmp/hs-20k > $D/run-2026-11-28.json 2> $D/run-2026-11-28.log
for i in 1 2; do
  for side in before after; do
    root=$PWD; [ $side = before ] && root=/work/wt-old7
    PYTHONPATH=$root nice -n 19 .venv/bin/python benchmarks/hybrid_scale.py --docs 20000 --work /tmp/hs-20k \
      --skip brute pyserini > $D/interleaved-$side-$i.json 2> $D/interleaved-$side-$i.log
  done
done
