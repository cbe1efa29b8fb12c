"""faiss add() of 540,000 x 768 rows to an SQfp16 index in blocks of 65,536: peak anonymous memory, plain and with
the storage reserved first (dense_index.reserve_codes trick). Usage: .venv/bin/python runs/flat-index-mmap/codes_growth.py {0|1} SQfp16"""
import sys; sys.path.insert(0, 'benchmarks')
from hybrid_scale import Memory
import faiss, numpy as np
trick = sys.argv[1]=='1'; fac=sys.argv[2]
d=768; n=540000; blk=65536
ix=faiss.index_factory(d,fac,faiss.METRIC_INNER_PRODUCT)
x=np.random.rand(blk,d).astype('float32')
m=Memory(0.002); m.mark('b')
if trick:
    c = faiss.downcast_index(ix).codes if not fac.startswith('HNSW') else faiss.downcast_index(ix.storage).codes
    c.resize(n*ix.sa_code_size()); c.resize(0)
for s in range(0,n,blk):
    k=min(blk,n-s); ix.add(x[:k])
r=m.report()
print(fac, 'trick' if trick else 'plain', 'final GiB %.3f'%(n*ix.sa_code_size()/2**30), 'peak anon above start GiB %.3f'%((r['peak']['RssAnon']-r['marks']['b']['RssAnon'])/2**30))
