#!/usr/bin/env bash
# DupMAE eager (as the chain encodes) alone in its process, the fused OT kernel off and on, alternating twice.
# From the repository root, idle machine, about 8 minutes on 2 cores; logs beside this script.
set -euo pipefail
out=runs/ot-kernel
for round in 1 2; do
    for kernel in 0 1; do
        RETROMAE_IR_OT_KERNEL=$kernel .venv/bin/python benchmarks/encode_alone.py --encoder dupmae-minilm \
            --slice 300 --slices 1 2>&1 \
            | grep -v -e Warning -e "Loading weights" -e "^\[transformers\]" -e "^Key" -e "^---" -e UNEXPECTED \
                      -e MISSING -e "^Notes" -e "^- " > $out/alone-dupmae-eager-kernel-$kernel-$round.log
    done
done
