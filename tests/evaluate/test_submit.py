"""TREC submission checks: each rule with a bad run, all violations reported at once, nothing written on failure."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from retromae_ir.submit import main

GOOD = """\
q1 Q0 d1 1 3.5 mine
q1 Q0 d2 2 2.0 mine
q2 Q0 d3 1 1.0 mine
"""


@pytest.fixture()
def topics(tmp_path) -> Path:
    path = tmp_path / "topics.tsv"
    path.write_text("q1\tfirst topic\nq2\tsecond topic\n")
    return path


def submit(tmp_path, topics, run_text: str, tag: str = "retromae1"):
    run = tmp_path / "run.trec"
    run.write_text(run_text)
    out = tmp_path / "out"
    return main([str(run), "--topics", str(topics), "--tag", tag, "--output", str(out), "--description", "test"]), out


def test_clean_run_is_written_gzipped_with_the_new_tag_and_a_description(tmp_path, topics, capsys):
    code, out = submit(tmp_path, topics, GOOD)
    assert code == 0
    lines = gzip.decompress((out / "retromae1.gz").read_bytes()).decode().splitlines()
    assert lines == ["q1 Q0 d1 1 3.5 retromae1", "q1 Q0 d2 2 2.0 retromae1", "q2 Q0 d3 1 1.0 retromae1"]
    description = (out / "retromae1.description.txt").read_text()
    assert "tag: retromae1" in description and "2 topics" in description and "results: 3" in description


@pytest.mark.parametrize("run_text, tag, message", [
    (GOOD.replace("q2 Q0 d3 1 1.0 mine\n", ""), "ok", "1 topic(s) of"),                        # a topic missing
    (GOOD + "q9 Q0 d3 1 1.0 mine\n", "ok", "not in"),                                        # unknown topic
    (GOOD + "q2 Q0 d3 2 0.5 mine\n", "ok", "run.trec:4: document 'd3' appears twice for query 'q2'"),
    (GOOD.replace("q1 Q0 d2 2 2.0", "q1 Q0 d2 2 9.0"), "ok", "run.trec:2: score 9.0 is higher"),
    (GOOD.replace("q1 Q0 d2 2 2.0", "q1 Q0 d2 1 2.0"), "ok", "run.trec:2: rank 1 does not increase"),
    (GOOD.replace("q2 Q0 d3 1 1.0 mine", "q2 Q0 d3 1 1.0"), "ok", "run.trec:3: expected 6 columns"),
    (GOOD.replace("q2 Q0 d3 1 1.0", "q2 Q1 d3 1 1.0"), "ok", "run.trec:3: second column is 'Q1'"),
    (GOOD.replace("3.5", "high"), "ok", "run.trec:1: score 'high' is not a number"),
    (GOOD, "thirteenchars", "must be 1 to 12 letters and digits"),
    (GOOD, "bad-tag", "must be 1 to 12 letters and digits"),
])
def test_each_violation_is_reported_and_nothing_is_written(tmp_path, topics, capsys, run_text, tag, message):
    code, out = submit(tmp_path, topics, run_text, tag)
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_more_than_1000_results_for_a_topic(tmp_path, topics, capsys):
    text = GOOD + "".join(f"q2 Q0 x{i} {i + 2} {-i}.0 mine\n" for i in range(1000))
    code, _ = submit(tmp_path, topics, text)
    assert code == 2
    assert "run.trec:1003: query 'q2' has more than 1000 hits" in capsys.readouterr().err


def test_all_violations_are_listed_together(tmp_path, topics, capsys):
    text = GOOD.replace("q1 Q0 d2 2 2.0", "q1 Q0 d2 2 9.0") + "q2 Q0 d3 2 0.5 mine\n"
    code, _ = submit(tmp_path, topics, text, tag="bad tag")
    err = capsys.readouterr().err
    assert code == 2
    assert "3 violation(s)" in err


def test_tied_scores_keep_the_run_files_order_under_trec_eval(tmp_path, topics):
    """trec_eval ignores ranks, reads scores as float32 and orders ties by docid descending: the archive's scores
    are made strictly decreasing float32s in the file's order, so pytrec_eval scores the ranking the file gives
    (two float64 scores 1e-9 apart are a float32 tie too)."""
    import pytrec_eval

    tied = ("q1 Q0 a 1 2.000000001 mine\nq1 Q0 b 2 2.0 mine\nq1 Q0 c 3 2.0 mine\nq1 Q0 d 4 1.0 mine\n"
            "q2 Q0 d3 1 1.0 mine\n")
    code, out = submit(tmp_path, topics, tied)
    assert code == 0
    lines = [line.split() for line in gzip.decompress((out / "retromae1.gz").read_bytes()).decode().splitlines()]
    assert [(qid, docid, rank) for qid, _, docid, rank, _, _ in lines] == [
        ("q1", "a", "1"), ("q1", "b", "2"), ("q1", "c", "3"), ("q1", "d", "4"), ("q2", "d3", "1")]
    scores = [float(fields[4]) for fields in lines[:4]]
    assert scores[0] == 2.000000001 and scores[0] > scores[1] > scores[2] > scores[3] == 1.0 and scores[2] > 2.0 - 1e-6
    run = {"q1": {fields[2]: float(fields[4]) for fields in lines[:4]}}
    evaluator = pytrec_eval.RelevanceEvaluator({"q1": {"a": 1}}, {"recip_rank"})
    assert evaluator.evaluate(run)["q1"]["recip_rank"] == 1.0  # with the raw ties trec_eval puts "a" third
    raw = {"q1": {"a": 2.000000001, "b": 2.0, "c": 2.0}}
    assert evaluator.evaluate(raw)["q1"]["recip_rank"] == pytest.approx(1 / 3)
    assert "scores lowered by a few float32 steps to keep the ranking under trec_eval: 2" in (
        out / "retromae1.description.txt").read_text()


def test_what_a_killed_submission_left_is_cleared(tmp_path, topics):
    """Its temporary folder and the description's temporary file are removed by the next submission of the tag."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".retromae1.gz.abc123.tmp").mkdir()
    (out / ".retromae1.gz.abc123.tmp" / "run.txt").write_text("partial")
    (out / ".retromae1.description.txt.x9.tmp").write_text("partial")
    (out / ".other.gz.abc123.tmp").mkdir()  # another tag's: not this submission's to clear
    code, _ = submit(tmp_path, topics, GOOD)
    assert code == 0
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".lock") == [
        ".other.gz.abc123.tmp", "retromae1.description.txt", "retromae1.gz"]
