#!/usr/bin/env bash
# The fused AVX2 OT kernel (retromae_ir/encode/fused_max_pool.py) against oneDNN's tiles: the head alone
# (benchmarks/ot_kernel.py, both routes in one process), then DupMAE alone in its process as the encode CLI runs it,
# with the kernel off (RETROMAE_IR_OT_KERNEL=0) and on, alternating twice. From the repository root, idle machine,
# about 10 minutes on 2 cores; logs and lscpu.txt beside this script.
set -euo pipefail
out=runs/ot-kernel
lscpu > $out/lscpu.txt
.venv/bin/python benchmarks/ot_kernel.py --threads 2 > $out/head-2.log 2>&1
for round in 1 2; do
    for kernel in 0 1; do
        RETROMAE_IR_OT_KERNEL=$kernel .venv/bin/python benchmarks/encode_alone.py --encoder dupmae-minilm \
            --compile openvino --slice 300 --slices 1 2>&1 \
            | grep -v -e Warning -e "Loading weights" -e "^\[transformers\]" -e "^Key" -e "^---" -e UNEXPECTED \
                      -e MISSING -e "^Notes" -e "^- " > $out/alone-dupmae-openvino-kernel-$kernel-$round.log
    done
done
