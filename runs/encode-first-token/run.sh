#!/usr/bin/env bash
# The runs behind docs/encoders.md's "[CLS] cards: the last layer for the first position only" section, one after
# the other on an idle machine: vector agreement; minilm-cls alone in its process, trimmed and full, under both
# compile backends (twice); then the interleaved benchmark (every system, 1,000 documents, 2 rounds).
# Usage: bash runs/encode-first-token/run.sh   (from the repository root; about 35 minutes on 2 cores)
set -euo pipefail
out=runs/encode-first-token
py=.venv/bin/python
lscpu > $out/lscpu.txt
$py $out/agreement.py > $out/agreement.jsonl 2> $out/agreement.err
for round in 1 2; do
    for backend in inductor openvino; do
        for layer in first-token full; do
            flag=$([ $layer = full ] && echo --full-last-layer || true)
            $py benchmarks/encode_alone.py --encoder minilm-cls --compile $backend $flag \
                > $out/alone-minilm-cls-$backend-$layer-$round.log 2>&1
        done
    done
done
bash runs/encode-interleaved.sh $out/encode-search-2-rounds.log
