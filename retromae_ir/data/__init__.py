"""Datasets and their files: the BEIR registry with local/cache/download resolution, and streaming readers."""
from retromae_ir.data.beir import (
    BEIR_DATASETS,
    BeirDataset,
    BeirPart,
    DatasetUnavailable,
    get_beir_dataset,
    resolve_beir,
)
from retromae_ir.data.readers import (
    DataFormatError,
    Document,
    ReadStats,
    iter_beir_corpus,
    iter_beir_queries,
    iter_msmarco_collection,
    iter_qrels,
    iter_topics,
    load_beir_corpus,
    load_beir_queries,
    load_msmarco_queries,
    load_qrels,
    load_topics,
)

__all__ = [
    "BEIR_DATASETS", "BeirDataset", "BeirPart", "DatasetUnavailable", "get_beir_dataset", "resolve_beir",
    "DataFormatError", "Document", "ReadStats", "iter_beir_corpus", "iter_beir_queries", "iter_msmarco_collection",
    "iter_qrels", "iter_topics", "load_beir_corpus", "load_beir_queries", "load_msmarco_queries", "load_qrels",
    "load_topics",
]
