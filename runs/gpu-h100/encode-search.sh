# #12 item 6 on the lent GPU: encode_search's encode step in bf16 and fp32 on 2,000 scifact documents.
# As run 2026-11-27: fp32 came from this script; bf16 timed out at 250 s in round 2 of 3 (encode-search-cuda-bf16-3-rounds-timed-out.log)
# and was run again alone with --rounds 2 under `timeout 320` (encode-search-cuda-bf16.log, .json).
source .gpu/setup.sh  # .gpu/ built by runs/gpu-h100/bundle.sh
export PYTHONUNBUFFERED=1
nvidia-smi -L | tee $OUT/machine.txt
python3 -c "import torch, transformers, sys; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name())" | tee -a $OUT/machine.txt
python3 -c "import faiss; print('faiss', faiss.__version__, 'GPUs', faiss.get_num_gpus())" >> $OUT/machine.txt 2>&1 || echo "faiss: not installed" >> $OUT/machine.txt
# DOCS, ROUNDS, LIMIT: as run here by default (runs/gpu-h200/encode-search.sh sets them otherwise)
for dt in bf16 fp32; do
  timeout ${LIMIT:-250} python3 benchmarks/encode_search.py --corpus .gpu/data/corpus.jsonl --work /tmp/es-$dt \
    --device cuda --dtype $dt --encode-docs ${DOCS:-2000} --rounds ${ROUNDS:-3} --skip precision search sizes \
    > $OUT/encode-search-cuda-$dt.log 2>&1
  echo "$dt rc=$?"; tail -25 $OUT/encode-search-cuda-$dt.log
  cp /tmp/es-$dt/results.json $OUT/encode-search-cuda-$dt.json 2>/dev/null
done
