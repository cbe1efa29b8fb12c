# #12 item 6 again, on a lent H200 at 38dc2f6 (2026-11-28): encode_search's encode step in bf16 and fp32 on the
# first 1,000 scifact documents, 2 rounds each (the H100 run of 2026-11-27 took 2,000 and ran out of time in bf16),
# by runs/gpu-h100/encode-search.sh; and whether the machine has CUDA 12's cuBLAS, which every faiss GPU wheel on
# PyPI needs. .gpu/ from runs/gpu-h100/bundle.sh; device tool: carry [".gpu"], timeout_s 480.
# (As run, the H100 script's lines were inline here, with the cuBLAS lines in its machine.txt block.)
DOCS=1000 ROUNDS=2 LIMIT=200 bash runs/gpu-h100/encode-search.sh
{ echo "CUDA 12 cuBLAS on the machine:"; find / -xdev -name 'libcublas.so.12*' 2>/dev/null | head -3
  echo "CUDA cuBLAS of any version:"; find / -xdev -name 'libcublas.so.*' 2>/dev/null | head -5
} | tee -a $OUT/machine.txt
