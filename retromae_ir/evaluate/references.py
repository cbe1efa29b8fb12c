"""Published BEIR nDCG@10 figures that our results are compared against (not our measurements).

Sources: Pyserini's BEIR BM25 "flat" reproduction table (2CR) and the DupMAE (RetroMAE v2) paper's
BEIR table, as collected in shared/notes/reference-implementations.md. A dataset missing from a dict
was not reported by that source.
"""

PYSERINI_BM25_FLAT_NDCG10 = {
    "trec-covid": 0.5947, "bioasq": 0.5225, "nfcorpus": 0.3218, "nq": 0.3055, "hotpotqa": 0.6330,
    "fiqa": 0.2361, "signal1m": 0.3304, "trec-news": 0.3952, "robust04": 0.4070, "arguana": 0.3970,
    "webis-touche2020": 0.4422, "cqadupstack": 0.3021, "quora": 0.7886, "dbpedia-entity": 0.3180,
    "scidocs": 0.1490, "fever": 0.6513, "climate-fever": 0.1651, "scifact": 0.6789,
}

DUPMAE_PAPER_NDCG10 = {
    "scifact": 0.699, "nfcorpus": 0.346, "trec-covid": 0.728, "arguana": 0.474, "fiqa": 0.345,
    "scidocs": 0.153, "quora": 0.845, "nq": 0.570, "hotpotqa": 0.681, "fever": 0.800,
}

REFERENCE_COLUMNS = {
    "BM25 flat (Pyserini)": PYSERINI_BM25_FLAT_NDCG10,
    "DupMAE (paper)": DUPMAE_PAPER_NDCG10,
}
