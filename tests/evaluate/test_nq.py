"""NQ open-domain retrieval (issue 13, item 2): DPR's files, has_answer, Pyserini's DPR JSON and its evaluator, the
driver end to end (dense, sparse, hybrid), sharded encoding, and one-line errors.

The corpus and questions are built here so that which passage answers which question is known by construction
(``TRUTH``), independently of Pyserini's matcher. The models are tiny and random, so rankings are not predictable;
expected accuracies are therefore computed from the run the driver wrote and ``TRUTH``, and where the ranking does
not matter they are exact numbers: with 7 passages every question's top 20 is the whole corpus in dense mode, so
top-20 = top-100 = 7/9 (two questions are answered nowhere, one of them only in a title, which DPR's rule ignores).
"""
from __future__ import annotations

import csv
import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from retromae_ir.data.readers import DataFormatError
from retromae_ir.evaluate import nq
from retromae_ir.runs import read_trec_run, validate_trec_run

REPO = Path(__file__).resolve().parents[2]
PASSAGES = [  # id, text, title
    ("1", "Paris is the capital and largest city of France.", "Paris"),
    ("2", "The Loire is the longest river in France.", "Loire"),
    ("3", "Tom Hanks starred as the title character.", "Forrest Gump"),
    ("4", "The film won the Academy Award for Best Picture.", "Academy Awards"),
    ("5", "The Eiffel Tower in Paris was completed in 1889.", "Eiffel Tower"),
    ("6", "Mount Everest is the highest mountain above sea level.", "Mount Everest"),
    ("7", 'The song "Tom\'s Diner" was written by Suzanne Vega.', "Tom's Diner"),
]
QUESTIONS = [  # question, answers, the passages whose text holds an answer (by construction)
    ("who starred in forrest gump", ["Tom Hanks"], {"3"}),
    ("what is the capital of france", ["Paris"], {"1", "5"}),
    ("what is the longest river in france", ["Loire", "Loire River"], {"2"}),
    ("what is the tallest mountain in africa", ["Kilimanjaro"], set()),
    ("which awards did forrest gump win", ["Academy Awards"], set()),  # only a title says it: not counted
    ("who wrote tom's diner", ["Suzanne Vega"], {"7"}),
    ("what song did suzanne vega write", ["Tom's Diner"], {"7"}),  # the qa line is CSV-quoted
    ("when was the eiffel tower finished", ["1889"], {"5"}),
    ("what is france", ["FRANCE"], {"1", "2"}),  # case-insensitive
]
TRUTH = {str(i): truth for i, (_, _, truth) in enumerate(QUESTIONS)}
ANSWERABLE = sum(1 for truth in TRUTH.values() if truth) / len(TRUTH)  # 7/9


def write_corpus(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        writer.writerows(PASSAGES)
    return path


def write_qas(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerows([question, repr(answers)] for question, answers, _ in QUESTIONS)
    return path


@pytest.fixture
def data(tmp_path) -> tuple[Path, Path]:
    return write_corpus(tmp_path / "psgs_w100.tsv"), write_qas(tmp_path / "nq-test.qa.csv")


def expected_accuracy(run: dict[str, dict[str, float]], ks) -> dict[int, float]:
    """Top-k accuracy from a run and ``TRUTH``: the rank of the first answering passage, per question."""
    from retromae_ir.runs import ranked

    first = {}
    for qid, truth in TRUTH.items():
        ranks = [rank for rank, (docid, _) in enumerate(ranked(run.get(qid, {}))) if docid in truth]
        first[qid] = ranks[0] if ranks else float("inf")
    return {k: sum(rank < k for rank in first.values()) / len(TRUTH) for k in ks}


# --- DPR's files --------------------------------------------------------------------------------------------------

def test_dpr_files_are_read_as_dpr_writes_them(data):
    corpus, qas = data
    assert '\t"The song ""Tom\'s Diner"" was written by Suzanne Vega."\t' in corpus.read_text()  # CSV-quoted
    docs = list(nq.iter_dpr_passages(corpus))
    assert [(d.docid, d.text, d.title) for d in docs] == PASSAGES  # header skipped, quoting undone
    docids, texts = nq.read_dpr_corpus(corpus)
    assert texts[0] == "Paris Paris is the capital and largest city of France."  # title + " " + text
    assert '"[""Tom\'s Diner""]"' in qas.read_text()
    questions = nq.load_dpr_questions(qas)
    assert [(q.qid, q.question, list(q.answers)) for q in questions] == \
        [(str(i), question, answers) for i, (question, answers, _) in enumerate(QUESTIONS)]


@pytest.mark.parametrize("line, message", [
    ("7\tonly two columns\n", r"psgs\.tsv:3: expected 'id<TAB>text<TAB>title' \(3 tab-separated columns\), got 2"),
    ("1\tagain\tParis\n", r"psgs\.tsv:3: duplicate passage id '1'"),
    ('8\t"unclosed\tx\n9\ty\tz\n', r"psgs\.tsv:\d+:"),
])
def test_a_malformed_corpus_line_is_named(tmp_path, line, message):
    path = tmp_path / "psgs.tsv"
    path.write_text("id\ttext\ttitle\n1\tParis is a city.\tParis\n" + line)
    with pytest.raises(DataFormatError, match=message):
        nq.read_dpr_corpus(path)


def test_byte_order_marks_are_read_as_the_other_readers_read_them(tmp_path):
    """A mark starting the file is no part of the header (it read as a passage named '\ufeffid'); one starting a
    later line (files joined with cat) is an error naming it, not an id no run could match."""
    path = tmp_path / "psgs.tsv"
    path.write_text("\ufeffid\ttext\ttitle\n1\tParis is a city.\tParis\n", encoding="utf-8")
    assert nq.read_dpr_corpus(path) == (["1"], ["Paris Paris is a city."])
    path.write_text("id\ttext\ttitle\n1\tParis is a city.\tParis\n\ufeff2\tRome.\tRome\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"psgs\.tsv:3: a byte-order mark starts this line"):
        nq.read_dpr_corpus(path)


def test_bad_bytes_bad_gzip_and_empty_files_are_named(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_bytes(b"id\ttext\ttitle\n1\tgood\tt\n2\tbad \xff byte\tt\n")
    with pytest.raises(DataFormatError, match=r"psgs\.tsv:3: not valid UTF-8"):
        nq.read_dpr_corpus(path)
    gzipped = tmp_path / "psgs.tsv.gz"
    gzipped.write_bytes(gzip.compress(write_corpus(tmp_path / "good.tsv").read_bytes())[:-12])  # truncated
    with pytest.raises(DataFormatError, match=r"psgs\.tsv\.gz:\d+: not a valid gzip file"):
        nq.read_dpr_corpus(gzipped)
    gzipped.write_bytes(gzip.compress((tmp_path / "good.tsv").read_bytes()))
    assert nq.read_dpr_corpus(gzipped) == nq.read_dpr_corpus(tmp_path / "good.tsv")
    (tmp_path / "empty.tsv").write_text("id\ttext\ttitle\n")
    with pytest.raises(DataFormatError, match=r"empty\.tsv: no passages"):
        nq.read_dpr_corpus(tmp_path / "empty.tsv")


@pytest.mark.parametrize("line, message", [
    ("who\t['a'\n", r"qa\.csv:2: answers .* are not a Python list literal"),
    ("who\t[]\n", r"qa\.csv:2: answers must be a non-empty list"),
    ("who\t'a'\n", r"qa\.csv:2: answers must be a non-empty list"),
    ("who\n", r"qa\.csv:2: expected 'question<TAB>answers' \(2 tab-separated columns\), got 1"),
])
def test_a_malformed_question_line_is_named(tmp_path, line, message):
    path = tmp_path / "qa.csv"
    path.write_text("what is it\t['it']\n" + line)
    with pytest.raises(DataFormatError, match=message):
        nq.load_dpr_questions(path)


# --- has_answer, the DPR JSON and Pyserini's evaluator ---------------------------------------------------------

def test_has_answer_is_dprs_rule_through_pyserini(data):
    corpus, qas = data
    questions = {q.qid: q for q in nq.load_dpr_questions(qas)}
    matcher = nq.AnswerMatcher(questions, nq.passage_texts(corpus, [docid for docid, _, _ in PASSAGES]))
    for qid, truth in TRUTH.items():
        assert {docid for docid, _, _ in PASSAGES if matcher(qid, docid)} == truth, qid
    partial = nq.AnswerMatcher({"q": nq.Question("q", "x", ("Pari",))}, {"1": PASSAGES[0][1]})
    assert not partial("q", "1")  # whole tokens only


def test_retrieval_json_is_scored_by_pyserinis_evaluator_exactly(data, tmp_path):
    """A hand-made run with known first-answer ranks: the accuracies are exact fractions of the 9 questions."""
    corpus, qas = data
    questions = nq.load_dpr_questions(qas)
    run = {"0": {"6": 3.0, "3": 2.0, "1": 1.0},  # answer at rank 2
           "1": {"5": 9.0},  # rank 1
           "2": {"1": 5.0, "3": 4.0, "4": 3.0, "5": 2.5, "6": 2.0, "2": 1.0},  # rank 6
           "3": {"1": 1.0, "2": 0.5},  # never answerable
           "7": {"5": 1.0, "1": 1.0}}  # tie: "1" ranks first (docid order), "5" second
    # questions 4, 5, 6, 8 have no hits at all: misses, still counted
    texts = nq.passage_texts(corpus, {docid for hits in run.values() for docid in hits})
    retrieval = nq.dpr_retrieval(run, questions, nq.AnswerMatcher({q.qid: q for q in questions}, texts), depth=100)
    assert sorted(retrieval, key=int) == [str(i) for i in range(9)]
    assert [c["docid"] for c in retrieval["0"]["contexts"]] == ["6", "3", "1"]
    assert [c["has_answer"] for c in retrieval["7"]["contexts"]] == [False, True]
    assert retrieval["4"]["contexts"] == []
    path = nq.write_dpr_retrieval(tmp_path / "dense.dpr.json", retrieval)
    assert json.loads(path.read_text()) == retrieval
    accuracy = nq.top_k_accuracy(path, [1, 2, 5, 6, 100])
    assert accuracy == {1: round(1 / 9, 4), 2: round(3 / 9, 4), 5: round(3 / 9, 4), 6: round(4 / 9, 4),
                        100: round(4 / 9, 4)}
    assert accuracy == {k: round(v, 4) for k, v in expected_accuracy(run, [1, 2, 5, 6, 100]).items()}


# --- the driver ----------------------------------------------------------------------------------------------------

def card_file(tmp_path: Path, checkpoint: Path, kind: str) -> Path:
    path = tmp_path / f"tiny-{kind}.yaml"
    path.write_text(yaml.safe_dump({"checkpoint": str(checkpoint), "kind": kind, "dims": 32, "k": 64,
                                    "pooling": "cls", "normalize": False, "max_query_length": 32,
                                    "max_passage_length": 64}))
    return path


def test_driver_end_to_end_dense_sparse_hybrid(data, tmp_path, tiny_bert_dir, monkeypatch):
    """``eval/nq.py`` as a user runs it, with a DupMAE card: three TREC runs, three DPR JSON files and the table,
    whose accuracies are those of the written runs under ``TRUTH``; dense top-20/top-100 are exactly 7/9."""
    corpus, qas = data
    out, index = tmp_path / "out", tmp_path / "index"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "eval/nq.py", "--encoder", str(card_file(tmp_path, tiny_bert_dir, "dupmae")),
                           "--corpus", str(corpus), "--qas", str(qas), "--output", str(out), "--index-dir", str(index),
                           "--threads", "1", "--batch-size", "4", "--device", "cpu", "--dtype", "fp32"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    import pandas as pd

    table = pd.read_csv(out / "nq-results.csv")
    assert list(table["mode"]) == ["dense", "sparse", "hybrid"] and set(table["questions"]) == {9}
    for row in table.to_dict("records"):
        run_file = out / f"{row['mode']}.trec"
        assert validate_trec_run(run_file).topics == 9 - row["without hits"]
        run = read_trec_run(run_file)
        expected = expected_accuracy(run, nq.TOP_K)
        assert {k: row[f"top-{k}"] for k in nq.TOP_K} == pytest.approx({k: round(v, 4) for k, v in expected.items()},
                                                                        abs=1e-9)
        retrieval = json.loads((out / f"{row['mode']}.dpr.json").read_text())
        assert len(retrieval) == 9
        for qid, entry in retrieval.items():
            assert [c["docid"] for c in entry["contexts"]] == list(run.get(qid, {}))
            assert [c["has_answer"] for c in entry["contexts"]] == [c["docid"] in TRUTH[qid] for c in entry["contexts"]]
    dense = table.set_index("mode").loc["dense"]
    assert dense["top-20"] == dense["top-100"] == round(ANSWERABLE, 4) == 0.7778
    assert "| dense |" in (out / "nq-results.md").read_text()
    assert f"dense index Flat ({index})" in (out / "nq-results.md").read_text()
    assert set(table["dense index"]) == {"Flat"}

    # an index whose dense side was rebuilt is searched as it is, and the table says which it was
    from retromae_ir.encode.dense_index import rebuild_dense

    rebuild_dense(index, "SQfp16")
    assert run_main(["--encoder", str(card_file(tmp_path, tiny_bert_dir, "dupmae")), "--corpus", str(corpus),
                     "--qas", str(qas), "--output", str(out), "--index-dir", str(index), "--threads", "1",
                     "--batch-size", "4", "--device", "cpu", "--dtype", "fp32", "--modes", "dense"]) == 0
    assert f"dense index SQfp16 ({index})" in (out / "nq-results.md").read_text()
    assert list(pd.read_csv(out / "nq-results.csv")["dense index"]) == ["SQfp16"]
    assert json.loads((index / "manifest.json").read_text())["dense_index"] == "SQfp16"  # reused, not merged again

    # a dense-only run into the same folder leaves no sparse or hybrid files of the run before beside its own
    assert run_main(["--encoder", str(card_file(tmp_path, tiny_bert_dir, "dupmae")), "--corpus", str(corpus),
                     "--qas", str(qas), "--output", str(out), "--index-dir", str(index), "--threads", "1",
                     "--batch-size", "4", "--device", "cpu", "--dtype", "fp32", "--modes", "dense"]) == 0
    assert sorted(path.name for path in out.glob("*.trec")) == ["dense.trec"]
    assert not list(out.glob("*.dpr.json"))[1:] and (out / "dense.dpr.json").is_file()

    # a run that fails after rewriting a mode's files leaves no earlier table beside them
    assert (out / "nq-results.csv").is_file()
    monkeypatch.setattr(nq, "top_k_accuracy", lambda *args: (_ for _ in ()).throw(RuntimeError("scoring failed")))
    with pytest.raises(RuntimeError, match="scoring failed"):
        run_main(["--encoder", str(card_file(tmp_path, tiny_bert_dir, "dupmae")), "--corpus", str(corpus), "--qas",
                  str(qas), "--output", str(out), "--index-dir", str(index), "--threads", "1", "--batch-size", "4",
                  "--device", "cpu", "--dtype", "fp32", "--modes", "dense"])
    assert (out / "dense.trec").is_file() and not list(out.glob("nq-results.*"))


def error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines of a command's stderr (progress bars aside), checked to come without a traceback."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def run_main(argv: list[str]) -> int:
    """``eval/nq.py``'s ``main`` in this process (no interpreter start per call)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("eval_nq_driver", REPO / "eval" / "nq.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    return driver.main(argv)


def test_sharded_encoding_joins_to_the_single_process_result(data, tmp_path, tiny_bert_dir, capsys, caplog):
    """Two shards, then the join: the same run as one process; an unfinished shard is named; a rerun reuses."""
    caplog.set_level(logging.INFO)  # as the command's own logging.basicConfig sets it (in a process of its own)
    corpus, qas = data
    card = str(card_file(tmp_path, tiny_bert_dir, "cls-dense"))  # dense-only: no Lucene index, no JVM
    common = ["--encoder", card, "--corpus", str(corpus), "--qas", str(qas), "--threads", "1", "--device", "cpu",
              "--dtype", "fp32", "--chunk-size", "2", "--batch-size", "2"]
    sharded = common + ["--index-dir", str(tmp_path / "index-2"), "--output", str(tmp_path / "out-2")]
    assert run_main(sharded + ["--shard-id", "0", "--shard-count", "2"]) == 0
    assert "shard 0 of 2 encoded" in (tmp_path / "index-2" / "shard-0-of-2.log").read_text()  # a GPU job's log
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        run_main(sharded + ["--shard-count", "2"])
    assert stopped.value.code == 2
    error = error_lines(capsys.readouterr().err)
    assert len(error) == 1 and "shard 1 of 2 is not finished" in error[0] and "--shard-id 1" in error[0]
    assert run_main(sharded + ["--shard-id", "1", "--shard-count", "2"]) == 0
    at = sharded.index("--chunk-size")
    join = sharded[:at] + sharded[at + 2:] + ["--shard-count", "2"]
    assert run_main(join) == 0  # the join finds the shards whatever --chunk-size they were encoded with
    manifest = json.loads((tmp_path / "index-2" / "manifest.json").read_text())
    assert manifest["shards"] == 2 and manifest["documents"] == len(PASSAGES)

    assert run_main(common + ["--index-dir", str(tmp_path / "index-1"), "--output", str(tmp_path / "out-1")]) == 0
    one, two = read_trec_run(tmp_path / "out-1" / "dense.trec"), read_trec_run(tmp_path / "out-2" / "dense.trec")
    assert one.keys() == two.keys()
    for qid in one:
        assert list(one[qid]) == list(two[qid])
        assert list(one[qid].values()) == pytest.approx(list(two[qid].values()), rel=1e-5, abs=1e-5)
    assert (tmp_path / "out-1" / "nq-results.csv").read_text() == (tmp_path / "out-2" / "nq-results.csv").read_text()

    assert run_main(sharded + ["--shard-count", "2"]) == 0  # a rerun reuses the joined index
    assert json.loads((tmp_path / "index-2" / "manifest.json").read_text())["created"] == manifest["created"]


@pytest.mark.parametrize("case", ["qas-line", "corpus-line", "missing-corpus", "sparse-on-dense-card"])
def test_user_errors_are_one_line_and_exit_2(data, tmp_path, tiny_bert_dir, capsys, case):
    corpus, qas = data
    card = card_file(tmp_path, tiny_bert_dir, "cls-dense")
    argv = ["--encoder", str(card), "--corpus", str(corpus), "--qas", str(qas), "--output", str(tmp_path / "out"),
            "--index-dir", str(tmp_path / "index"), "--threads", "1", "--device", "cpu", "--dtype", "fp32"]
    expected = {"qas-line": f"{qas}:3: answers", "corpus-line": f"{corpus}:4: expected 'id<TAB>text<TAB>title'",
                "missing-corpus": f"{tmp_path / 'nowhere.tsv'}: no such file (--corpus)",
                "sparse-on-dense-card": "is dense-only: --modes sparse needs a sparse side"}[case]
    if case == "qas-line":
        qas.write_text("\n".join(qas.read_text().splitlines()[:2] + ["who\tTom Hanks"]) + "\n")
    elif case == "corpus-line":
        corpus.write_text("\n".join(corpus.read_text().splitlines()[:3] + ["9\tno title"]) + "\n")
    elif case == "missing-corpus":
        argv[argv.index(str(corpus))] = str(tmp_path / "nowhere.tsv")
    else:
        argv += ["--modes", "sparse"]
    with pytest.raises(SystemExit) as stopped:
        run_main(argv)
    assert stopped.value.code == 2
    error = error_lines(capsys.readouterr().err)
    assert len(error) == 1 and expected in error[0], error
    assert not (tmp_path / "out").exists()  # nothing that looks like a result


def test_an_index_rebuilt_by_another_run_between_check_and_search_is_refused(data, tmp_path, tiny_bert_dir):
    """Two runs share the default ``--index-dir`` with other corpora: the second rebuilds the folder after the first
    checked it under the lock. The first's search refuses the swapped index (it searched it, exit 0, and scored its
    questions against the other corpus's passages)."""
    from retromae_ir.encode import EncoderModel

    corpus, qas = data
    other = tmp_path / "other.tsv"
    rows = corpus.read_text(encoding="utf-8").splitlines()
    other.write_text("\n".join([rows[0], *reversed(rows[1:])]) + "\n", encoding="utf-8")  # same ids, other texts
    model = EncoderModel.from_card(str(card_file(tmp_path, tiny_bert_dir, "cls-dense")), device="cpu", bf16=False)
    index = tmp_path / "index"
    checked = nq.build_index(model, corpus, index)
    questions = nq.load_dpr_questions(qas)
    nq.search(model, index, "dense", questions, hits=3, checked=checked)  # the index it checked: searched
    nq.build_index(model, other, index)  # another run's corpus, into the same folder
    with pytest.raises(RuntimeError, match="was replaced by another process while this one opened it"):
        nq.evaluate_modes(model, index, corpus, questions, ["dense"], tmp_path / "out", ks=[1], hits=1,
                          checked=checked)


def test_the_driver_refuses_hits_0_instead_of_reading_it_as_unset(tmp_path, capsys):
    """--hits 0 became the largest --top-k, past the range check right after it (exit 0 at another depth)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nq_driver", Path(__file__).resolve().parents[2] / "eval" / "nq.py")
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    base = ["--encoder", "minilm-mean", "--corpus", "c.tsv", "--qas", "q.csv", "--top-k", "5", "20"]
    assert driver.parse_args(base).hits == 20
    with pytest.raises(SystemExit):
        driver.parse_args([*base, "--hits", "0"])
    assert r"--hits must be in [20, 1000]" in capsys.readouterr().err


def test_the_default_output_is_in_the_card_runs_folder_and_claims_it(data, tmp_path, tiny_bert_dir, capsys,
                                                                      monkeypatch):
    """``runs/<card>/nq`` sits in the folder where BEIR and TREC DL keep that card's runs: a card of the same name
    over another checkpoint wrote its NQ results beside them, under one title (exit 0). The run records the card's
    checkpoint there (as ``evaluation_session`` does) and refuses another's folder; a failed run takes its record
    back."""
    from retromae_ir.evaluate.retrievers import OWNER_FILE, claim_runs_folder

    corpus, qas = data
    monkeypatch.chdir(tmp_path)
    card = card_file(tmp_path, tiny_bert_dir, "cls-dense")
    argv = ["--encoder", str(card), "--corpus", str(corpus), "--qas", str(qas), "--index-dir", str(tmp_path / "ix"),
            "--threads", "1", "--device", "cpu", "--dtype", "fp32"]
    runs = tmp_path / "runs" / "tiny-cls-dense"

    corpus_text = corpus.read_text()
    corpus.write_text(corpus_text + "9\tno title\n")
    with pytest.raises(SystemExit) as stopped:  # fails after the claim (a bad passage line): nothing is left
        run_main(argv)
    assert stopped.value.code == 2 and not (runs / OWNER_FILE).exists() and not (runs / "nq").exists()
    corpus.write_text(corpus_text)
    capsys.readouterr()

    other = {"retriever": "encoder", "kind": "cls-dense", "mode": "dense", "checkpoint": "elsewhere", "weights": None}
    claim_runs_folder(runs, other)
    with pytest.raises(SystemExit) as stopped:
        run_main(argv)
    assert stopped.value.code == 2
    error = error_lines(capsys.readouterr().err)
    assert len(error) == 1 and "holds the runs of another retriever" in error[0], error
    assert not (runs / "nq").exists() and json.loads((runs / OWNER_FILE).read_text()) == other

    (runs / OWNER_FILE).unlink()
    assert run_main(argv) == 0
    owner = json.loads((runs / OWNER_FILE).read_text())
    assert owner["checkpoint"] == str(tiny_bert_dir) and owner["mode"] == "dense"
    assert (runs / "nq" / "dense.trec").is_file()
