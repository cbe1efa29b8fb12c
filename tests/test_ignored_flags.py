"""A flag accepted and then not read is refused: the command exited 0 and the user believed a setting took effect
(search's K' outside the hybrid search and mining's card-only flags with BM25 are tested beside their commands)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def exit_status(main, argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code, capsys.readouterr().err


def test_encode_data_dir_with_corpus(tmp_path, capsys):
    from retromae_ir.encode.__main__ import main

    code, err = exit_status(main, ["corpus", "--encoder", "minilm-cls", "--corpus", "c.jsonl", "--data-dir", "d",
                                   "--output", str(tmp_path / "index")], capsys)
    assert code == 2 and "--data-dir goes with --dataset (where to look for it), not --corpus" in err
    assert not (tmp_path / "index").exists()


def never_run(*args, **kwargs):  # where a refusal is missing, the test fails instead of running a real chain
    raise AssertionError("the chain was run")


def test_chain_data_dir_with_folder(tmp_path, capsys, monkeypatch):
    import retromae_ir.chain.__main__ as chain
    from retromae_ir.chain.__main__ import main

    monkeypatch.setattr(chain, "run", never_run)
    code, err = exit_status(main, ["--chain", "scifact-quick", "--folder", str(tmp_path), "--data-dir", "d",
                                   "--output", str(tmp_path / "out")], capsys)
    assert code == 2 and "--data-dir and --folder do not combine" in err


@pytest.mark.parametrize("settings, says", [({"ablation": True}, "ablation needs pretrain: true"),
                                            ({"teacher": "ce-dir"}, "teacher=ce-dir needs distill: true")])
def test_chain_settings_that_nothing_would_read(settings, says):
    from retromae_ir.chain.config import ChainConfig

    with pytest.raises(ValueError, match=says):
        ChainConfig(**settings)
    ChainConfig(**settings, pretrain=True, distill=True, group=2)  # read there


@pytest.mark.parametrize("assignments, says", [
    (["steps=50"], "steps is read by no stage of this chain: every fine-tuning stage trains for its epochs"),
    (["ce_steps=500", "ce_lr=1e-5"], "ce_steps, ce_lr are read by no stage of this chain: the chain trains its own "
                                     "cross-encoder teacher only with distill: true and no teacher given"),
    (["distill=true", "teacher=ce-dir", "ce_batch=4"], "ce_batch is read by no stage"),
    (["distill_lr=1e-4"], "distill_lr is read by no stage of this chain: the chain distils only with distill: true"),
    (["pretrain_steps=10"], "pretrain_steps is read by no stage of this chain: the chain pre-trains only with "
                            "pretrain: true"),
    (["sparse_loss_weight=0", "sparse_temperature=3"], "sparse_temperature is read by no stage"),
    (["sparse_weight=-0.5"], r"sparse_weight must be >= 0 \(0: chosen on the dev split\), got -0.5"),
    (["epochs_stage1=-1"], r"epochs_stage1 must be >= 0 \(0: epochs\)"),
    (["epochs=0"], "a fine-tuning stage with epochs 0 trains 'steps' steps, and steps is 0"),
])
def test_chain_settings_no_stage_reads_are_refused(assignments, says):
    """Accepted, ignored, and recorded in the stages' settings as if used (a later run with another value was
    refused over a setting nothing read); a negative value was read as 0."""
    from retromae_ir.chain.config import ChainConfig

    with pytest.raises(ValueError, match=f"chain settings: {says}"):
        ChainConfig().replace(assignments)


def test_a_chain_entrys_settings_an_override_switches_off_stay_allowed(tmp_path):
    """Only the settings an entry or --set names are checked: scifact-full sets ce_* and pretrain_*, and
    --set distill=false or pretrain=false ablation=false (documented) switch their stages off."""
    from retromae_ir.chain.config import load_chains

    full = load_chains()["scifact-full"].config
    assert not full.replace(["distill=false"]).distill
    assert not full.replace(["pretrain=false", "ablation=false"]).pretrain
    full.replace(["teacher=my/reranker"])
    full.replace([], pretrained=True)  # its pre-training settings came from the entry
    with pytest.raises(ValueError, match="ce_steps is read by no stage"):
        full.replace(["distill=false", "ce_steps=5"])
    chains = tmp_path / "chains.yaml"
    chains.write_text("chains:\n  mine:\n    dataset: nfcorpus\n    settings: {ce_steps: 5}\n")
    with pytest.raises(ValueError, match=r"chains.yaml: chain 'mine': chain settings: ce_steps is read by no stage"):
        load_chains(chains)


def test_chain_settings_read_where_their_stage_runs():
    from retromae_ir.chain.config import ChainConfig

    ChainConfig().replace(["epochs=0", "steps=50"])  # stage 2 trains 50 steps
    ChainConfig().replace(["distill=true", "ce_steps=500", "distill_lr=1e-4", "calibrate_teacher=false"])
    ChainConfig().replace(["pretrain=true", "pretrain_steps=10"])


def test_chain_pretrained_leaves_the_pretraining_settings_and_the_model_unread(tmp_path):
    from retromae_ir.chain.config import ChainConfig
    from retromae_ir.chain.stages import CHAIN_FILES, check_chain_inputs

    for name in CHAIN_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    pretrained = tmp_path / "pretrained"
    pretrained.mkdir()
    (pretrained / "config.json").write_text("{}")
    config = ChainConfig(pretrain=True)
    check_chain_inputs(tmp_path, config, pretrained)
    with pytest.raises(ValueError, match="pretrain_steps is read by no stage of this chain: the chain starts from "
                                         "--pretrained"):
        config.replace(["pretrain_steps=10"], pretrained=True)
    with pytest.raises(ValueError, match="--model my/model is read by no stage with --pretrained"):
        check_chain_inputs(tmp_path, config, pretrained, "my/model")
    check_chain_inputs(tmp_path, ChainConfig(pretrain=True, ablation=True), pretrained, "my/model")  # ablation's
    check_chain_inputs(tmp_path, ChainConfig(pretrain=True, distill=True), pretrained, "my/model")  # the teacher's


def test_chain_scifact_picks_its_own_chain(capsys, monkeypatch):
    import retromae_ir.chain.__main__ as chain

    monkeypatch.setattr(chain, "main", never_run)
    spec = importlib.util.spec_from_file_location("chain_scifact", REPO / "eval" / "chain_scifact.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for chain in (["--chain", "scifact-full"], ["--chain=scifact-full"]):
        code, err = exit_status(script.main, ["--config", "quick", *chain], capsys)
        assert code == 2 and "this driver runs scifact-<--config>" in err


@pytest.mark.parametrize("what", [["--list"], ["--docs", "page.md"]])
def test_repro_dry_run_runs_nothing_anyway(tmp_path, capsys, monkeypatch, what):
    from retromae_ir.repro.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main([*what, "--dry-run"]) == 2
    assert "--dry-run goes with --condition or --all" in capsys.readouterr().err
    assert not (tmp_path / "page.md").exists()
