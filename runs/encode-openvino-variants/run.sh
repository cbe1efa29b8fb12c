#!/usr/bin/env bash
# The logs beside this script (about 12 minutes on 2 cores; nothing else running).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=runs/encode-openvino-variants
lscpu > $here/lscpu.txt
.venv/bin/python $here/attention_variants.py minilm-cls 4 sdpa,eager,eager+mask4,sdpa+mask4 2>&1 \
    | grep -v -e Warning -e "Loading weights" > $here/attention-minilm-cls.log
.venv/bin/python $here/attention_variants.py dupmae-minilm 4 sdpa,eager 2>&1 \
    | grep -v -e Warning -e "Loading weights" > $here/attention-dupmae-minilm.log
.venv/bin/python $here/vocab_tiles.py 2>&1 | grep -v -e Warning -e "Loading weights" > $here/vocab-tiles.log
