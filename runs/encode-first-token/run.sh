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
T=../shared/data/topics-and-qrels
$py benchmarks/encode_search.py --corpus ../shared/data/beir/scifact/corpus.jsonl \
    --index /tmp/none --queries /tmp/none --topics $T/topics.beir-v1.0.0-scifact.test.tsv.gz \
    --qrels $T/qrels.beir-v1.0.0-scifact.test.txt --work /tmp/rir_bench/splade \
    --threads 2 --encode-docs 1000 --rounds 2 --skip precision search sizes > $out/encode-search-2-rounds.log 2>&1
