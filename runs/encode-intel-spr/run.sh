#!/usr/bin/env bash
# The runs behind docs/encoders.md's "An Intel Xeon (2026-11-25)" section, one after the other on an idle machine
# (about 30 minutes on 2 cores). encode-search-2-rounds.log beside this script was made before the token-cap fix
# (the code of abdf5d5: `bash runs/encode-interleaved.sh runs/encode-intel-spr/encode-search-2-rounds.log`).
# Usage: bash runs/encode-intel-spr/run.sh   (from the repository root)
set -euo pipefail
out=runs/encode-intel-spr
py=$PWD/.venv/bin/python
lscpu > $out/lscpu.txt
$py benchmarks/gemm_routes.py --threads 2 2>&1 | grep -v Warning > $out/gemm_routes.log
$py benchmarks/gemm_routes.py --threads 2 --tokens 1024 2048 4096 8192 16384 2>&1 | grep -v Warning > $out/gemm_tokens.log
for cap in none 1024 auto 4096; do   # auto: 2,730 tokens since the fix (none before it, on this VM)
    (cd benchmarks && $py encode_alone.py --encoder minilm-cls --compile openvino --batch-tokens $cap) 2>&1 \
        | grep -v -e Warning -e "Loading weights" > $out/alone-minilm-cls-openvino-cap-$cap.log
done
$py benchmarks/profile_encode.py --compile openvino --docs 500 2>&1 | grep -v Warning \
    > $out/profile-openvino-minilm-cls.log
bash runs/encode-interleaved.sh $out/encode-search-2-rounds-cap.log
