#!/usr/bin/env bash
# The interleaved encode benchmark as the runs under runs/encode-*/ make it: every system on the same 1,000 scifact
# documents, 2 rounds, 2 threads, fp32, no MKL shim (benchmarks/encode_search.py, its encode step only).
# Usage: bash runs/encode-interleaved.sh LOG   (from the repository root; about 20 minutes on 2 cores)
set -euo pipefail
T=../shared/data/topics-and-qrels
.venv/bin/python benchmarks/encode_search.py --corpus ../shared/data/beir/scifact/corpus.jsonl \
    --index /tmp/none --queries /tmp/none --topics $T/topics.beir-v1.0.0-scifact.test.tsv.gz \
    --qrels $T/qrels.beir-v1.0.0-scifact.test.txt --work /tmp/rir_bench/splade \
    --threads 2 --encode-docs 1000 --rounds 2 --skip precision search sizes > "$1" 2>&1
