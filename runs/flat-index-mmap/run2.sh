#!/usr/bin/env bash
# Part 2 (after run.sh): the 768-d flat index (1.545 GiB) rebuilt as SQfp16 (0.77 GiB) by `encode dense-index`'s
# code under a 1.25 GiB memory limit (cgroup v1, page cache included; root), then searched under it, and both
# searches without the limit for comparison. Usage from the repository root: bash runs/flat-index-mmap/run2.sh
set -u
HERE=runs/flat-index-mmap
WORK=/tmp/hs-540k-768
CG=$(awk -F: '$2=="memory"{print "/sys/fs/cgroup/memory"$3}' /proc/self/cgroup)/flat-index-mmap
GIB=$((1 << 30))
LIMIT=$((GIB + GIB / 4))
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --candidates 100 --work $WORK)
limited() {
  mkdir -p "$CG" && echo "$1" > "$CG/memory.limit_in_bytes" && echo 0 > "$CG/memory.max_usage_in_bytes" && shift
  bash -c 'echo $$ > '"$CG"'/cgroup.procs; exec "$@"' _ "$@"
  local rc=$?
  echo "cgroup limit $(cat $CG/memory.limit_in_bytes) max_usage $(cat $CG/memory.max_usage_in_bytes) failcnt $(cat $CG/memory.failcnt)"
  return $rc
}
cold() { sync; echo 1 > /proc/sys/vm/drop_caches; }
run() {
  local name=$1; shift
  local start=$(date +%s.%N)
  "$@" > $HERE/$name.json 2> $HERE/$name.log
  echo "rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" > $HERE/$name.rc
  cat $HERE/$name.rc
}
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
