"""Keyed resume through the CLI: other inputs are refused, more steps on the same data re-plan the learning rate,
a crashed checkpoint write is cleaned up, and a second writer of the same output is refused."""
from __future__ import annotations

import csv

import pytest

from retromae_ir.pretrain.__main__ import main

from lock_holder import held_lock
from pretrain_helpers import refused, write_corpus


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return write_corpus(folder / "a.jsonl"), write_corpus(folder / "b.jsonl", docs=40)


def argv(tiny_bert_dir, corpus, output, *extra):
    return ["--method", "retromae", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(output),
            "--max-length", "32", "--batch-size", "4", "--max-steps", "2", "--save-steps", "1", "--logging-steps", "1",
            "--lr", "1e-3", "--warmup-ratio", "0.25", "--device", "cpu", *extra]


def rows(output):
    with open(output / "loss.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(autouse=True)
def no_plots(monkeypatch):
    monkeypatch.setattr("retromae_ir.training.trainer.plot_loss_curves", lambda *a, **k: None)


def test_resume_with_another_corpus_is_refused_until_overwrite(tiny_bert_dir, corpora, tmp_path, capsys):
    a, b = corpora
    out = tmp_path / "run"
    main(argv(tiny_bert_dir, a, out))
    before = (out / "loss.csv").read_text()
    line = refused(main, argv(tiny_bert_dir, b, out, "--resume", "--max-steps", "3", "--lr", "2e-3"), capsys)
    assert "--corpus sha256:" in line and "--lr 0.001 -> 0.002" in line and "--overwrite" in line
    assert "--max-steps" not in line  # the run length may change
    assert (out / "loss.csv").read_text() == before  # nothing touched

    main(argv(tiny_bert_dir, b, out, "--overwrite"))
    assert [r["step"] for r in rows(out)] == ["1", "2"]
    assert "--overwrite: discarded" in (out / "train.log").read_text()


def test_a_run_of_another_pretraining_objective_is_not_resumed(tiny_bert_dir, corpora, tmp_path, capsys, monkeypatch):
    """A change to what the same options train (the method's objective_version, bumped with the change) keys the run:
    it was resumed, its checkpoint trained on under the new objective (exit 0)."""
    from retromae_ir.pretrain.retromae import RetroMAE

    out = tmp_path / "run"
    main(argv(tiny_bert_dir, corpora[0], out))
    before = (out / "loss.csv").read_text()
    monkeypatch.setattr(RetroMAE, "objective_version", RetroMAE.objective_version + 1)
    line = refused(main, argv(tiny_bert_dir, corpora[0], out, "--resume", "--max-steps", "3"), capsys)
    version = RetroMAE.objective_version
    assert f"pre-training objective version {version - 1} -> {version}" in line
    assert (out / "loss.csv").read_text() == before


def test_more_steps_on_the_same_data_continue_with_a_replanned_schedule(tiny_bert_dir, corpora, tmp_path):
    out = tmp_path / "run"
    main(argv(tiny_bert_dir, corpora[0], out, "--max-steps", "4"))
    first = rows(out)
    main(argv(tiny_bert_dir, corpora[0], out, "--max-steps", "8", "--resume"))
    history = rows(out)
    assert history[:4] == first
    assert [int(r["max_steps"]) for r in history] == [4] * 4 + [8] * 4
    epochs = [float(r["epoch"]) for r in history]
    steps = [e2 - e1 for e1, e2 in zip(epochs, epochs[1:])]
    assert max(steps) - min(steps) < 1e-3  # one epoch increment throughout: no jump at the resume point
    lrs = [float(r["lr"]) for r in history]
    assert all(lr > 0 for lr in lrs)
    # warm-up of 1 step kept, then linear decay to 0 at step 8, from the resumed step 4 on
    assert lrs[4:] == pytest.approx([1e-3 * (8 - t) / (8 - 1) for t in range(4, 8)])
    log = (out / "train.log").read_text()
    assert "resumed from" in log and "step-4 at step 4" in log and "8 optimizer steps instead of 4" in log


def test_a_finished_run_with_nothing_to_do_rewrites_its_curve(tiny_bert_dir, corpora, tmp_path, monkeypatch):
    """A finished run (its checkpoints/ deleted) continued for more steps and killed before a checkpoint, then
    asked for its own steps again: 'nothing to do' left the killed continuation's rows in loss.csv (exit 0)."""
    import shutil

    from retromae_ir.training.trainer import Trainer

    out = tmp_path / "run"
    main(argv(tiny_bert_dir, corpora[0], out))
    shutil.rmtree(out / "checkpoints")
    step = Trainer.train_step

    def killed_at_step_four(trainer):
        if trainer.step == 3:
            raise KeyboardInterrupt
        return step(trainer)

    monkeypatch.setattr(Trainer, "train_step", killed_at_step_four)
    with pytest.raises(KeyboardInterrupt):
        main(argv(tiny_bert_dir, corpora[0], out, "--max-steps", "4", "--save-steps", "10", "--resume"))
    assert [r["step"] for r in rows(out)] == ["1", "2", "3"]
    main(argv(tiny_bert_dir, corpora[0], out, "--resume"))
    assert [r["step"] for r in rows(out)] == ["1", "2"] and "nothing to do" in (out / "train.log").read_text()


def test_fewer_steps_than_the_checkpoint_is_refused(tiny_bert_dir, corpora, tmp_path, capsys):
    out = tmp_path / "run"
    main(argv(tiny_bert_dir, corpora[0], out, "--max-steps", "3"))
    assert "past this run's 2 steps" in refused(main, argv(tiny_bert_dir, corpora[0], out, "--resume"), capsys)


def test_crashed_checkpoint_write_is_cleaned_and_the_last_complete_one_resumed(tiny_bert_dir, corpora, tmp_path):
    out = tmp_path / "run"
    main(argv(tiny_bert_dir, corpora[0], out))
    # what a kill during the step-3 checkpoint and during a plot leaves behind
    (out / "checkpoints" / ".step-3.k2j4.tmp" / "trainer_state").mkdir(parents=True)
    (out / "checkpoints" / ".step-3.k2j4.tmp" / "model.safetensors").write_bytes(b"\0" * 1024)
    (out / ".loss.png.x81q.tmp").write_bytes(b"\x89PNG")
    main(argv(tiny_bert_dir, corpora[0], out, "--max-steps", "3", "--resume"))
    assert not list(out.glob(".*.tmp")) and not list((out / "checkpoints").glob(".*.tmp"))
    log = (out / "train.log").read_text()
    assert log.count("left by an interrupted write") == 2 and ".step-3.k2j4.tmp" in log
    assert "step-2 at step 2" in log
    assert [r["step"] for r in rows(out)] == ["1", "2", "3"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-2", "step-3"]


def test_resume_with_nothing_to_resume_says_so(tiny_bert_dir, corpora, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "train.log").write_text("a run killed before its first checkpoint\n")
    main(argv(tiny_bert_dir, corpora[0], out, "--resume"))
    assert "nothing to resume: starting from step 0" in (out / "train.log").read_text()
    assert [r["step"] for r in rows(out)] == ["1", "2"]


def test_second_writer_of_a_training_output_is_refused(tiny_bert_dir, corpora, tmp_path, capsys):
    out = tmp_path / "run"
    with held_lock(out) as pid:
        line = refused(main, argv(tiny_bert_dir, corpora[0], out), capsys, status=2)
    assert f"PID {pid}" in line and str(out) in line
    assert not out.exists()


def test_resume_from_a_start_trained_again_in_place_is_refused(tiny_bert_dir, corpora, tmp_path, capsys):
    """The start checkpoint's weight files are part of what a run resumes under: same path, new weights is
    another run."""
    import shutil

    import torch
    from transformers import BertForMaskedLM

    start = tmp_path / "start"
    shutil.copytree(tiny_bert_dir, start)
    out = tmp_path / "run"
    main(argv(start, corpora[0], out))
    model = BertForMaskedLM.from_pretrained(start)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.mul_(2.0)
    model.save_pretrained(start)
    line = refused(main, argv(start, corpora[0], out, "--resume", "--max-steps", "3"), capsys)
    assert "start weights {" in line and "--start-weights" not in line


def test_a_new_total_within_the_kept_warm_up_is_refused():
    """A run interrupted during a long warm-up and resumed for fewer steps than that warm-up would end with the
    rate still rising (the plan decays only after the warm-up): refused, not trained to a wrong schedule."""
    from types import SimpleNamespace

    from retromae_ir.training.trainer import LinearPlan, Trainer, TrainerError

    saved = LinearPlan(total=100, warmup=10)
    resumed = SimpleNamespace(schedule=SimpleNamespace(max_steps=8), step=3)
    with pytest.raises(TrainerError, match="8 steps end within the checkpoint's warm-up of 10 steps"):
        Trainer._replanned(resumed, saved)
    resumed.schedule.max_steps = 20
    plan = Trainer._replanned(resumed, saved)
    assert (plan.total, plan.warmup) == (20, 10) and plan.factor(19) == pytest.approx(1 / 10)
