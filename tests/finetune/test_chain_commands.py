"""The commands the chain runs carry only flags their command reads (a flag a command refuses would stop the
chain; one it ignored was recorded as if used): mining with BM25 gets no encoder-card flags, distillation gets
--mask-false-negatives only with a contrastive term to mask."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from retromae_ir.chain import stages
from retromae_ir.chain.config import ChainConfig
from retromae_ir.finetune.arguments import LossArguments
from retromae_ir.mine import MiningArguments


def fake_chain(tmp_path: Path, config: ChainConfig, commands: list, monkeypatch) -> types.SimpleNamespace:
    """What Chain.mine and Chain.finetune read of a chain, the command runner replaced by a recorder."""
    monkeypatch.setattr(stages, "command", lambda *argv, log_file: commands.append(list(argv)))
    chain = types.SimpleNamespace(config=config, output=tmp_path, corpus=tmp_path / "corpus.jsonl",
                                  train=["--queries", "q.jsonl", "--qrels", "train.tsv"], train_files=(),
                                  index_root=tmp_path / "indexes", bf16=False, lucene=False,
                                  log_file=tmp_path / "commands.log",
                                  timed=lambda name, done, run, **_: run() or done)
    chain.flags = types.MethodType(stages.Chain.flags, chain)
    return chain


def options(argv: list[str]) -> dict[str, str | bool]:
    """``--flag value`` / ``--flag`` pairs of a command line (after the module name)."""
    out, rest = {}, argv[1:]
    for i, arg in enumerate(rest):
        if arg.startswith("--"):
            value = rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("--") else True
            out[arg[2:].replace("-", "_")] = value
    return out


def test_bm25_mining_gets_no_card_flags_and_a_card_gets_them(tmp_path, monkeypatch):
    commands = []
    chain = fake_chain(tmp_path, ChainConfig(), commands, monkeypatch)
    stages.Chain.mine(chain, "1-bm25-negatives", "bm25")
    stages.Chain.mine(chain, "2-mined-negatives", str(tmp_path / "card.yaml"), "idx")
    bm25, card = (options(argv) for argv in commands)
    assert not {"dtype", "no_lucene", "mode"} & set(bm25)
    assert card["dtype"] == "fp32" and card["no_lucene"] is True
    for argv in (bm25, card):  # what mine's own argument check says of them
        MiningArguments(**{k: v for k, v in argv.items() if k in ("retriever", "dtype", "no_lucene")},
                        corpus="c", queries="q", qrels="r", output="o")


@pytest.mark.parametrize("weights, masked", [({"sparse_loss_weight": 0.0, "dense_loss_weight": 0.0}, False),
                                             ({"sparse_loss_weight": 0.0, "dense_loss_weight": 0.5}, True)])
def test_distillation_is_masked_only_with_a_contrastive_term(tmp_path, monkeypatch, weights, masked):
    commands = []
    config = ChainConfig(mask_false_negatives=True, distill=True, **weights)
    chain = fake_chain(tmp_path, config, commands, monkeypatch)
    for stage in ("2", "distill"):
        stages.Chain.finetune(chain, f"x-{stage}", stage, tmp_path / "card.yaml", tmp_path / "train.jsonl", 8)
    stage2, distill = (options(argv) for argv in commands)
    assert stage2.get("mask_false_negatives") is True and bool(distill.get("mask_false_negatives")) is masked
    LossArguments(stage="distill", **{k: float(v) if k.endswith("weight") else v for k, v in distill.items()
                                      if k in ("mask_false_negatives", "dense_loss_weight", "sparse_loss_weight")})


def test_a_stage_command_runs_in_its_own_interpreter_and_a_failure_names_its_log(tmp_path):
    """What test_chain_tiny.py runs in its own process: ``python -m`` in a new interpreter, its output appended to
    the chain's commands.log."""
    log = tmp_path / "commands.log"
    log.write_text("earlier\n")
    stages.command("retromae_ir.mkl_shim", "--help", log_file=log)
    assert log.read_text().startswith("earlier\nusage: python -m retromae_ir.mkl_shim")
    with pytest.raises(stages.StageFailed, match=rf"retromae_ir.mkl_shim failed \(exit 2\); see {log}"):
        stages.command("retromae_ir.mkl_shim", "--no-such-flag", log_file=log)
    assert "unrecognized arguments: --no-such-flag" in log.read_text()
