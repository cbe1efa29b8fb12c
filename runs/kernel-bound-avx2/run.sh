#!/usr/bin/env bash
# docs/encoders.md's "What the kernels allow on the AVX2 EPYC" section: the kernel bound of the two encoders under
# --compile openvino (their fastest route on this CPU, runs/encode-avx2-fair/), one after the other on an idle
# machine (about 10 minutes on 2 cores; logs beside this script).
# Usage: bash runs/kernel-bound-avx2/run.sh   (from the repository root)
set -euo pipefail
out=runs/kernel-bound-avx2
py=$PWD/.venv/bin/python
lscpu > $out/lscpu.txt
for encoder in minilm-cls dupmae-minilm; do
    $py benchmarks/kernel_bound.py --encoder $encoder --compile openvino --docs 500 2>&1 \
        | grep -v -e Warning -e "Loading weights" > $out/$encoder-openvino.log
done
