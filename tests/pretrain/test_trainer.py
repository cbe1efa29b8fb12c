"""The training loop on a tiny random BERT: exact resume, the CLI's outputs, 2-process DDP under torchrun
(gloo), and every bad input refused before training starts."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from retromae_ir.pretrain import get_method
from retromae_ir.pretrain.__main__ import main
from retromae_ir.pretrain.arguments import MaskingArguments
from retromae_ir.training.arguments import TrainingArguments
from retromae_ir.pretrain.data import load_segments
from retromae_ir.training.trainer import Trainer

from pretrain_helpers import refused, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")


def training(output, **overrides):
    values = dict(output=str(output), max_steps=3, batch_size=4, grad_accum=2, lr=1e-3, save_steps=2,
                  logging_steps=1, seed=3, device="cpu")
    return TrainingArguments(**{**values, **overrides})


def fresh_trainer(tiny_bert_dir, corpus, args):
    torch.manual_seed(0)
    model = get_method("dupmae").from_pretrained(tiny_bert_dir, MaskingArguments())
    return Trainer(model, load_segments(corpus, model.tokenizer, 32), args, {})


def read_rows(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_resume_gives_the_uninterrupted_result(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    straight = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "a"))
    straight.train()

    interrupted = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "b"))
    step = interrupted.train_step

    def crash_after_the_step_two_checkpoint():
        if interrupted.step == 2:
            raise KeyboardInterrupt
        return step()

    monkeypatch.setattr(interrupted, "train_step", crash_after_the_step_two_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    assert (tmp_path / "b/checkpoints/step-2/trainer_state").is_dir()
    assert not (tmp_path / "b/model.safetensors").exists()  # no final checkpoint from an interrupted run

    resumed = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "b", resume=True))
    resumed.train()
    assert resumed.step == 3
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_rows(tmp_path / "a/loss.csv") == read_rows(tmp_path / "b/loss.csv")
    assert sorted(p.name for p in (tmp_path / "b/checkpoints").iterdir()) == ["step-2", "step-3"]


def test_resume_after_the_checkpoints_were_deleted_continues_the_published_output(tiny_bert_dir, corpus, tmp_path):
    """A finished output whose checkpoints/ was deleted to save disk is itself the final checkpoint: --resume with
    more steps continues it (as from checkpoints/step-3), not a run from step 0 under the output's name."""
    import shutil

    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "a")).train()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b/checkpoints")
    longer = {"resume": True, "max_steps": 5}
    kept = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "a", **longer))
    kept.train()
    deleted = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "b", **longer))
    deleted.train()
    a, b = kept.model.state_dict(), deleted.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_rows(tmp_path / "a/loss.csv") == read_rows(tmp_path / "b/loss.csv")
    assert [int(row["step"]) for row in read_rows(tmp_path / "b/loss.csv")] == [1, 2, 3, 4, 5]
    shutil.rmtree(tmp_path / "b/checkpoints")
    weights = (tmp_path / "b/model.safetensors").read_bytes()
    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "b", **longer)).train()  # finished: nothing to do
    assert not (tmp_path / "b/checkpoints").exists() and (tmp_path / "b/model.safetensors").read_bytes() == weights


def test_cli_writes_a_loadable_checkpoint_and_curves(tiny_bert_dir, corpus, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "run"
    main(["--method", "retromae", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(out),
          "--max-length", "32", "--batch-size", "5", "--max-steps", "2", "--save-steps", "0", "--device", "cpu"])
    rows = read_rows(out / "loss.csv")
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert set(rows[0]) == {"step", "epoch", "lr", "max_steps", "loss", "mlm", "dec"}
    assert (out / "loss.png").stat().st_size > 0 and (out / "train.log").stat().st_size > 0
    # only whole batches train: the log says how many examples each epoch leaves out (it said nothing)
    segments = int(re.search(r"training retromae: (\d+) segments", (out / "train.log").read_text()).group(1))
    left = segments % 5
    assert left > 0 and (f"each epoch trains {segments - left} of the {segments} examples, in whole batches of "
                         f"5 x 1 process(es): {left} left out" in (out / "train.log").read_text())
    # what the command logged reading its data, before train.log was open, is in it (it went to stderr only)
    assert re.search(rf"{re.escape(str(corpus))}: {segments} segments of at most 32 tokens, tokenised \(no "
                     r"--tokenized-cache\) in [0-9.]+ s\n(.*\n)*.*training retromae", (out / "train.log").read_text())
    meta = json.loads((out / "retromae_ir.json").read_text())
    assert meta["method"] == "retromae" and meta["step"] == 2
    assert (out / "decoders.safetensors").is_file() and (out / "trainer_state/state.pt").is_file()
    AutoModel.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)


def test_bf16_run_is_loadable_by_pyserini(tiny_bert_dir, corpus, tmp_path):
    """bf16 autocast trains (finite losses) and the output loads in Pyserini's AutoDocumentEncoder."""
    from pyserini.encode import AutoDocumentEncoder

    out = tmp_path / "bf16"
    main(["--method", "dupmae", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(out),
          "--max-length", "16", "--batch-size", "2", "--max-steps", "1", "--save-steps", "0", "--device", "cpu",
          "--bf16"])
    row = read_rows(out / "loss.csv")[0]
    assert all(torch.isfinite(torch.tensor(float(row[k]))) for k in ("loss", "mlm", "dec", "bow"))
    vectors = AutoDocumentEncoder(str(out), device="cpu", pooling="cls").encode(["a short document"], max_length=16)
    assert vectors.shape == (1, 32)


def test_two_process_ddp_step_under_torchrun(tiny_bert_dir, corpus, tmp_path):
    out = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29517",
               "-m", "retromae_ir.pretrain", "--method", "dupmae", "--model", str(tiny_bert_dir), "--corpus",
               str(corpus), "--output", str(out), "--max-length", "32", "--batch-size", "2", "--max-steps", "1",
               "--device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "retromae_ir.json").read_text())["world_size"] == 2
    assert len(read_rows(out / "loss.csv")) == 1


def _args(tiny_bert_dir, corpus, output, *extra):
    return ["--method", "retromae", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(output),
            "--max-length", "32", "--max-steps", "1", "--device", "cpu", *extra]


@pytest.mark.parametrize("case", ["missing corpus", "empty corpus", "no text", "not bert", "too long", "ratio",
                                  "warm-up"])
def test_bad_input_fails_before_training(tiny_bert_dir, corpus, tmp_path, case, capsys):
    output = tmp_path / "out"
    args = _args(tiny_bert_dir, corpus, output)
    if case == "missing corpus":
        args[5], message = str(tmp_path / "nope.jsonl"), "not found"
    elif case == "empty corpus":
        (tmp_path / "empty.jsonl").write_text("")
        args[5], message = str(tmp_path / "empty.jsonl"), "empty"
    elif case == "no text":
        (tmp_path / "blank.jsonl").write_text('{"_id": "1", "title": "", "text": ""}\n')
        args[5], message = str(tmp_path / "blank.jsonl"), "no text"
    elif case == "not bert":
        (tmp_path / "gpt").mkdir()
        (tmp_path / "gpt/config.json").write_text(json.dumps({"model_type": "gpt2"}))
        args[3], message = str(tmp_path / "gpt"), "BERT-family"
    elif case == "too long":
        args[9], message = "1024", "exceeds"
    elif case == "warm-up":  # a ratio of 1 rose to the last step and never decayed (exit 0)
        args += ["--warmup-ratio", "1"]
        message = "--warmup-ratio must be in [0, 1), got 1.0"
    else:
        args += ["--encoder-mask-ratio", "1.5"]
        message = "encoder-mask-ratio"
    assert message in refused(main, args, capsys)
    assert not output.exists()


@pytest.mark.parametrize("epochs, batches, steps", [(1.1, 100, 110), (2.2, 50, 110), (1.5, 7, 11), (0.01, 100, 1)])
def test_epochs_count_steps_as_written(epochs, batches, steps):
    """--epochs 1.1 over 100 batches is 110 steps: the float product (110.00000000000001) rounded up to 111 and
    stretched the learning-rate plan over a step the run was not asked for."""
    from retromae_ir.training.trainer import Schedule

    args = TrainingArguments(output="unused", epochs=epochs, batch_size=4)
    assert Schedule.build(batches * 4, args, world_size=1).max_steps == steps


def test_epochs_under_grad_accum_train_each_epoch_once():
    """--epochs 1 --grad-accum 4 over 10 micro-batches an epoch: 3 optimizer steps of 4, 4 and 2 micro-batches.
    The steps' count was rounded up with full windows: 12 micro-batches, 8 of the 40 examples trained twice."""
    from retromae_ir.training.trainer import Schedule

    args = TrainingArguments(output="unused", epochs=1, batch_size=4, grad_accum=4)
    schedule = Schedule.build(40, args, world_size=1)
    assert schedule.max_steps == 3 and [len(schedule.window(s)) for s in range(3)] == [4, 4, 2]
    seen = [i for step in range(3) for micro in schedule.window(step) for i in schedule.indices(micro, 0, seed=3)]
    assert sorted(seen) == list(range(40)) and schedule.epoch(3) == 1.0
    steps = Schedule.build(40, TrainingArguments(output="unused", max_steps=3, batch_size=4, grad_accum=4), 1)
    assert [len(steps.window(s)) for s in range(3)] == [4, 4, 4]  # --max-steps: whole windows, into epoch 2


def test_a_short_last_window_averages_over_its_own_micro_batches(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    trainer = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", max_steps=-1, epochs=1, grad_accum=5,
                                                             batch_size=2))
    per_epoch = trainer.schedule.micro_per_epoch
    assert per_epoch % 5, "the corpus must leave a short last window"
    seen, forward = [], trainer.wrapped.forward

    def record(batch):
        losses = forward(batch)
        seen.append((trainer.step, float(losses["loss"].detach())))
        return losses

    monkeypatch.setattr(trainer.wrapped, "forward", record)
    trainer.train()
    assert len(seen) == per_epoch and trainer.history[-1]["epoch"] == 1.0
    last = [loss for step, loss in seen if step == trainer.step - 1]
    assert len(last) == per_epoch % 5
    assert trainer.history[-1]["loss"] == pytest.approx(sum(last) / len(last), rel=1e-6)


def test_a_run_whose_epochs_ended_inside_a_window_is_not_continued_for_more(tiny_bert_dir, corpus, tmp_path):
    """Continued for more epochs, its next window would start at step x grad_accum and skip the micro-batches its
    short last window left, while loss.csv counted them as trained."""
    from retromae_ir.training.trainer import TrainerError

    args = dict(max_steps=-1, epochs=1, grad_accum=5, batch_size=2, save_steps=0)
    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", **args)).train()  # windows of 5, 5 and 2
    with pytest.raises(TrainerError, match="accumulated 2 of 5 micro-batches .* continuing it would leave 3 "
                                           "untrained; pass --overwrite"):
        fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", **{**args, "epochs": 2},
                                                      resume=True)).train()
    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", **args, resume=True)).train()  # at its end: published
    # resumed as --max-steps 3 (whole windows: 15 micro-batches), the finished run is not saved again under that
    # schedule: it recorded 15 micro-batches and epoch 1.25 for the 12 trained, and a later --max-steps 5 passed
    # the check above and skipped micro-batches 12-14
    record = tmp_path / "out" / "checkpoints" / "step-3" / "retromae_ir.json"
    before = record.read_bytes()
    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", **{**args, "max_steps": 3}, resume=True)).train()
    assert record.read_bytes() == before
    assert json.loads((tmp_path / "out" / "retromae_ir.json").read_text())["epoch"] == 1.0
    with pytest.raises(TrainerError, match="accumulated 2 of 5 micro-batches"):
        fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", **{**args, "max_steps": 5},
                                                      resume=True)).train()
    whole = dict(args, grad_accum=4)  # 12 micro-batches: whole windows, continued
    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "whole", **whole)).train()
    fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "whole", **{**whole, "epochs": 2}, resume=True)).train()


def test_warm_up_steps_count_as_written():
    """0.29 x 100 steps is 29 warm-up steps: the float product (28.999999999999996) was cut to 28."""
    from retromae_ir.training.trainer import LinearPlan

    assert LinearPlan.build(100, 0.29).warmup == 29
    assert LinearPlan.build(100, 0.1).warmup == 10 and LinearPlan.build(15, 0.1).warmup == 1


def test_existing_output_needs_resume(tiny_bert_dir, corpus, tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    (output / "config.json").write_text("{}")
    line = refused(main, _args(tiny_bert_dir, corpus, output), capsys)
    assert "--resume" in line and "--overwrite" in line


@pytest.mark.parametrize("nondeterministic", [False, True])
def test_training_runs_deterministic_kernels_unless_asked_not_to(tiny_bert_dir, corpus, tmp_path, monkeypatch,
                                                               nondeterministic):
    """Two CPU runs of the same seed used to differ by rounding (embedding gradients summed in thread order),
    enough to move a chain's nDCG@10 by 0.006: training now runs PyTorch's deterministic kernels, and puts the
    process's setting back afterwards (encoding and tests after it are unaffected)."""
    trainer = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", max_steps=1,
                                                             nondeterministic=nondeterministic))
    seen, step = [], trainer.train_step
    monkeypatch.setattr(trainer, "train_step", lambda: seen.append(torch.are_deterministic_algorithms_enabled())
                        or step())
    before = torch.are_deterministic_algorithms_enabled()
    trainer.train()
    assert seen == [not nondeterministic] and torch.are_deterministic_algorithms_enabled() == before
    assert "nondeterministic" not in trainer.identity  # rounding only: a run may resume with the other setting


def test_an_epoch_leaves_out_what_fills_no_whole_global_batch():
    from retromae_ir.training.trainer import Schedule

    schedule = Schedule(examples=100, batch_size=16, world_size=4, grad_accum=1, max_steps=10)
    assert (schedule.micro_per_epoch, schedule.left_out) == (1, 36)
    seen = {i for rank in range(4) for i in schedule.indices(0, rank, seed=3)}
    assert len(seen) == 64 and seen != {i for rank in range(4) for i in schedule.indices(1, rank, seed=3)}
    assert Schedule(examples=96, batch_size=16, world_size=1, grad_accum=1, max_steps=1).left_out == 0


@pytest.mark.parametrize("flag, value", [("--lr", "inf"), ("--weight-decay", "nan"), ("--max-grad-norm", "nan"),
                                         ("--contrastive-weight", "nan"), ("--decoder-mask-ratio", "Infinity")])
def test_a_float_option_that_is_not_a_number_is_refused(tiny_bert_dir, corpus, tmp_path, capsys, flag, value):
    """float() reads nan and inf: --lr inf trained NaN weights and exit 0, --contrastive-weight nan switched its term
    off (a check read ``> 0``) while the run recorded nan."""
    output = tmp_path / "out"
    error = refused(main, _args(tiny_bert_dir, corpus, output, flag, value), capsys)
    assert f"argument {flag}: must be a finite number, got '{value}'" in error
    assert not output.exists()


def test_a_loss_that_is_not_finite_stops_the_run_before_its_update(tiny_bert_dir, corpus, tmp_path, capsys):
    """An --lr of 1e30 takes the weights to 1e30 at step 1 (finite, saved) and the loss to nan or inf at step 2:
    the run stops there with an error, and publishes nothing (it trained on and published NaN weights, exit 0)."""
    output = tmp_path / "out"
    error = refused(main, _args(tiny_bert_dir, corpus, output, "--lr", "1e30", "--max-steps", "4", "--save-steps",
                                "1", "--batch-size", "4"), capsys)
    assert re.search(r"step 2: the loss is (nan|inf) \(mlm=.*\): training stopped before this step's update", error)
    assert [p.name for p in (output / "checkpoints").iterdir()] == ["step-1"]
    assert not (output / "model.safetensors").exists()


def test_weights_that_are_not_finite_are_not_saved(tiny_bert_dir, corpus, tmp_path, monkeypatch):
    """A finite loss whose update overflows the weights (the run's last step) is refused at the save."""
    from retromae_ir.training.trainer import TrainingDiverged

    trainer = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "run", max_steps=1))
    step = trainer.optimizer.step

    def overflow():
        step()
        next(trainer.model.parameters()).data.fill_(float("inf"))

    monkeypatch.setattr(trainer.optimizer, "step", overflow)
    with pytest.raises(TrainingDiverged, match="step 1: the update left .* with values that are not finite"):
        trainer.train()
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
    assert not (tmp_path / "run" / "model.safetensors").exists()


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda", "nccl")])
def test_the_process_group_backend_follows_the_run_device(monkeypatch, device, backend):
    """Under torchrun on a GPU host, ``--device cpu`` started nccl (chosen by the host, not the run), which holds
    no CPU tensors: the run failed at its first broadcast. (A GPU host is stood in for: there is none here.)"""
    from retromae_ir.training import trainer

    started, devices = [], []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(trainer.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(trainer.torch.cuda, "set_device", devices.append)
    monkeypatch.setattr(trainer.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(trainer.dist, "init_process_group", started.append)
    monkeypatch.setattr(trainer.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(trainer.dist, "get_world_size", lambda: 2)
    assert trainer._distributed_rank_world(device) == (1, 2)
    assert started == [backend] and devices == ([1] if device == "cuda" else [])


def test_the_trainer_learns(tiny_bert_dir, corpus, tmp_path):
    """The loop itself (its optimizer's parameter groups, learning-rate plan, accumulation, clipping) lowers the
    loss and moves the encoder: the other tests drive the model by hand or compare two runs of the loop with each
    other, which an optimizer left without the encoder's parameters, or a plan stuck near 0, would pass."""
    trainer = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", max_steps=12, grad_accum=1, lr=3e-3,
                                                            warmup_ratio=0.0, save_steps=0))
    start = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    losses = [row["loss"] for row in trainer.history]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses
    moved = [name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), start[name])]
    assert any(name.startswith("encoder.") and "embeddings" in name for name in moved)
    assert any(name.startswith("encoder.") and "layer.1." in name for name in moved)
    assert trainer.history[0]["lr"] == pytest.approx(3e-3) and trainer.optimizer.param_groups[0]["lr"] > 0


def test_a_short_last_window_steps_on_the_mean_gradient_of_its_micro_batches(tiny_bert_dir, corpus, tmp_path):
    """The last step of an --epochs run accumulates fewer micro-batches than --grad-accum: its update must be the
    mean of their gradients (divided by the window's length, not by --grad-accum), which the logged loss alone
    does not show."""
    import copy

    from retromae_ir.training.trainer import micro_seeds

    trainer = fresh_trainer(tiny_bert_dir, corpus, training(tmp_path / "out", max_steps=-1, epochs=1, grad_accum=5,
                                                            batch_size=2, max_grad_norm=0.0, save_steps=0))
    last = trainer.schedule.max_steps - 1
    window = trainer.schedule.window(last)
    assert 0 < len(window) < 5, "the corpus must leave a short last window"
    step, checked = trainer.optimizer.step, []

    def check_then_step(*args, **kwargs):
        if trainer.step == last:  # the gradient the loop accumulated, against the mean computed apart
            model = copy.deepcopy(trainer.model)
            model.zero_grad(set_to_none=True)
            for micro in window:
                collator_seed, torch_seed = micro_seeds(trainer.args.seed, micro, 0)
                examples = [trainer.examples[i] for i in trainer.schedule.indices(micro, 0, trainer.args.seed)]
                batch = trainer.collator(examples, torch.Generator().manual_seed(collator_seed))
                torch.manual_seed(torch_seed)
                (model(batch)["loss"] / len(window)).backward()
            for (name, ours), theirs in zip(trainer.model.named_parameters(), model.parameters()):
                if ours.grad is not None:
                    assert torch.allclose(ours.grad, theirs.grad, rtol=1e-4, atol=1e-7), name
            checked.append(last)
        return step(*args, **kwargs)

    trainer.optimizer.step = check_then_step
    trainer.train()
    assert checked == [last]


@pytest.mark.parametrize("steps, outcome", [(("4", "4"), "agreed"),
                                            (("4", "0"), "refused: the processes start at different steps (0 to 4)")])
def test_processes_that_would_start_at_different_steps_are_refused(tmp_path, steps, outcome):
    """Each rank finds its checkpoint in the output as its own machine sees it: a node without the shared folder
    started at step 0 beside the others' step 4 (other data, another learning rate, weights drifting apart)."""
    here = Path(__file__).parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [
        str(here.parents[1]), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(here / "step_worker.py"), *steps, str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        assert (tmp_path / f"rank{rank}.txt").read_text().startswith(outcome)
