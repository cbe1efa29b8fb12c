#!/usr/bin/env bash
# Part 9 (2026-11-28): the whole searcher once the hybrid reuses the dense top's exact scores (no second read of
# those rows): mapped without a limit (warm, after an untimed pass as always), then scanned under the 1.25 GiB
# limit, cold; run7.sh's set-up. run9-agree.txt: the top 10 against run7b's code, by run7_agree.py.
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run9-commit.txt
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
run run9-mapped "${S[@]}"
cold
run run9-scanned limited $LIMIT "${S[@]}"
