"""The BEIR suite on fixed runs: cqadupstack averaged over its subforums, tables and chart, the average row."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from retromae_ir.data.beir import CQADUPSTACK_SUBFORUMS
from retromae_ir.evaluate.beir_suite import BeirSuite, DatasetResult, results_frame, write_results
from retromae_ir.evaluate.runs import key_path, run_key
from retromae_ir.io import file_digest
from retromae_ir.runs import write_trec_run


class NoRetriever:
    name = "fixed"

    def run_key(self, corpus):
        return {"retriever": "fixed"}

    def retrieve(self, *args):
        raise AssertionError("the run files are given: nothing may be retrieved")


def write_given_run(path: Path, run, retriever, folder: Path) -> None:
    """A run file with the key the suite computes for ``retriever`` over the part in ``folder``."""
    write_trec_run(path, run, "t")
    key = run_key(retriever, folder / "corpus.jsonl", {"q": "q"}, drop_self_hits=True)
    key_path(path).write_text(json.dumps(key))


def write_part(folder: Path) -> None:
    """A three-document part with one query whose one relevant document is ``b``."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": d}) + "\n" for d in "abc"))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "q"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tb\t1\n")


def test_cqadupstack_is_the_mean_of_its_subforums(tmp_path):
    runs = tmp_path / "runs"
    for i, sub in enumerate(CQADUPSTACK_SUBFORUMS):
        write_part(tmp_path / "data" / "cqadupstack" / sub)
        # relevant document first in half the subforums, second in the other half
        order = ["b", "a", "c"] if i % 2 == 0 else ["a", "b", "c"]
        write_given_run(runs / f"beir-cqadupstack-{sub}.trec", {"q": {d: 3.0 - r for r, d in enumerate(order)}},
                        NoRetriever(), tmp_path / "data" / "cqadupstack" / sub)
    result = BeirSuite(NoRetriever(), runs, tmp_path / "data", download=False).run_dataset("cqadupstack")
    assert result.status == "reused" and result.queries == 12
    # nDCG@10: 1 at rank 1, 1/log2(3) at rank 2; recall@100 is 1 everywhere
    assert result.metrics["ndcg@10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert result.metrics["recall@100"] == 1.0


def test_missing_run_without_data_is_listed_not_fatal(tmp_path, monkeypatch):
    monkeypatch.delenv("RETROMAE_IR_DATA", raising=False)
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path / "cache"))
    result = BeirSuite(NoRetriever(), tmp_path / "runs", None, download=False).run_dataset("nq")
    assert result.status == "missing" and "downloading is disabled" in result.reason
    result = BeirSuite(NoRetriever(), tmp_path / "runs", tmp_path / "nothing").run_dataset("nq")
    assert result.status == "missing" and f"is not in --data-dir {tmp_path / 'nothing'}" in result.reason


def test_tables_and_chart_from_fixed_results(tmp_path):
    results = [DatasetResult("scifact", "ok", {"ndcg@10": 0.70, "recall@100": 0.90}, 300),
               DatasetResult("nfcorpus", "ok", {"ndcg@10": 0.30, "recall@100": 0.20}, 323),
               DatasetResult("bioasq", "missing", reason="not public")]
    frame = results_frame(results, "mine")
    assert list(frame["dataset"]) == ["scifact", "nfcorpus", "average (2 of 18)"]
    assert frame.iloc[2]["ndcg@10 (mine)"] == pytest.approx(0.50)
    assert frame.iloc[2]["BM25 flat (Pyserini)"] == pytest.approx((0.6789 + 0.3218) / 2)
    assert frame.iloc[2]["DupMAE (paper)"] == pytest.approx((0.699 + 0.346) / 2)

    write_results(results, "mine", tmp_path)
    markdown = (tmp_path / "beir-results.md").read_text()
    assert "| scifact | 300 | 0.7000 | 0.9000 | 0.6789 | 0.6990 |" in markdown
    assert "| average (2 of 18) | 623 | 0.5000 | 0.5500 |" in markdown
    assert "not evaluated: bioasq: not public" in markdown
    assert (tmp_path / "beir-results.csv").read_text().splitlines()[1].startswith("scifact,300,0.7,0.9")
    assert (tmp_path / "beir-results.png").read_bytes()[:4] == b"\x89PNG"


def test_reference_average_is_left_out_when_the_reference_lacks_a_dataset(tmp_path):
    results = [DatasetResult("scifact", "ok", {"ndcg@10": 0.7, "recall@100": 0.9}, 300),
               DatasetResult("dbpedia-entity", "ok", {"ndcg@10": 0.3, "recall@100": 0.4}, 400)]
    frame = results_frame(results, "mine")
    assert frame.iloc[2]["DupMAE (paper)"] is None  # the paper's table has no dbpedia-entity in our notes


class StubRetriever:
    """Returns ``hits`` for every query, counting its calls."""

    name = "stub"

    def __init__(self, hits: dict[str, dict[str, float]], version: int = 1):
        self.hits, self.calls, self.version = hits, 0, version

    def run_key(self, corpus):
        return {"retriever": "stub", "version": self.version, "corpus_sha256": file_digest(corpus)}

    def retrieve(self, corpus, index_name, queries):
        self.calls += 1
        return {qid: dict(self.hits.get(qid, {})) for qid in queries}


def test_empty_corpus_fails_and_is_never_cached(tmp_path):
    write_part(tmp_path / "data" / "scifact")
    (tmp_path / "data" / "scifact" / "corpus.jsonl").write_text("")
    retriever = StubRetriever({})  # what BM25 gives over an empty index: no hits at all
    for _ in range(2):  # the second run finds nothing to reuse and fails the same way
        result = BeirSuite(retriever, tmp_path / "runs", tmp_path / "data", download=False).run_dataset("scifact")
        assert result.status == "failed" and "holds no documents" in result.reason and not result.evaluated
    assert retriever.calls == 0 and not (tmp_path / "runs").exists()


def test_a_run_without_any_hit_is_not_written(tmp_path):
    write_part(tmp_path / "data" / "scifact")
    retriever = StubRetriever({})
    suite = BeirSuite(retriever, tmp_path / "runs", tmp_path / "data", download=False)
    for _ in range(2):
        result = suite.run_dataset("scifact")
        assert result.status == "failed" and "no hits for any of the 1 judged queries" in result.reason
    assert retriever.calls == 2 and not list((tmp_path / "runs").glob("*"))


def test_an_empty_run_file_left_by_an_older_version_is_redone(tmp_path):
    write_part(tmp_path / "data" / "scifact")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "beir-scifact.trec").write_text("")
    retriever = StubRetriever({"q": {"b": 2.0, "a": 1.0}})
    result = BeirSuite(retriever, tmp_path / "runs", tmp_path / "data", download=False).run_dataset("scifact")
    assert retriever.calls == 1 and result.status == "ok" and result.metrics["ndcg@10"] == 1.0
    assert (tmp_path / "runs" / "beir-scifact.trec").read_text().startswith("q Q0 b 1 2.0 stub")


def test_judged_queries_without_hits_are_reported(tmp_path):
    folder = tmp_path / "data" / "scifact"
    write_part(folder)
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": q}) + "\n" for q in ("q", "r")))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\tb\t1\nr\tc\t1\n")
    suite = BeirSuite(StubRetriever({"q": {"b": 1.0}}), tmp_path / "runs", tmp_path / "data", download=False)
    for status in ("ok", "reused"):  # reported when retrieved and again when the run file is reused
        result = suite.run_dataset("scifact")
        assert (result.status, result.no_hits, result.metrics["ndcg@10"]) == (status, 1, 0.5)
    write_results([result], "stub", tmp_path)
    assert "scifact: 1 of 2 judged queries have no hits (scored 0)" in (tmp_path / "beir-results.md").read_text()


def test_a_run_is_reused_only_under_its_key(tmp_path, caplog):
    """Same retriever name, other model (version), corpus or query text: retrieved again, never scored from the
    old run file; a run file without a key (an older version's) is redone too."""
    folder = tmp_path / "data" / "scifact"
    write_part(folder)
    runs = tmp_path / "runs"
    first = StubRetriever({"q": {"b": 2.0, "a": 1.0}})
    assert BeirSuite(first, runs, tmp_path / "data", download=False).run_dataset("scifact").status == "ok"
    assert BeirSuite(first, runs, tmp_path / "data", download=False).run_dataset("scifact").status == "reused"
    retrained = StubRetriever({"q": {"a": 2.0, "b": 1.0}}, version=2)  # same name "stub", other weights
    result = BeirSuite(retrained, runs, tmp_path / "data", download=False).run_dataset("scifact")
    assert (result.status, retrained.calls) == ("ok", 1)
    assert result.metrics["ndcg@10"] == pytest.approx(1 / math.log2(3))  # its own run, not the first one's
    assert "made with other version" in caplog.text
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": d * 2}) + "\n" for d in "abc"))
    assert BeirSuite(retrained, runs, tmp_path / "data", download=False).run_dataset("scifact").status == "ok"
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "another question"}) + "\n")
    assert BeirSuite(retrained, runs, tmp_path / "data", download=False).run_dataset("scifact").status == "ok"
    key_path(runs / "beir-scifact.trec").unlink()
    assert BeirSuite(retrained, runs, tmp_path / "data", download=False).run_dataset("scifact").status == "ok"
    assert retrained.calls == 4 and "no key recorded" in caplog.text


def test_bm25_run_key_names_its_parameters_the_corpus_bytes_and_the_index_code(tmp_path):
    from importlib.metadata import version

    from retromae_ir.bm25 import COLLECTION_VERSION, BM25Params, BM25Retriever

    write_part(tmp_path)
    corpus = tmp_path / "corpus.jsonl"
    default = BM25Retriever(tmp_path / "idx").run_key(corpus)
    assert default == {"retriever": "bm25", "k1": 0.9, "b": 0.4, "hits": 1000, "corpus_sha256": file_digest(corpus),
                       "pyserini": version("pyserini"), "collection": COLLECTION_VERSION}
    assert BM25Retriever(tmp_path / "idx", BM25Params(k1=1.2)).run_key(corpus)["k1"] == 1.2


def test_the_drivers_encoding_precision_can_be_forced_either_way(tmp_path):
    """--dtype fp32 turns bf16 off even where the hardware has it (a store_true --bf16 could only turn it on)."""
    import argparse

    from retromae_ir.evaluate.retrievers import add_retriever_arguments, make_retriever

    parser = argparse.ArgumentParser()
    add_retriever_arguments(parser)
    for dtype, bf16 in (("auto", None), ("fp32", False), ("bf16", True)):
        args = parser.parse_args(["--encoder", "minilm-mean", "--dtype", dtype, "--index-dir", str(tmp_path)])
        assert make_retriever(args).bf16 is bf16
    from retromae_ir.evaluate.retrievers import DEPTH  # one deeper than a run file, for a dropped self-hit

    assert make_retriever(args).hits == DEPTH
    assert make_retriever(parser.parse_args(["--index-dir", str(tmp_path)])).params.hits == DEPTH


def test_a_dataset_named_twice_is_run_and_averaged_once(tmp_path):
    """`--datasets scifact nfcorpus scifact` would otherwise weigh scifact twice in the average row."""
    for name in ("scifact", "nfcorpus"):
        write_part(tmp_path / "data" / name)
    retriever = StubRetriever({"q": {"b": 2.0, "a": 1.0}})
    results = BeirSuite(retriever, tmp_path / "runs", tmp_path / "data", download=False).run(
        ["scifact", "nfcorpus", "scifact"])
    assert [r.dataset for r in results] == ["scifact", "nfcorpus"] and retriever.calls == 2


def test_a_run_keeps_1000_hits_after_its_self_hit_is_dropped(tmp_path):
    """The drivers' retrievers retrieve 1,001 hits; the suite drops the query's own id and keeps the best 1,000
    (the run files of queries that retrieved themselves held 999), and a run that did not retrieve itself is cut
    to the 1,000 its file holds, so a fresh run and the same run reused score alike."""
    from retromae_ir.evaluate.retrievers import DEPTH
    from retromae_ir.runs import MAX_DEPTH, read_trec_run

    assert DEPTH == MAX_DEPTH + 1
    write_part(tmp_path / "data" / "scifact")
    deep = {f"d{i}": float(DEPTH - i) for i in range(DEPTH)}
    for hits in ({"q": 1e9, **deep}, deep):  # the query's own id first, then without it
        retriever = StubRetriever({"q": dict(list(hits.items())[:DEPTH])})
        suite = BeirSuite(retriever, tmp_path / "runs", tmp_path / "data", download=False, force=True)
        fresh = suite.run_dataset("scifact")
        written = read_trec_run(tmp_path / "runs" / "beir-scifact.trec")
        assert len(written["q"]) == MAX_DEPTH and "q" not in written["q"]
        assert list(written["q"])[-1] == f"d{MAX_DEPTH - 1}"
        reused = BeirSuite(retriever, tmp_path / "runs", tmp_path / "data", download=False).run_dataset("scifact")
        assert reused.status == "reused" and reused.metrics == fresh.metrics
    from retromae_ir.evaluate.runs import cached_run

    cached = cached_run(tmp_path / "run.trec", lambda: {"q": deep}, ["q"], "t", {"k": 1})
    assert list(cached.run["q"]) == list(read_trec_run(tmp_path / "run.trec")["q"]) == list(deep)[:MAX_DEPTH]
