cd /work/main
S=(.venv/bin/python benchmarks/hybrid_scale.py --docs 540000 --dims 768 --no-lucene --skip brute --candidates 100 --work /tmp/hs-540k-768)
for i in 1 2; do
  PYTHONPATH=/work/wt-old "${S[@]}" 2>&1 | grep -E "exact hybrid|faiss alone" | sed "s/^/old$i /"
  "${S[@]}" 2>&1 | grep -E "exact hybrid|faiss alone" | sed "s/^/new$i /"
done
