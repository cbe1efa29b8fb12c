"""Metrics against values computed by hand on a tiny run, and the conventions the module docstring states."""
from __future__ import annotations

import math

import pytest

from retromae_ir.evaluate.metrics import (
    DEFAULT_METRICS,
    TREC_DL_MIN_RELEVANCE,
    evaluate_per_query,
    evaluate_run,
    ranked,
)
from retromae_ir.runs import remove_self_hits

QRELS = {"q1": {"d1": 1, "d2": 2, "d3": 0, "d4": 1}, "q2": {"e1": 1}, "q3": {"f1": 1}}
RUN = {
    "q1": {"d5": 5.0, "d2": 4.0, "d1": 3.0, "d3": 2.0, "d6": 1.0},  # relevant at ranks 2 (label 2) and 3; d4 missed
    "q2": {"e9": 2.0, "e1": 2.0},  # a score tie: docid order puts e1 first
    "q4": {"x": 1.0},  # not judged: ignored
}  # q3 is judged but absent from the run: it scores 0
# q1 by hand: DCG = 2/log2(3) + 1/log2(4); ideal = 2/log2(2) + 1/log2(3) + 1/log2(4)
NDCG_Q1 = (2 / math.log2(3) + 1 / 2) / (2 + 1 / math.log2(3) + 1 / 2)


def test_per_query_values_by_hand():
    per_query = evaluate_per_query(RUN, QRELS)
    assert per_query["ndcg@10"] == pytest.approx({"q1": NDCG_Q1, "q2": 1.0, "q3": 0.0}, abs=1e-12)
    assert per_query["recall@100"] == pytest.approx({"q1": 2 / 3, "q2": 1.0, "q3": 0.0}, abs=1e-12)
    assert per_query["mrr@10"] == {"q1": 0.5, "q2": 1.0, "q3": 0.0}
    assert per_query["map"] == pytest.approx({"q1": (1 / 2 + 2 / 3) / 3, "q2": 1.0, "q3": 0.0}, abs=1e-12)


def test_means_count_queries_missing_from_the_run_as_zero():
    assert NDCG_Q1 == pytest.approx(0.5627272554209044, abs=1e-12)
    means = evaluate_run(RUN, QRELS)
    assert list(means) == list(DEFAULT_METRICS)
    assert means == pytest.approx({"ndcg@10": (NDCG_Q1 + 1) / 3, "recall@100": 5 / 9, "recall@1000": 5 / 9,
                                   "mrr@10": 0.5, "map": 25 / 54}, abs=1e-12)


def test_trec_dl_convention_binary_metrics_need_label_two_ndcg_stays_graded():
    means = evaluate_run(RUN, QRELS, min_relevance=TREC_DL_MIN_RELEVANCE)
    # q1: only d2 (label 2, rank 2) is relevant; q2's only judgement has label 1, so it has no relevant document
    assert means == pytest.approx({"ndcg@10": (NDCG_Q1 + 1) / 3, "recall@100": 1 / 3, "recall@1000": 1 / 3,
                                   "mrr@10": 0.5 / 3, "map": 0.5 / 3}, abs=1e-12)


def test_mrr_is_cut_at_its_depth():
    qrels = {"q": {"d11": 1}}
    run = {"q": {f"d{i:02d}": 100.0 - i for i in range(1, 13)}}  # d11 at rank 11
    assert evaluate_run(run, qrels, ("mrr@10", "mrr@11", "mrr@100")) == pytest.approx(
        {"mrr@10": 0.0, "mrr@11": 1 / 11, "mrr@100": 1 / 11}, abs=1e-12)


def test_cutoffs_of_ndcg_and_recall():
    means = evaluate_run(RUN, QRELS, ("ndcg@1", "recall@2", "mrr@1"))
    assert means == pytest.approx({"ndcg@1": 1 / 3, "recall@2": (1 / 3 + 1) / 3, "mrr@1": 1 / 3}, abs=1e-12)


def test_ties_are_ranked_by_docid_ascending():
    assert ranked({"b": 1.0, "a": 1.0, "c": 2.0}) == [("c", 2.0), ("a", 1.0), ("b", 1.0)]
    assert evaluate_run({"q": {"z": 1.0, "a": 1.0}}, {"q": {"a": 1}}, ("mrr@10",)) == {"mrr@10": 1.0}


def test_remove_self_hits():
    run = {"q1": {"q1": 9.0, "d1": 1.0}, "d1": {"d1": 3.0, "q1": 2.0}}
    assert remove_self_hits(run) == {"q1": {"d1": 1.0}, "d1": {"q1": 2.0}}
    qrels = {"q1": {"d1": 1}}
    assert evaluate_run(run, qrels, ("mrr@10",)) == {"mrr@10": 0.5}
    assert evaluate_run(remove_self_hits(run), qrels, ("mrr@10",)) == {"mrr@10": 1.0}


def test_remove_self_hits_then_cut_keeps_depth_hits():
    """A run retrieved depth + 1 deep keeps depth hits whether or not the self-hit was among them (the chain and
    the OT-weight sweep scored recall@100 on 99 hits where a query's own id was retrieved)."""
    run = {"q1": {"q1": 9.0, "a": 3.0, "c": 2.0, "b": 2.0}, "q2": {"x": 5.0, "y": 4.0, "z": 3.0, "w": 1.0}}
    assert remove_self_hits(run, 3) == {"q1": {"a": 3.0, "b": 2.0, "c": 2.0}, "q2": {"x": 5.0, "y": 4.0, "z": 3.0}}


@pytest.mark.parametrize("metric", ["ndcg", "ndcg@0", "P@10", "map@10", "NDCG@10"])
def test_unknown_metric_is_rejected(metric):
    with pytest.raises(ValueError, match=f"unknown metric '{metric}'"):
        evaluate_run(RUN, QRELS, (metric,))


def test_empty_qrels_are_rejected():
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate_run(RUN, {})


def test_numeric_ids_in_a_run_match_the_qrels_string_ids():
    """qrels ids are read as strings; a run built with int ids (pandas, a notebook) scores its hits, not 0."""
    qrels = {"1": {"7": 1}}
    assert evaluate_run({1: {7: 2.0, "8": 1.0}}, qrels, ("ndcg@10",)) == {"ndcg@10": 1.0}


def test_a_document_named_twice_or_a_nan_score_is_refused():
    with pytest.raises(ValueError, match="the run names a query twice"):
        evaluate_run({1: {"7": 2.0}, "1": {"7": 1.0}}, {"1": {"7": 1}}, ("ndcg@10",))
    with pytest.raises(ValueError, match="query 'q': the run names a document twice"):
        evaluate_run({"q": {7: 2.0, "7": 1.0}}, {"q": {"7": 1}}, ("ndcg@10",))
    with pytest.raises(ValueError, match="query 'q': document 'd2' has score nan"):
        evaluate_run({"q": {"d1": 2.0, "d2": float("nan")}}, {"q": {"d1": 1}}, ("ndcg@10",))
