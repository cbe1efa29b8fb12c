#!/usr/bin/env bash
# The flat index written a chunk at a time and searched memory-mapped (1d937da) against the code before (cc41079),
# on 540,000 synthetic documents at 768 dimensions (a 1.545 GiB flat index), with and without a memory limit
# smaller than the index (a cgroup v1 memory limit counts the page cache too; run as root). Usage, from the
# repository root, with the old code checked out at /work/wt-old (git worktree add /work/wt-old cc41079):
#   .venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --skip ours brute --work /tmp/hs-540k-768
#   bash runs/flat-index-mmap/run.sh
set -u
HERE=runs/flat-index-mmap
WORK=/tmp/hs-540k-768
OLD=/work/wt-old
CG=$(awk -F: '$2=="memory"{print "/sys/fs/cgroup/memory"$3}' /proc/self/cgroup)/flat-index-mmap
lscpu > $HERE/lscpu.txt
git rev-parse HEAD > $HERE/commit.txt
limited() {  # limited BYTES command...: the command in a cgroup whose memory (page cache included) is BYTES at most
  mkdir -p "$CG" && echo "$1" > "$CG/memory.limit_in_bytes" && shift
  bash -c 'echo $$ > '"$CG"'/cgroup.procs; exec "$@"' _ "$@"
}
cold() { sync; echo 1 > /proc/sys/vm/drop_caches; }
run() {  # run NAME command...: stdout to NAME.json, stderr to NAME.log, exit status and wall time to NAME.rc
  local name=$1; shift
  local start=$(date +%s.%N)
  "$@" > $HERE/$name.json 2> $HERE/$name.log
  echo "rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" > $HERE/$name.rc
  cat $HERE/$name.rc
}
GIB=$((1 << 30))
LIMIT=$((GIB + GIB / 4))   # 1.25 GiB: less than the 1.545 GiB flat index
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
