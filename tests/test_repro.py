"""The reproduction matrix: YAML loading and its errors, commands, OK/FAIL comparison, generated docs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from retromae_ir.repro.__main__ import main
from retromae_ir.repro.matrix import Condition, Matrix, compare, measured_scores, render_docs

YAML = """\
tolerance: 0.001
conditions:
  - name: bm25.tiny
    dataset: scifact
    retriever: bm25
    expected: {ndcg@10: 0.5, recall@100: 0.9}
  - name: dupmae.tiny
    dataset: nfcorpus
    encoder: dupmae-minilm
    search: hybrid
    expected: {ndcg@10: 0.3}
"""


@pytest.fixture()
def matrix_file(tmp_path) -> Path:
    path = tmp_path / "conditions.yaml"
    path.write_text(YAML)
    return path


def test_shipped_matrix_loads_and_has_the_bm25_reproduction():
    matrix = Matrix.load()
    assert matrix.conditions["bm25-flat.scifact"].expected == {"ndcg@10": 0.6789, "recall@100": 0.9253}


def test_the_shipped_encoder_condition_runs_in_the_precision_of_its_expected_scores():
    """Its scores are fp32's; under `--dtype auto` a bf16 host (AMX) measured 0.6471 against 0.6451 and FAILed."""
    command = Matrix.load().conditions["minilm-mean.scifact"].command(Path("R"))
    assert command[-2:] == ["--dtype", "fp32"]


def test_commands_and_dry_run(matrix_file, capsys):
    assert main(["--all", "--dry-run", "--conditions-file", str(matrix_file), "--runs-root", "R"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("--datasets scifact --runs-dir R/bm25.tiny --index-dir R/bm25.tiny/indexes --force "
                             "--retriever bm25")
    assert lines[1].endswith("--datasets nfcorpus --runs-dir R/dupmae.tiny --index-dir R/dupmae.tiny/indexes "
                             "--force --encoder dupmae-minilm --search hybrid")


def test_unknown_condition_is_an_error(matrix_file, capsys):
    assert main(["--condition", "nope", "--conditions-file", str(matrix_file)]) == 2
    assert "unknown condition(s): nope" in capsys.readouterr().err


@pytest.mark.parametrize("entry, message", [
    ("  - {name: a, dataset: scifact, expected: {}}\n", "exactly one of retriever / encoder"),
    ("  - {name: a, dataset: scifact, retriever: bm25, encoder: x, expected: {}}\n", "exactly one of"),
    ("  - {name: a, dataset: scifact, retriever: bm25, expected: {}, colour: red}\n", r"condition 1 \(a\).*colour"),
    # a search mode on bm25 was left out of the command: the check ran plain BM25 under a 'dense' label
    ("  - {name: a, dataset: scifact, retriever: bm25, search: dense, expected: {ndcg@10: 0.5}}\n",
     "'search' is an encoder's search mode; retriever 'bm25' has none"),
    # the runner empties RUNS_ROOT/<name>/: a name must not reach any other folder
    ("  - {name: .., dataset: scifact, retriever: bm25, expected: {}}\n", "must be one folder name"),
    ("  - {name: a/../.., dataset: scifact, retriever: bm25, expected: {}}\n", "must be one folder name"),
    ("  - {name: /x, dataset: scifact, retriever: bm25, expected: {}}\n", "must be one folder name"),
    ("  - {name: '', dataset: scifact, retriever: bm25, expected: {}}\n", "must be one folder name"),
    # another condition's output log (RUNS_ROOT/<name>.log) would be this one's folder
    ("  - {name: b.log, dataset: scifact, retriever: bm25, expected: {}}\n", "not ending in .log"),
])
def test_bad_condition_names_the_file_and_condition(tmp_path, entry, message):
    path = tmp_path / "bad.yaml"
    path.write_text("conditions:\n" + entry)
    with pytest.raises(ValueError, match=message):
        Matrix.load(path)


@pytest.mark.parametrize("text, key", [
    (YAML + "tolerance: 0.5\n", "tolerance"),  # loosened every check (the last value won)
    (YAML + "conditions:\n  - {name: c, dataset: scifact, retriever: bm25, expected: {ndcg@10: 0.1}}\n",
     "conditions"),  # the first list went unchecked
    ("conditions:\n  - name: a\n    dataset: scifact\n    retriever: bm25\n    expected: {ndcg@10: 0.6}\n"
     "    expected: {recall@100: 0.9}\n", "expected"),  # nDCG@10 went unchecked
    ("conditions:\n  - {name: a, dataset: scifact, retriever: bm25, expected: {ndcg@10: 0.6, ndcg@10: 0.1}}\n",
     "ndcg@10"),
])
def test_a_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path, text, key):
    path = tmp_path / "conditions.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"conditions.yaml: not valid YAML \(line \d+: the key '{key}' is given twice "
                                         r"\(first on line \d+\)\)$"):
        Matrix.load(path)


def test_scores_are_read_from_the_results_table_and_compared(tmp_path):
    condition = Condition(name="c", dataset="scifact", retriever="bm25", expected={"ndcg@10": 0.5, "recall@100": 0.9})
    csv = condition.results_csv(tmp_path)
    csv.parent.mkdir(parents=True)
    pd.DataFrame([{"dataset": "scifact", "queries": 3, "ndcg@10 (bm25)": 0.5004, "recall@100 (bm25)": 0.8},
                  {"dataset": "average (1 of 18)", "queries": 3, "ndcg@10 (bm25)": 0.5004,
                   "recall@100 (bm25)": 0.8}]).to_csv(csv, index=False)
    scores = measured_scores(condition, tmp_path)
    assert scores == {"ndcg@10": 0.5004, "recall@100": 0.8}
    assert compare(condition, scores, 0.001) == ["recall@100: expected 0.9000, got 0.8"]
    assert compare(condition, {"ndcg@10": 0.5004}, 0.001)[0] == "recall@100: expected 0.9000, got nothing"
    # an empty cell reads as NaN, which no tolerance test rejects by itself
    assert compare(condition, {"ndcg@10": float("nan"), "recall@100": 0.9}, 0.001) == [
        "ndcg@10: expected 0.5000, got nan"]


def test_a_score_just_past_the_tolerance_fails_as_the_suite_writes_it(tmp_path):
    """The table was read back at 4 decimals: 0.67836 against 0.6789 (a gap of 0.00054) read as 0.6784 and passed
    a tolerance of 0.0005. The CSV now holds the scores as measured."""
    from retromae_ir.evaluate.beir_suite import DatasetResult, write_results

    condition = Condition(name="c", dataset="scifact", retriever="bm25", expected={"ndcg@10": 0.6789})
    folder = condition.results_csv(tmp_path).parent
    folder.mkdir(parents=True)
    write_results([DatasetResult("scifact", "ok", {"ndcg@10": 0.67836, "recall@100": 0.92584}, 300)], "bm25", folder)
    scores = measured_scores(condition, tmp_path)
    assert scores["ndcg@10"] == 0.67836
    assert compare(condition, scores, 0.0005) == ["ndcg@10: expected 0.6789, got 0.67836"]
    assert compare(condition, scores, 0.0006) == []


def test_docs_show_every_condition_with_its_command(matrix_file):
    text = render_docs(Matrix.load(matrix_file), Path("runs/repro"))
    assert "| bm25.tiny | scifact | 0.5000 | 0.9000 |" in text
    assert "| dupmae.tiny | nfcorpus | 0.3000 | – |" in text
    assert ("python eval/beir_all.py --datasets nfcorpus --runs-dir runs/repro/dupmae.tiny --index-dir "
            "runs/repro/dupmae.tiny/indexes --force --encoder dupmae-minilm") in text


def write_scores(csv: Path, ndcg: float) -> None:
    csv.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"dataset": "scifact", "queries": 3, "ndcg@10 (bm25)": ndcg, "recall@100 (bm25)": 0.9}]).to_csv(
        csv, index=False)


def test_a_relative_runs_root_is_read_where_the_command_wrote_it(tmp_path, monkeypatch):
    """The command runs in the repository; called from another folder holding an older table under the same
    relative path, the runner must read the table its command just wrote, not the old one; and the command starts
    from an empty folder (a run file left there was re-scored, not re-run: caches are keyed by data, not code)."""
    import retromae_ir.repro.matrix as matrix

    condition = Condition(name="c", dataset="scifact", retriever="bm25", expected={"ndcg@10": 0.5})
    monkeypatch.chdir(tmp_path)
    write_scores(condition.results_csv(Path("runs")), 0.1)  # stale, beside the caller
    # beside it, an older run of the same condition's run file and index
    (tmp_path / "runs" / "c" / "bm25" / "beir-scifact.trec").write_text("q 0 d 1 9.0 old\n")
    (tmp_path / "runs" / "c" / "indexes").mkdir()

    def fake_run(command, on_line, cwd):
        runs_dir = Path(command[command.index("--runs-dir") + 1])
        # nothing of an older run is left for eval/beir_all.py to re-score or reuse
        assert not (Path(cwd) / runs_dir).exists()
        assert Path(command[command.index("--index-dir") + 1]) == Path(cwd) / runs_dir / "indexes"
        write_scores(Path(cwd) / runs_dir / condition.label / "beir-results.csv", 0.5)
        on_line("scored")
        return type("Done", (), {"returncode": 0, "stdout": "scored\n"})()

    monkeypatch.setattr(matrix, "run_child", fake_run)
    monkeypatch.setattr(matrix, "REPO", tmp_path / "repo")
    outcome = matrix.run_condition(condition, Path("runs"), 0.001)
    assert outcome.scores["ndcg@10"] == 0.5 and not outcome.failures
    assert (tmp_path / "runs" / "c.log").read_text().splitlines()[1:] == ["scored", "exit 0"]


def test_a_failed_condition_keeps_the_commands_whole_output_in_its_log(tmp_path):
    """The runner showed only the last 2,000 characters of a failed command's stderr, and a long condition's
    output went nowhere: it is in RUNS/<condition>.log, line by line as it comes, with the command and exit."""
    import retromae_ir.repro.matrix as matrix

    condition = Condition(name="c", dataset="scifact", retriever="bm25", expected={"ndcg@10": 0.5},
                          extra_args=("--threads", "0"))  # refused by the driver: exit 2
    outcome = matrix.run_condition(condition, tmp_path / "runs", 0.001)
    log = (tmp_path / "runs" / "c.log").read_text().splitlines()
    assert log[0].startswith("$ ") and "--threads 0" in log[0] and log[-1] == "exit 2"
    assert any("--threads must be >= 1, got 0" in line for line in log)
    assert not outcome.ok and f"(all of it: {tmp_path / 'runs' / 'c.log'})" in outcome.failures[0]


def test_a_bm25_condition_with_other_parameters_reads_their_folder():
    """eval/beir_all.py writes other k1/b to runs/bm25-k1_<k1>-b_<b>/: the condition looks there for its table."""
    from retromae_ir.repro.matrix import Condition

    assert Condition(name="c", dataset="scifact", retriever="bm25", expected={}).label == "bm25"
    assert Condition(name="c", dataset="scifact", retriever="bm25", expected={},
                     extra_args=("--k1", "1.2", "--b", "0.75", "--threads", "1")).label == "bm25-k1_1.2-b_0.75"


def test_a_condition_folder_that_is_a_symlink_is_refused_not_reused(tmp_path, monkeypatch):
    """rmtree leaves a symbolic link's target alone: the old runs there would be re-scored and pass."""
    import retromae_ir.repro.matrix as matrix

    condition = Condition(name="c", dataset="scifact", retriever="bm25", expected={"ndcg@10": 0.5})
    write_scores(condition.results_csv(tmp_path / "elsewhere"), 0.5)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "c").symlink_to(tmp_path / "elsewhere" / "c")
    monkeypatch.setattr(matrix, "run_child", lambda *a, **k: pytest.fail("nothing may run"))
    outcome = matrix.run_condition(condition, tmp_path / "runs", 0.001)
    assert not outcome.ok and "is a symbolic link" in outcome.failures[0]
    assert (tmp_path / "elsewhere" / "c" / "bm25" / "beir-results.csv").is_file()
