"""Evaluation: metrics through pytrec_eval and TREC run files (writer, validating reader)."""
from retromae_ir.evaluate.metrics import (
    DEFAULT_METRICS,
    TREC_DL_MIN_RELEVANCE,
    evaluate_per_query,
    evaluate_run,
    ranked,
)
from retromae_ir.runs import MAX_DEPTH, RunSummary, read_trec_run, remove_self_hits, validate_trec_run, write_trec_run

__all__ = [
    "DEFAULT_METRICS", "TREC_DL_MIN_RELEVANCE", "evaluate_per_query", "evaluate_run", "ranked", "remove_self_hits",
    "MAX_DEPTH", "RunSummary", "read_trec_run", "validate_trec_run", "write_trec_run",
]
