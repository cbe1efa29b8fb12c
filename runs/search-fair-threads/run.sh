#!/usr/bin/env bash
# Search speed with both sides batched on the same threads (docs/encoders.md "Search speed"): the 1,000-document
# scifact subset of "Set-up", encoded with dupmae-minilm, then benchmarks/encode_search.py's search and sizes steps.
# Usage: bash runs/search-fair-threads/run.sh   (from the repository root; about 5 minutes on 2 cores)
set -euo pipefail
out=runs/search-fair-threads
W=/tmp/rir_sf
T=../shared/data/topics-and-qrels
mkdir -p $W/sub1000
lscpu > $out/lscpu.txt
.venv/bin/python - <<'PY'
import json
src = "../shared/data/beir/scifact/corpus.jsonl"
rel = {l.split()[2] for l in open("../shared/data/topics-and-qrels/qrels.beir-v1.0.0-scifact.test.txt")}
lines = open(src).readlines()
keep = [l for l in lines if json.loads(l)["_id"] in rel]
keep += [l for l in lines if json.loads(l)["_id"] not in rel][:1000 - len(keep)]
open("/tmp/rir_sf/sub1000/corpus.jsonl", "w").writelines(keep)
PY
.venv/bin/python -m retromae_ir.encode corpus --encoder dupmae-minilm --corpus $W/sub1000/corpus.jsonl \
    --output $W/dupmae1000 --threads 2 --chunk-size 100 > $out/encode.log 2>&1
.venv/bin/python -m retromae_ir.encode queries --encoder dupmae-minilm \
    --topics $T/topics.beir-v1.0.0-scifact.test.tsv.gz --output $W/q-dupmae >> $out/encode.log 2>&1
.venv/bin/python benchmarks/encode_search.py --index $W/dupmae1000 --queries $W/q-dupmae \
    --topics $T/topics.beir-v1.0.0-scifact.test.tsv.gz --qrels $T/qrels.beir-v1.0.0-scifact.test.txt \
    --work /tmp/rir_bench/search --threads 2 --skip encode precision 2>&1 \
    | grep -v -e Warning -e "Loading weights" > $out/search.log
