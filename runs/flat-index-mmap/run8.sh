#!/usr/bin/env bash
# Part 8 (2026-11-28): the whole searcher under a 2.5 GiB limit, where the 1.545 GiB flat index fits (so it is mapped,
# the searcher's own choice) but not with the 1.16 GiB OT store beside it; then the same forced to scan
# (force_scan/sitecustomize.py). Cold cache before each, 10 minutes at most each. From the repository root:
#   bash runs/flat-index-mmap/run8.sh
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run8-commit.txt
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
L=$((GIB * 5 / 2))
cold
run run8-mapped-2.5g limited $L timeout 600 "${S[@]}"
cp $WORK/results.json $HERE/run8-mapped-2.5g-results.json
cold
PYTHONPATH=$PWD/$HERE/force_scan run run8-scanned-2.5g limited $L timeout 600 "${S[@]}"
cp $WORK/results.json $HERE/run8-scanned-2.5g-results.json
