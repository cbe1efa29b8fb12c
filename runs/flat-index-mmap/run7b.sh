#!/usr/bin/env bash
# Part 7b (2026-11-28): run7.sh's scanned run again after the nominees' rows are read by pread (FlatScan.read_rows),
# not through the mapping. Usage from the repository root: bash runs/flat-index-mmap/run7b.sh
set -u
source runs/flat-index-mmap/common.sh
git rev-parse HEAD > $HERE/run7b-commit.txt
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK
   --skip brute pyserini)
cold
run run7b-scanned-after limited $LIMIT "${S[@]}"
cp $WORK/results.json $HERE/run7b-scanned-after-results.json
