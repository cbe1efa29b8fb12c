#!/usr/bin/env bash
# The runs behind docs/encoders.md's "What the kernels allow" section, one after the other on an idle machine
# (about 15 minutes on 2 cores; logs beside this script).
# Usage: bash runs/kernel-bound/run.sh   (from the repository root)
set -euo pipefail
out=runs/kernel-bound
py=$PWD/.venv/bin/python
lscpu > $out/lscpu.txt
for encoder in minilm-cls dupmae-minilm; do
    for compile in openvino inductor; do
        $py benchmarks/kernel_bound.py --encoder $encoder --compile $compile --docs 500 2>&1 \
            | grep -v -e Warning -e "Loading weights" > $out/$encoder-$compile.log
    done
done
$py runs/kernel-bound/attention_routes.py 2>&1 | grep -v Warning > $out/attention_routes.log
