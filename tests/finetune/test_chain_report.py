"""retromae_ir.chain: chains from YAML, setting overrides, the results tables and the plot, on fixed inputs."""
from __future__ import annotations

import pytest

from retromae_ir.chain import report as chain
from retromae_ir.chain.config import CHAINS_FILE, ChainConfig, load_chains
from retromae_ir.chain.stages import run_in_lockstep

RESULTS = {
    "0-pretrain": {"wall_s": 240.4},
    "1-bm25-negatives": {"wall_s": 61.0},
    "1-stage1": {"wall_s": 300.0, "eval_wall_s": 420.0,
                 "dense": {"ndcg@10": 0.5, "recall@100": 0.8},
                 "sparse": {"ndcg@10": 0.25, "recall@100": 0.7},
                 "hybrid": {"ndcg@10": 0.6, "recall@100": 0.9}},
}
ABLATION = {"1-stage1": {"wall_s": 290.0, "eval_wall_s": 400.0,
                         "dense": {"ndcg@10": 0.4, "recall@100": 0.75},
                         "sparse": {"ndcg@10": 0.2, "recall@100": 0.6},
                         "hybrid": {"ndcg@10": 0.45, "recall@100": 0.8}}}


def test_set_converts_each_field_to_its_type():
    config = ChainConfig().replace(["epochs=0", "steps=7", "lr=1e-4", "pretrain=true", "ablation=true"])
    assert (config.steps, config.lr, config.ablation) == (7, 1e-4, True)
    with pytest.raises(ValueError, match="no chain setting 'stepz'"):
        ChainConfig().replace(["stepz=3"])
    assert ChainConfig().replace(["distill=on", "ablation=No"]).distill is True
    for assignment in ("distill", "distill=", "distill=y", "distill=enabled"):  # never a silent False
        with pytest.raises(ValueError, match=rf"--set {assignment}: a yes/no setting takes one of 1, true"):
            ChainConfig().replace([assignment])
    for assignment, message in (("lr=nan", "lr must be a finite number, got 'nan'"),
                                ("steps=2.5", "steps takes a whole number, got '2.5'")):
        with pytest.raises(ValueError, match=rf"--set {assignment}: {message}"):
            ChainConfig().replace(["epochs=0", assignment])
    assert ChainConfig().replace(["group=1"]).group == 1  # stage 2 alone: in-batch negatives still train it
    with pytest.raises(ValueError, match="distill needs group >= 2"):  # the cross-encoder and distillation do not
        ChainConfig().replace(["group=1", "distill=true"])


@pytest.mark.parametrize("setting, message", [
    ('distill: "false"', None),  # the string "false" counted as true: distillation ran
    ("distill: maybe", "a yes/no setting takes one of 1, true.*got 'maybe'"),
    ("lr: 2e-5", None),  # YAML 1.1 reads it as text
    ("lr: .nan", "lr must be a finite number, got nan"),
    ("group: 8.0", "group takes a whole number, got 8.0"),
    ("batch: true", "batch takes a whole number, got True"),
    ("teacher: 12", "teacher takes text, got 12"),
    ("teacher:", None),  # YAML's empty value: no teacher, as before
    ("group: " + "9" * 400, "group takes a whole number"),  # math.isfinite overflowed: a traceback
])
def test_a_chain_entry_setting_is_read_as_its_fields_type(tmp_path, setting, message):
    path = tmp_path / "chains.yaml"
    path.write_text(f"chains:\n  mine:\n    dataset: nfcorpus\n    settings:\n      {setting}\n")
    if message is not None:
        with pytest.raises(ValueError, match=rf"chains.yaml: chain 'mine': {message}"):
            load_chains(path)
        return
    config = load_chains(path)["mine"].config
    assert (config.distill, config.lr, config.teacher) == (False, 2e-5 if "lr" in setting else ChainConfig().lr, "")


def test_packaged_chains_override_the_defaults_they_name():
    chains = load_chains(CHAINS_FILE)
    assert {"scifact-quick", "scifact-short", "scifact-short-pretrain", "scifact-full"} <= set(chains)
    assert chains["scifact-short"].config == ChainConfig()
    quick = chains["scifact-quick"]
    assert (quick.dataset, quick.config.corpus_docs, quick.config.pretrain) == ("scifact", 1000, False)
    assert chains["scifact-short-pretrain"].config.pretrain


def test_a_chain_with_an_unknown_setting_is_refused_naming_file_and_chain(tmp_path):
    path = tmp_path / "chains.yaml"
    path.write_text("chains:\n  mine:\n    dataset: nfcorpus\n    settings: {epochz: 2}\n")
    with pytest.raises(ValueError, match=r"chains.yaml: chain 'mine': unknown key\(s\) settings.epochz"):
        load_chains(path)
    path.write_text("chains:\n  mine:\n    dataset: nfcorpus\n    settings: {epochs: 2}\n")
    assert load_chains(path)["mine"].config.epochs == 2
    path.write_text("chains:\n  mine:\n    dataset: nfcorpus\nsettings: {epochs: 2}\n")  # dedented: dropped unread
    with pytest.raises(ValueError, match=r"chains.yaml: unknown top-level key\(s\) settings"):
        load_chains(path)


def test_a_chain_or_setting_given_twice_is_refused(tmp_path):
    """PyYAML kept the last of two equal keys: the chain ran its second definition, or its second value."""
    path = tmp_path / "chains.yaml"
    path.write_text("chains:\n  mine:\n    dataset: nfcorpus\n  mine:\n    dataset: scifact\n")
    with pytest.raises(ValueError, match=r"chains.yaml: cannot read the chains: line 4: the key 'mine' is "
                                         r"given twice \(first on line 2\)$"):
        load_chains(path)
    path.write_text("chains:\n  mine:\n    dataset: nfcorpus\n    settings:\n      epochs: 2\n      epochs: 3\n")
    with pytest.raises(ValueError, match=r"line 6: the key 'epochs' is given twice \(first on line 5\)"):
        load_chains(path)


def test_results_table_puts_each_mode_in_its_column():
    rows = [{"system": "BM25", "sparse": {"ndcg@10": 0.6789, "recall@100": 0.9253}}]
    rows += chain.stage_rows([("pre-trained", RESULTS)])
    lines = chain.results_table(rows).splitlines()
    assert lines[0] == ("| system | ndcg@10 dense | ndcg@10 sparse | ndcg@10 hybrid | recall@100 dense | "
                        "recall@100 sparse | recall@100 hybrid |")
    assert lines[2] == "| BM25 |  | 0.6789 |  |  | 0.9253 |  |"
    assert lines[3] == "| pre-trained: 1-stage1 | 0.5000 | 0.2500 | 0.6000 | 0.8000 | 0.7000 | 0.9000 |"
    assert len(lines) == 4  # stages without an evaluation (pre-training, mining) are not rows


def test_wall_table_sums_training_and_evaluation():
    lines = chain.wall_table([("pre-trained", RESULTS), ("ablation", ABLATION)]).splitlines()
    assert lines[0] == "| stage | pre-trained | ablation |"
    assert lines[2] == "| 0-pretrain | 240 | - |"
    assert lines[4] == "| 1-stage1 | 300 + eval 420 | 290 + eval 400 |"
    assert lines[-1] == "| total | 17.0 min | 11.5 min |"


def test_report_takes_baselines_from_the_main_chain_and_writes_table_and_plot(tmp_path):
    bm25 = {"wall_s": 20.0, "eval_wall_s": 20.0, "sparse": {"ndcg@10": 0.6789, "recall@100": 0.9253}}

    class Done:
        def __init__(self, label, results):
            self.label, self.results = label, results

        def reported_results(self):
            return self.results

    text = chain.report([Done("pre-trained", {"baseline-bm25": bm25, **RESULTS}), Done("ablation", ABLATION)],
                        tmp_path, "scifact, 1000-document judged sub-corpus")
    heading, chains, table = text.split("\n\n")[:3]
    assert heading == "# scifact, 1000-document judged sub-corpus"  # which corpus the figures are of
    assert chains == "Chains: pre-trained, ablation (test split; the baselines are the first chain's)."
    table = table.splitlines()
    assert table[2] == "| BM25 flat (Pyserini) |  | 0.6789 |  |  | 0.9253 |  |"  # MiniLM not evaluated: no row
    assert [line.split(" |")[0] for line in table[3:]] == ["| pre-trained: 1-stage1", "| ablation: 1-stage1"]
    assert "| baseline-bm25 | 20 + eval 20 | - |" in text  # the baselines' wall time is reported too
    assert ("Against the anchors (ndcg@10, test), 1-stage1: dense 0.5000 (-0.1789 vs BM25 flat): NOT above BM25 "
            "flat; sparse 0.2500 (-0.4289 vs BM25 flat): NOT above BM25 flat; hybrid 0.6000 (-0.0789 vs BM25 flat): "
            "NOT above BM25 flat (not evaluated, so not judged against: all-MiniLM-L6-v2 off the shelf).") in text
    assert (tmp_path / "results.md").read_text() == text
    assert (tmp_path / "chain.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chains_advance_one_stage_at_a_time():
    order = []

    class Fake:
        def __init__(self, name, stages):
            self.name, self.stages = name, stages

        def run(self):
            for stage in range(self.stages):
                order.append((self.name, stage))
                yield

    run_in_lockstep([Fake("main", 3), Fake("ablation", 2)])
    assert order == [("main", 0), ("ablation", 0), ("main", 1), ("ablation", 1), ("main", 2)]


def test_plot_places_each_stage_by_its_pipeline_number():
    """The ablation starts at 0-start where the main chain starts at 0-pretrain: both sit at the first place, so
    neither chain's line runs back across the plot."""
    main = {"0-pretrain": {"eval_wall_s": 1}, "1-stage1": {"eval_wall_s": 1}, "3-distill": {"eval_wall_s": 1}}
    ablation = {"0-start": {"eval_wall_s": 1}, "1-stage1": {"eval_wall_s": 1}, "2-stage2": {"eval_wall_s": 1}}
    assert chain.stage_ticks([("main", main), ("ablation", ablation)]) == {
        0: "pretrain / start", 1: "stage1", 2: "stage2", 3: "distill"}


def test_only_what_a_run_made_or_found_current_is_reported():
    """A stage this run skipped (distillation switched off) keeps its record, not its rows: they were made from
    outputs since made again; a stage made but not evaluated this run shows its wall time without metrics."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import Chain

    distill = {"wall_s": 50.0, "eval_wall_s": 9.0, "hybrid": {"ndcg@10": 0.7, "recall@100": 0.9}}
    results = {**RESULTS, "3-distill": distill}
    run = SimpleNamespace(results=results, made={"0-pretrain", "1-stage1"}, evaluated={"1-stage1"})
    assert Chain.reported_results(run) == {"0-pretrain": RESULTS["0-pretrain"], "1-stage1": RESULTS["1-stage1"]}
    run = SimpleNamespace(results=results, made={"1-stage1", "3-distill"}, evaluated={"1-stage1"})
    assert Chain.reported_results(run) == {"1-stage1": RESULTS["1-stage1"], "3-distill": {"wall_s": 50.0}}


def test_the_anchor_verdict_names_each_mode_against_each_baseline():
    baselines = [{"system": "BM25 flat (Pyserini)", "sparse": {"ndcg@10": 0.80}},
                 {"system": "all-MiniLM-L6-v2 off the shelf (mean pooling)", "dense": {"ndcg@10": 0.79}}]
    results = {**RESULTS, "2-stage2": {"eval_wall_s": 1.0, "dense": {"ndcg@10": 0.795}, "hybrid": {"ndcg@10": 0.84}}}
    assert chain.anchor_verdict(results, baselines) == (
        "Against the anchors (ndcg@10, test), 2-stage2: dense 0.7950 (-0.0050 vs BM25 flat, +0.0050 vs "
        "all-MiniLM-L6-v2 off the shelf): NOT above BM25 flat; hybrid 0.8400 (+0.0400 vs BM25 flat, +0.0500 vs "
        "all-MiniLM-L6-v2 off the shelf): above every anchor.")
    # without BM25 (--no-lucene): it is named as not judged against, not counted among the anchors beaten
    assert chain.anchor_verdict(results, baselines[1:]) == (
        "Against the anchors (ndcg@10, test), 2-stage2: dense 0.7950 (+0.0050 vs all-MiniLM-L6-v2 off the shelf): "
        "above every anchor evaluated; hybrid 0.8400 (+0.0500 vs all-MiniLM-L6-v2 off the shelf): above every anchor "
        "evaluated (not evaluated, so not judged against: BM25 flat).")
    assert chain.anchor_verdict(results, []) == ("No anchor was evaluated, so 2-stage2 is judged against none (not "
                                                 "evaluated, so not judged against: BM25 flat and all-MiniLM-L6-v2 "
                                                 "off the shelf).")
    # a gap the table's 4 decimals round to 0 shows its first digit: "above" beside +0.0000 read as a tie
    close = {**RESULTS, "2-stage2": {"eval_wall_s": 1.0, "sparse": {"ndcg@10": 0.80004}}}
    assert "sparse 0.8000 (+4.0e-05 vs BM25 flat, +0.0100 vs all-MiniLM" in chain.anchor_verdict(close, baselines)
    assert chain.anchor_verdict({}, baselines) == ""


def test_a_gap_shows_the_first_digit_that_tells_it_from_a_tie():
    assert [chain.gap(d) for d in (0.0, 0.04, -0.00012, 4.9e-5, -1e-6)] == [
        "+0.0000", "+0.0400", "-0.0001", "+4.9e-05", "-1.0e-06"]
