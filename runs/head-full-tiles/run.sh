#!/usr/bin/env bash
# Before/after of full-height OT-head row tiles (docs/encoders.md "What the kernels allow"): DupMAE alone in its
# process, then the head alone, each alternating before/after, twice,
# on an idle machine (about 15 minutes). BEFORE: the code before the change, e.g.
#   mkdir -p /tmp/old_rir && git archive 0878adb retromae_ir encoders | tar -x -C /tmp/old_rir
# Usage: BEFORE=/tmp/old_rir bash runs/head-full-tiles/run.sh   (from the repository root)
set -euo pipefail
out=$PWD/runs/head-full-tiles
py=$PWD/.venv/bin/python
cd benchmarks
for round in 1 2; do
    for code in before after; do
        path=$([ $code = before ] && echo "$BEFORE" || echo "$PWD/..")
        PYTHONPATH=$path $py encode_alone.py --encoder dupmae-minilm --compile openvino 2>&1 \
            | grep -v -e Warning -e "Loading weights" -e "^\[transformers\]" -e "^Key" -e "^---" -e UNEXPECTED \
                      -e MISSING -e "^Notes" -e "^- " > $out/alone-dupmae-openvino-$code-$round.log
    done
done
# the head alone, before and after, alternating, twice
cd ..
for round in 1 2; do
    PYTHONPATH=$BEFORE $py runs/head-full-tiles/head_alone.py 2>&1 | grep -v Warning > $out/head-alone-before-$round.log
    $py runs/head-full-tiles/head_alone.py 2>&1 | grep -v Warning > $out/head-alone-after-$round.log
done
