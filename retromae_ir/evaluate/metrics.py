"""Retrieval metrics through pytrec_eval (trec_eval's own code), with this project's conventions fixed in one place.

- Metric names: ``ndcg@K`` (graded labels), ``recall@K``, ``mrr@K`` (reciprocal rank on the run cut to K), ``map``
  (over the whole run as given).
- ``min_relevance`` is trec_eval's ``-l``: the label from which a judgement counts as relevant for recall, MRR and
  MAP. 1 for BEIR and MS MARCO dev; 2 for TREC DL (``TREC_DL_MIN_RELEVANCE``). nDCG always uses the graded labels.
- Averages run over every query of the qrels (trec_eval ``-c``): a query the run lacks scores 0 on every metric, as
  does a query without any document at ``min_relevance``. Run queries absent from the qrels are ignored.
- Ranking order is score descending, then docid ascending, the order ``write_trec_run`` writes. (trec_eval itself
  breaks score ties by docid descending and reads float32 scores; re-scoring by rank here makes in-memory and
  on-disk results agree, and the writer lowers tied scores a float32 step so trec_eval agrees too.)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytrec_eval

from retromae_ir.runs import Run, ranked

Qrels = dict[str, dict[str, int]]

DEFAULT_METRICS = ("ndcg@10", "recall@100", "recall@1000", "mrr@10", "map")
TREC_DL_MIN_RELEVANCE = 2
# Bumped in the commit that changes how a run is scored, so a chain's recorded metrics made before are made again.
# 1: a hit whose docid is the query's id is dropped on every BEIR dataset (7f7e172), 2026-11-25; 2: the chain's
# runs and the OT-weight sweep are retrieved one hit deeper and cut after the self-hit is dropped (2026-11-27).
EVALUATION_VERSION = 2
_METRIC = re.compile(r"^(ndcg|recall|mrr)@([1-9][0-9]*)$|^map$")


@dataclass(frozen=True)
class _Measure:
    name: str  # ours, e.g. "mrr@10"
    trec: str  # pytrec_eval's measure, e.g. "recip_rank"
    key: str  # pytrec_eval's result key, e.g. "recip_rank"
    cut: int | None  # depth the run is cut to before evaluating (MRR only)


def _parse(metric: str) -> _Measure:
    match = _METRIC.match(metric)
    if match is None:
        raise ValueError(f"unknown metric {metric!r}; use ndcg@K, recall@K, mrr@K or map")
    kind, depth = match.groups()
    if kind is None:
        return _Measure(metric, "map", "map", None)
    if kind == "mrr":
        return _Measure(metric, "recip_rank", "recip_rank", int(depth))
    trec = {"ndcg": "ndcg_cut", "recall": "recall"}[kind]
    return _Measure(metric, f"{trec}.{depth}", f"{trec}_{depth}", None)


def _rank_scored(run: Run, depth: int | None) -> Run:
    """The run with scores replaced by negative ranks (so pytrec_eval sees our tie order), cut to ``depth``."""
    return {qid: {docid: float(-rank) for rank, (docid, _) in enumerate(ranked(hits)[:depth], start=1)}
            for qid, hits in run.items()}


def evaluate_per_query(run: Run, qrels: Qrels, metrics=DEFAULT_METRICS,
                       min_relevance: int = 1) -> dict[str, dict[str, float]]:
    """``{metric: {qid: value}}`` for every query of ``qrels`` (0.0 where the run has no hits for it)."""
    if not qrels:
        raise ValueError("qrels are empty: nothing to evaluate against")
    measures = [_parse(m) for m in metrics]
    qrels = {str(qid): {str(d): int(rel) for d, rel in judged.items()} for qid, judged in qrels.items()}
    if len({str(qid) for qid in run}) != len(run):
        raise ValueError("the run names a query twice (as a string and as a number)")
    run = {str(qid): _checked_hits(qid, hits) for qid, hits in run.items() if str(qid) in qrels and hits}
    per_query = {m.name: dict.fromkeys(qrels, 0.0) for m in measures}
    for cut in {m.cut for m in measures}:
        group = [m for m in measures if m.cut == cut]
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {m.trec for m in group}, relevance_level=min_relevance)
        for qid, values in evaluator.evaluate(_rank_scored(run, cut)).items():
            for m in group:
                per_query[m.name][qid] = values[m.key]
    return per_query


def _checked_hits(qid, hits: dict) -> dict[str, float]:
    """A query's hits with ids as strings, like the qrels' (an int id would match no judgement and score 0), and
    finite scores (a NaN has no place in a ranking: sorting by it is arbitrary)."""
    checked = {str(docid): float(score) for docid, score in hits.items()}
    if len(checked) != len(hits):
        raise ValueError(f"query {qid!r}: the run names a document twice (as a string and as a number)")
    bad = next((docid for docid, score in checked.items() if not math.isfinite(score)), None)
    if bad is not None:
        raise ValueError(f"query {qid!r}: document {bad!r} has score {checked[bad]}; a ranking needs finite scores")
    return checked


def evaluate_run(run: Run, qrels: Qrels, metrics=DEFAULT_METRICS, min_relevance: int = 1) -> dict[str, float]:
    """``{metric: mean over the queries of qrels}``; see the module docstring for the conventions."""
    per_query = evaluate_per_query(run, qrels, metrics, min_relevance)
    return {name: sum(values.values()) / len(values) for name, values in per_query.items()}
