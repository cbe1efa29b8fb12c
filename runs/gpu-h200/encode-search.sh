# #12 item 6 again, on a lent H200 at the session's HEAD (2026-11-28): encode_search's encode step in bf16 and fp32
# on the first 1,000 scifact documents, 2 rounds each (the H100 run of 2026-11-27 took 2,000 and ran out of time in
# bf16); and whether the machine has CUDA 12's cuBLAS, which every faiss GPU wheel on PyPI needs.
# .gpu/ from runs/gpu-h100/bundle.sh; device tool: carry [".gpu"], timeout_s 480.
source .gpu/setup.sh
export PYTHONUNBUFFERED=1
{ nvidia-smi -L
  python3 -c "import torch, transformers, sys; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
  python3 -c "import faiss; print('faiss', faiss.__version__, 'GPUs', faiss.get_num_gpus())" 2>&1 | tail -1
  echo "CUDA 12 cuBLAS on the machine:"; find / -xdev -name 'libcublas.so.12*' 2>/dev/null | head -3
  echo "CUDA cuBLAS of any version:"; find / -xdev -name 'libcublas.so.*' 2>/dev/null | head -5
} | tee $OUT/machine.txt
for dt in bf16 fp32; do
  timeout 200 python3 benchmarks/encode_search.py --corpus .gpu/data/corpus.jsonl --work /tmp/es-$dt --device cuda \
    --dtype $dt --encode-docs 1000 --rounds 2 --skip precision search sizes > $OUT/encode-search-cuda-$dt.log 2>&1
  echo "$dt rc=$?"; tail -16 $OUT/encode-search-cuda-$dt.log
  cp /tmp/es-$dt/results.json $OUT/encode-search-cuda-$dt.json 2>/dev/null
done
