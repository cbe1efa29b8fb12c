# Shared by run.sh, run2.sh and run3.sh (moved here after the runs; the same helpers, run2.sh's and run3.sh's
# limited() also printing the cgroup's peak). Source it from the repository root.
HERE=runs/flat-index-mmap
WORK=/tmp/hs-540k-768
CG=$(awk -F: '$2=="memory"{print "/sys/fs/cgroup/memory"$3}' /proc/self/cgroup)/flat-index-mmap
GIB=$((1 << 30))
LIMIT=$((GIB + GIB / 4))   # 1.25 GiB: less than the 1.545 GiB flat index
limited() {  # limited BYTES command...: the command in a cgroup whose memory (page cache included) is BYTES at most
  mkdir -p "$CG" && echo "$1" > "$CG/memory.limit_in_bytes" && echo 0 > "$CG/memory.max_usage_in_bytes" && shift
  bash -c 'echo $$ > '"$CG"'/cgroup.procs; exec "$@"' _ "$@"
  local rc=$?
  echo "cgroup limit $(cat $CG/memory.limit_in_bytes) max_usage $(cat $CG/memory.max_usage_in_bytes)"
  return $rc
}
cold() { sync; echo 1 > /proc/sys/vm/drop_caches; }
run() {  # run NAME command...: stdout to NAME.json, stderr to NAME.log, exit status and wall time to NAME.rc
  local name=$1; shift
  local start=$(date +%s.%N)
  "$@" > $HERE/$name.json 2> $HERE/$name.log
  echo "rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" > $HERE/$name.rc
  echo "$name: $(cat $HERE/$name.rc)"
}
