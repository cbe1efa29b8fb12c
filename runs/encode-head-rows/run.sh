#!/usr/bin/env bash
# The runs behind docs/encoders.md's "DupMAE's OT head: smaller row tiles, the transform on oneDNN" section, one
# after the other on an idle machine: the head alone (head_rows.py); dupmae-minilm --compile openvino alone in its
# process, the code before (a worktree at BEFORE) and after, alternating, twice each; then the interleaved
# benchmark (every system, 1,000 documents, 2 rounds).
# Usage: BEFORE=<commit> bash runs/encode-head-rows/run.sh   (from the repository root; about 35 minutes on 2 cores)
set -euo pipefail
out=runs/encode-head-rows
py=$PWD/.venv/bin/python
corpus=$PWD/../shared/data/beir/scifact/corpus.jsonl
lscpu > $out/lscpu.txt
$py $out/head_rows.py > $out/head_rows.log 2>&1
rm -rf /tmp/rir-before && git worktree add -f /tmp/rir-before "$BEFORE" > /dev/null
for round in 1 2; do
    (cd /tmp/rir-before && PYTHONPATH=/tmp/rir-before $py benchmarks/encode_alone.py --encoder dupmae-minilm \
        --compile openvino --corpus $corpus) \
        > $out/alone-dupmae-openvino-before-$round.log 2>&1
    $py benchmarks/encode_alone.py --encoder dupmae-minilm --compile openvino --corpus $corpus \
        > $out/alone-dupmae-openvino-after-$round.log 2>&1
done
git worktree remove --force /tmp/rir-before
bash runs/encode-interleaved.sh $out/encode-search-2-rounds.log
