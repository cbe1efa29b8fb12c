#!/usr/bin/env bash
# The flat index written a chunk at a time and searched memory-mapped (1d937da) against the code before (cc41079),
# on 540,000 synthetic documents at 768 dimensions (a 1.545 GiB flat index), with and without a memory limit
# smaller than the index (a cgroup v1 memory limit counts the page cache too; run as root). Usage, from the
# repository root, with the old code checked out at /work/wt-old (git worktree add /work/wt-old cc41079):
#   .venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --skip ours brute --work /tmp/hs-540k-768
#   bash runs/flat-index-mmap/run.sh
set -u
source runs/flat-index-mmap/common.sh
OLD=/work/wt-old
lscpu > $HERE/lscpu.txt
git rev-parse HEAD > $HERE/commit.txt
merge_cmd() { .venv/bin/python benchmarks/merge_memory.py --work $WORK --output "$1"; }
cold; PYTHONPATH=$OLD run merge-old merge_cmd /tmp/merge-old
cold; run merge-new merge_cmd /tmp/merge-new
cmp /tmp/merge-old/dense/index /tmp/merge-new/dense/index && echo "same index bytes" | tee $HERE/cmp.txt
cold; PYTHONPATH=$OLD run merge-old-limited limited $LIMIT .venv/bin/python benchmarks/merge_memory.py --work $WORK --output /tmp/merge-old-l
cold; run merge-new-limited limited $LIMIT .venv/bin/python benchmarks/merge_memory.py --work $WORK --output /tmp/merge-new-l
cmp /tmp/merge-new/dense/index /tmp/merge-new-l/dense/index && echo "same index bytes under the limit" | tee -a $HERE/cmp.txt
rm -rf /tmp/merge-old /tmp/merge-new /tmp/merge-old-l /tmp/merge-new-l
SEARCH=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --skip brute --candidates 100
        --work $WORK)
cold; PYTHONPATH=$OLD run search-old "${SEARCH[@]}"
cp $WORK/results.json $HERE/search-old-results.json
cold; run search-new "${SEARCH[@]}"
cp $WORK/results.json $HERE/search-new-results.json
rm $WORK/results.json
cold; PYTHONPATH=$OLD run search-old-limited limited $LIMIT "${SEARCH[@]}"
cp $WORK/results.json $HERE/search-old-limited-results.json 2>/dev/null
cold; run search-new-limited limited $LIMIT "${SEARCH[@]}"
cp $WORK/results.json $HERE/search-new-limited-results.json
rmdir "$CG"
