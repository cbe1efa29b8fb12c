#!/usr/bin/env bash
# Deterministic kernels (the default) against --nondeterministic: the same 15-step stage-1 fine-tuning of the quick
# chain's start card, twice each, alternating; wall seconds and whether the two runs of a setting give the same bytes.
# Usage: bash runs/deterministic/run.sh CHAIN_OUTPUT   (a finished `python -m retromae_ir.chain --chain scifact-quick
# --output CHAIN_OUTPUT`: its 0-start.yaml, train split and sub-corpus; about 4 minutes on 2 cores)
set -euo pipefail
chain=$1
out=runs/deterministic
for round in 1 2; do
    for setting in deterministic nondeterministic; do
        flag=$([ $setting = nondeterministic ] && echo --nondeterministic || true)
        rm -rf /tmp/rir-det-$setting-$round
        start=$(date +%s.%N)
        .venv/bin/python -m retromae_ir.finetune --stage 1 --encoder $chain/0-start.yaml \
            --queries ../shared/data/beir/scifact/queries.jsonl --qrels $chain/splits/train.tsv \
            --corpus $chain/corpus-1000.jsonl --group-size 1 --batch-size 32 --max-steps 15 \
            --output /tmp/rir-det-$setting-$round $flag > /dev/null 2>&1
        echo "$setting round $round: $(echo "$(date +%s.%N) - $start" | bc) s"
    done
done
for setting in deterministic nondeterministic; do
    if cmp -s /tmp/rir-det-$setting-1/model.safetensors /tmp/rir-det-$setting-2/model.safetensors; then
        echo "$setting: the two runs' weights are identical"
    else
        echo "$setting: the two runs' weights differ"
    fi
done
