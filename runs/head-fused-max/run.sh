#!/usr/bin/env bash
# The OT head against its parts (docs/encoders.md "A max fused into the head's products"), twice, on an idle
# machine (about a minute). Usage: bash runs/head-fused-max/run.sh   (from the repository root)
set -euo pipefail
out=runs/head-fused-max
lscpu > $out/lscpu.txt
for round in 1 2; do
    .venv/bin/python $out/head_parts.py 2>&1 | grep -v Warning > $out/head-parts-$round.log
done
