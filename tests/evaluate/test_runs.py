"""TREC run files: exact bytes written, round trip, atomicity, and one test per kind of malformed run."""
from __future__ import annotations

import pytest

from retromae_ir.data.readers import DataFormatError
from retromae_ir.runs import RunSummary, read_trec_run, untied, validate_trec_run, write_trec_run

RUN = {"q2": {"b": 1.5, "a": 1.5, "c": 2.0}, "q10": {"x": 0.1 + 0.2, "y": -3.0}}


def test_writer_exact_bytes_sorted_topics_ties_by_docid(tmp_path):
    path = write_trec_run(tmp_path / "run.txt", RUN, "bm25")
    assert path.read_text() == (
        "q10 Q0 x 1 0.30000000000000004 bm25\n"
        "q10 Q0 y 2 -3.0 bm25\n"
        "q2 Q0 c 1 2.0 bm25\n"
        "q2 Q0 a 2 1.5 bm25\n"
        "q2 Q0 b 3 1.4999998807907104 bm25\n")  # a tie: one float32 step down, so trec_eval keeps our order


def test_round_trip_keeps_exact_scores_except_ties(tmp_path):
    path = write_trec_run(tmp_path / "run.txt", RUN, "t")
    assert read_trec_run(path) == {**RUN, "q2": {"c": 2.0, "a": 1.5, "b": 1.4999998807907104}}
    assert validate_trec_run(path) == RunSummary(topics=2, lines=5, tags={"t"})


def test_trec_eval_scores_the_written_ranking(tmp_path):
    """trec_eval reads scores as float32 and orders ties by docid descending: ties, and two scores one float32
    apart (1 + 1e-9 and 1), would put "b" above "a" there, against our ranking; written untied, they do not."""
    import pytrec_eval

    run = {"q": {"a": 1.0 + 1e-9, "b": 1.0, "c": 1.0, "d": 0.5}}
    evaluator = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"recip_rank"})
    assert evaluator.evaluate(run)["q"]["recip_rank"] == pytest.approx(1 / 3)
    written = read_trec_run(write_trec_run(tmp_path / "run.txt", run, "t"))
    assert list(written["q"]) == ["a", "b", "c", "d"] and written["q"]["a"] == 1.0 + 1e-9
    assert written["q"]["d"] == 0.5 and evaluator.evaluate(written)["q"]["recip_rank"] == 1.0
    assert untied([("a", 2.0), ("b", 1.0)]) == ([("a", 2.0), ("b", 1.0)], 0)


def test_writer_keeps_top_k(tmp_path):
    run = {"q": {f"d{i}": float(i) for i in range(1200)}}
    path = write_trec_run(tmp_path / "run.txt", run, "t")
    lines = path.read_text().splitlines()
    assert len(lines) == 1000 and lines[0] == "q Q0 d1199 1 1199.0 t" and lines[-1] == "q Q0 d200 1000 200.0 t"
    assert len(read_trec_run(write_trec_run(tmp_path / "k2.txt", run, "t", k=2))["q"]) == 2


@pytest.mark.parametrize("run, tag, message", [
    ({"q 1": {"d": 1.0}}, "t", "query id 'q 1'"),
    ({"q": {"": 1.0}}, "t", "document id (query 'q') ''"),
    ({"q": {"d": 1.0}}, "my tag", "tag 'my tag'"),
    ({"q": {"d": float("nan")}}, "t", "run score for query 'q', document 'd' is nan"),
    ({"q": {"d": -1e39}}, "t", "run score for query 'q', document 'd' is -1e+39, beyond float32's range"),
    ({"q": {"d": -3.4028234663852886e38, "e": -3.4028234663852886e38}}, "t", "run score -3.4028234663852886e+38 of "
     "document 'e' ties at float32's lowest value"),
])
def test_writer_rejects_unwritable_runs_and_leaves_no_file(tmp_path, run, tag, message):
    with pytest.raises(ValueError) as err:
        write_trec_run(tmp_path / "run.txt", run, tag)
    assert str(err.value).startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_writer_replaces_an_existing_file(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("old\n")
    write_trec_run(path, {"q": {"d": 1.0}}, "t")
    assert path.read_text() == "q Q0 d 1 1.0 t\n"


def test_topics_need_not_be_contiguous(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("q1 Q0 a 1 3 t\nq2 Q0 a 1 9 t\nq1 Q0 b 2 2 t\n")
    assert read_trec_run(path) == {"q1": {"a": 3.0, "b": 2.0}, "q2": {"a": 9.0}}


@pytest.mark.parametrize("content, line, message", [
    ("q Q0 a 1 3.0 t\nq Q0 b 2 2.0\n", 2, "expected 6 columns 'qid Q0 docid rank score tag', got 5"),
    ("q Q0 a 1 3.0 t\nq Q0 b 2 2.0 t extra\n", 2, "expected 6 columns"),
    ("q Q0 a 1 3.0 t\nq Q0 b two 2.0 t\n", 2, "rank 'two' is not an integer"),
    ("q Q0 a 1 3.0 t\nq Q0 b 2 high t\n", 2, "score 'high' is not a number"),
    ("q Q0 a 1 3.0 t\nq Q0 b 2 nan t\n", 2, "score 'nan' is not finite"),
    # Python reads these as 15 and 2; trec_eval's atof/atol as 1 and 0: the two would rank the run otherwise
    ("q Q0 a 1 30 t\nq Q0 b 2 1_5 t\n", 2, "score '1_5' is not a number as trec_eval reads one"),
    ("q Q0 a 1 3.0 t\nq Q0 b \uff12 2.0 t\n", 2, "rank '\uff12' is not a number as trec_eval reads one"),
    ("q Q0 a 1 3.0 t\nq Q0 b 2 2.0 t\nq Q0 a 3 1.0 t\n", 3, "document 'a' appears twice for query 'q'"),
    ("q Q0 a 1 3.0 t\nq Q0 b 1 2.0 t\n", 2, "rank 1 does not increase (previous rank 1 for query 'q')"),
    ("q Q0 a 2 3.0 t\nq Q0 b 1 2.0 t\n", 2, "rank 1 does not increase"),
    ("q Q0 a 1 3.0 t\nq Q0 b 2 3.5 t\n", 2, "score 3.5 is higher than the score 3.0 at the previous rank 1"),
])
def test_validator_names_the_bad_line(tmp_path, content, line, message):
    path = tmp_path / "run.txt"
    path.write_text(content)
    with pytest.raises(DataFormatError) as err:
        validate_trec_run(path)
    assert str(err.value).startswith(f"{path}:{line}: {message}")


def test_validator_rejects_more_than_1000_hits_per_topic(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("".join(f"q Q0 d{r} {r} {-r} t\n" for r in range(1, 1002)))
    with pytest.raises(DataFormatError, match=r"run\.txt:1001: query 'q' has more than 1000 hits"):
        validate_trec_run(path)
    assert len(read_trec_run(path, max_depth=2000)["q"]) == 1001


def test_equal_scores_at_increasing_ranks_are_valid(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("q Q0 b 1 1 t\nq Q0 a 5 1 t\n")
    assert validate_trec_run(path) == RunSummary(topics=1, lines=2, tags={"t"})


def test_empty_run_is_rejected(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("")
    with pytest.raises(DataFormatError, match="empty run"):
        validate_trec_run(path)
