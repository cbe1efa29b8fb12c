#!/usr/bin/env bash
# Part 2 (after run.sh): the 768-d flat index (1.545 GiB) rebuilt as SQfp16 (0.77 GiB) by `encode dense-index`'s
# code under a 1.25 GiB memory limit (cgroup v1, page cache included; root), then searched under it, and both
# searches without the limit for comparison. Usage from the repository root: bash runs/flat-index-mmap/run2.sh
set -u
source runs/flat-index-mmap/common.sh
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK)
rm -rf $WORK/index-SQfp16
cold; run sqfp16-rebuild-limited limited $LIMIT "${S[@]}" --faiss SQfp16 --skip ours brute
cold; run sqfp16-search-limited limited $LIMIT "${S[@]}" --faiss SQfp16 --skip brute
cp $WORK/results.json $HERE/sqfp16-search-limited-results.json
for i in 1 2; do
  run search-flat-warm-$i "${S[@]}" --skip brute
  run search-sqfp16-warm-$i "${S[@]}" --faiss SQfp16 --skip brute
done
run brute-sqfp16 "${S[@]}" --faiss SQfp16 --skip ours   # the reference top-10 of the float16 vectors
cp $WORK/results.json $HERE/brute-sqfp16-results.json
run agreement-sqfp16 "${S[@]}" --faiss SQfp16
cp $WORK/results.json $HERE/agreement-sqfp16-results.json
rmdir "$CG"
