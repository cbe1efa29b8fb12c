#!/usr/bin/env bash
# MKL's vendor check on an AVX2 EPYC: each encoder alone in its process, without and with retromae_ir.mkl_shim,
# alternating (from the repository root; about 10 minutes on 2 cores; logs beside this script).
set -euo pipefail
HERE=runs/routes-avx2
SHIM=$(.venv/bin/python -m retromae_ir.mkl_shim)
for round in 1 2; do
  for encoder in minilm-cls dupmae-minilm; do
    .venv/bin/python benchmarks/encode_alone.py --encoder $encoder --slice 300 --slices 1 \
        > $HERE/alone-$encoder-default-$round.log 2>&1
    LD_PRELOAD=$SHIM .venv/bin/python benchmarks/encode_alone.py --encoder $encoder --slice 300 --slices 1 \
        > $HERE/alone-$encoder-shim-$round.log 2>&1
  done
done
