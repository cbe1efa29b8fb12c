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
