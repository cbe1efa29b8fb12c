#!/usr/bin/env bash
# The runs behind docs/encoders.md's "--compile openvino" section, one after the other on an idle machine:
# vector agreement, each encoder alone in its process under both backends (twice), then the interleaved benchmark.
# Usage: bash runs/encode-openvino/run.sh   (from the repository root; about 45 minutes on 2 cores)
set -euo pipefail
out=runs/encode-openvino
py=.venv/bin/python
$py $out/agreement.py > $out/agreement.jsonl 2> $out/agreement.err
for round in 1 2; do
    for encoder in minilm-cls dupmae-minilm; do
        for backend in inductor openvino; do
            $py benchmarks/encode_alone.py --encoder $encoder --compile $backend > $out/alone-$encoder-$backend-$round.log 2>&1
        done
    done
done
bash runs/encode-interleaved.sh $out/encode-search-2-rounds.log
