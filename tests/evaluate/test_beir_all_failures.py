"""eval/beir_all.py's failures: an empty corpus, an explicit --data-dir without the dataset, a second writer of the
runs folder. Each exits 2 with a clear line and leaves no run file, nor the runs folder (none of them reaches
Lucene)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lock_holder import held_lock
from test_beir_suite import write_part

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "eval"))
import beir_all  # noqa: E402


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    monkeypatch.delenv("RETROMAE_IR_DATA", raising=False)
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path / "cache"))
    return ["--retriever", "bm25", "--datasets", "scifact", "--runs-dir", str(tmp_path / "runs"), "--index-dir",
            str(tmp_path / "indexes"), "--no-download"]


def test_empty_corpus_fails_and_caches_nothing(tmp_path, dirs, capsys):
    write_part(tmp_path / "data" / "scifact")
    (tmp_path / "data" / "scifact" / "corpus.jsonl").write_text("")
    for _ in range(2):
        with pytest.raises(SystemExit) as exit_:
            beir_all.main(dirs + ["--data-dir", str(tmp_path / "data")])
        captured = capsys.readouterr()
        assert exit_.value.code == 2 and "0.0000" not in captured.out
        assert "error: scifact:" in captured.err and "holds no documents" in captured.err
    assert not (tmp_path / "runs" / "bm25").exists() and not (tmp_path / "indexes").exists()


def test_explicit_data_dir_without_the_dataset_does_not_fall_back_to_the_environment(tmp_path, dirs, capsys,
                                                                                     monkeypatch):
    write_part(tmp_path / "env" / "scifact")
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "env"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_:
        beir_all.main(dirs + ["--data-dir", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "error: no dataset could be evaluated" in err and f"is not in --data-dir {tmp_path / 'empty'}" in err
    assert not (tmp_path / "runs" / "bm25").exists()


def test_second_writer_of_the_runs_folder_is_refused(tmp_path, dirs, capsys):
    with held_lock(tmp_path / "runs" / "bm25") as pid:
        with pytest.raises(SystemExit) as exit_:
            beir_all.main(dirs + ["--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"(PID {pid})" in err and "Traceback" not in err


def test_a_named_dataset_that_cannot_be_resolved_is_an_error_beside_the_others(tmp_path, dirs, capsys,
                                                                               monkeypatch):
    """--datasets scifact nfcorpus with nfcorpus nowhere: scifact's table is written, and the exit status is 2 (it
    used to be 0, with a one-dataset table standing for the two asked for)."""
    write_part(tmp_path / "env" / "scifact")
    (tmp_path / "env" / "scifact" / "queries.jsonl").write_text('{"_id": "q", "text": "b"}\n')  # BM25 finds b
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "env"))
    argv = dirs[:dirs.index("--datasets") + 2] + ["nfcorpus"] + dirs[dirs.index("--datasets") + 2:]
    assert beir_all.main(argv) == 2
    captured = capsys.readouterr()
    assert "| scifact |" in captured.out and "error: nfcorpus:" in captured.err
    assert (tmp_path / "runs" / "bm25" / "beir-scifact.trec").is_file()


def test_an_interrupted_suite_keeps_the_runs_it_finished(tmp_path, dirs, capsys, monkeypatch):
    """Ctrl-C at the second dataset of a first run removed the runs folder the session had created, the first
    dataset's finished run and the log with it; they stay, and the next invocation re-scores that run."""
    from retromae_ir.bm25 import BM25Retriever

    write_part(tmp_path / "data" / "scifact")
    write_part(tmp_path / "data" / "nfcorpus")
    for name in ("scifact", "nfcorpus"):
        (tmp_path / "data" / name / "queries.jsonl").write_text('{"_id": "q", "text": "b"}\n')  # BM25 finds b
    argv = dirs[:dirs.index("--datasets") + 2] + ["nfcorpus"] + dirs[dirs.index("--datasets") + 2:] + [
        "--data-dir", str(tmp_path / "data")]
    retrieve = BM25Retriever.retrieve

    def interrupted(self, corpus, *args, **kwargs):
        if "nfcorpus" in str(corpus):
            raise KeyboardInterrupt
        return retrieve(self, corpus, *args, **kwargs)

    monkeypatch.setattr(BM25Retriever, "retrieve", interrupted)
    with pytest.raises(KeyboardInterrupt):
        beir_all.main(argv)
    runs = tmp_path / "runs" / "bm25"
    assert sorted(path.name for path in runs.iterdir() if not path.name.startswith(".")) == [
        "beir-scifact.trec", "beir-scifact.trec.key.json", "beir.log", "retriever.json"]
    monkeypatch.setattr(BM25Retriever, "retrieve", retrieve)
    capsys.readouterr()
    assert beir_all.main(argv) == 0
    assert "reusing" in (runs / "beir.log").read_text() and "| scifact |" in capsys.readouterr().out


def test_a_failed_first_run_takes_back_only_what_it_added(tmp_path, dirs, monkeypatch):
    """The runs folder a failed session created was removed whole: eval/nq.py writing runs/<card>/nq beside it
    (locked on its own) lost its output. Only the session's record and log go, and the folder if that empties it."""
    from retromae_ir.bm25 import BM25Retriever

    write_part(tmp_path / "data" / "scifact")
    runs = tmp_path / "runs" / "bm25"

    def another_driver_writes_then_this_one_fails(self, corpus, *args, **kwargs):
        (runs / "nq").mkdir()
        (runs / "nq" / "dense.trec").write_text("")  # another driver's, not this session's
        raise KeyboardInterrupt

    monkeypatch.setattr(BM25Retriever, "retrieve", another_driver_writes_then_this_one_fails)
    with pytest.raises(KeyboardInterrupt):
        beir_all.main(dirs + ["--data-dir", str(tmp_path / "data")])
    assert sorted(str(path.relative_to(runs)) for path in runs.rglob("*")) == ["nq", "nq/dense.trec"]
