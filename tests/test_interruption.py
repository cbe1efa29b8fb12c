"""kill -9 in the middle of a long job, then the same command again (with ``--resume`` for training), gives what an
uninterrupted run gives: the same index (ids and vectors), the same final weights. Real processes, real SIGKILL,
tiny random models; the kill lands once the job has written its first chunk or checkpoint."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
WORDS = "cell gene protein virus enzyme tissue neuron lipid dose trial cohort signal".split()


def python_m(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def run(argv: list[str]) -> None:
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def killed_once(argv: list[str], started, timeout: float = 120.0) -> None:
    """Start ``argv``, SIGKILL it as soon as ``started()`` is true; fails if the job ends before that."""
    process = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not started():
        if process.poll() is not None:
            pytest.fail(f"the job ended (exit {process.returncode}) before it could be killed: "
                        f"{process.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("timed out waiting for the job's first chunk or checkpoint")
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the job finished before the kill landed"


def write_corpus(path: Path, docs: int) -> Path:
    with open(path, "w") as handle:
        for i in range(docs):
            text = " ".join(WORDS[(i * 5 + j * 7) % len(WORDS)] for j in range(6 + i % 9))
            handle.write(json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": text}) + "\n")
    return path


def test_encode_killed_after_its_first_chunk_then_rerun_equals_an_uninterrupted_encode(tiny_bert_dir, tmp_path):
    card = tmp_path / "tiny-dense.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    corpus = write_corpus(tmp_path / "corpus.jsonl", 3000)

    def encode(output: Path) -> list[str]:
        return python_m("retromae_ir.encode", "corpus", "--encoder", str(card), "--corpus", str(corpus),
                        "--output", str(output), "--device", "cpu", "--dtype", "fp32", "--chunk-size", "100",
                        "--batch-size", "50")

    run(encode(tmp_path / "straight"))
    interrupted = tmp_path / "interrupted"
    killed_once(encode(interrupted), lambda: any(interrupted.rglob("chunk-*.npz")))
    assert not (interrupted / "manifest.json").exists()  # nothing that looks like a finished index
    run(encode(interrupted))

    def index(root: Path) -> tuple[list[str], np.ndarray]:
        dense = faiss.read_index(str(root / "dense" / "index"))
        ids = (root / "dense" / "docid").read_text().split()
        return ids, dense.reconstruct_n(0, dense.ntotal)

    (ids_a, vectors_a), (ids_b, vectors_b) = index(tmp_path / "straight"), index(interrupted)
    assert ids_a == ids_b and len(ids_a) == 3000
    np.testing.assert_array_equal(vectors_a, vectors_b)


def final_weights(output: Path) -> dict[str, torch.Tensor]:
    return load_file(str(output / "model.safetensors"))


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = final_weights(a), final_weights(b)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_pretraining_killed_after_a_checkpoint_then_resumed_gives_the_uninterrupted_weights(tiny_bert_dir, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 200)

    def pretrain(output: Path, *extra: str) -> list[str]:
        return python_m("retromae_ir.pretrain", "--method", "dupmae", "--model", str(tiny_bert_dir), "--corpus",
                        str(corpus), "--output", str(output), "--max-length", "32", "--batch-size", "4",
                        "--max-steps", "12", "--save-steps", "2", "--seed", "3", "--device", "cpu", *extra)

    run(pretrain(tmp_path / "straight"))
    interrupted = tmp_path / "interrupted"
    killed_once(pretrain(interrupted), lambda: (interrupted / "checkpoints" / "step-2").is_dir())
    assert not (interrupted / "model.safetensors").exists()
    run(pretrain(interrupted, "--resume"))
    # resumed, not trained again from step 0 (which deterministic training would make look the same)
    assert re.search(r"resumed from \S*interrupted/checkpoints/step-\d+ at step \d+",
                     (interrupted / "train.log").read_text())
    assert_same_weights(tmp_path / "straight", interrupted)
    # the loss curve too: killed between the checkpoint and loss.csv's rewrite, steps 1-2 used to be lost for good
    assert (interrupted / "loss.csv").read_text() == (tmp_path / "straight" / "loss.csv").read_text()


def test_a_resume_keeps_the_loss_rows_a_kill_before_loss_csv_was_rewritten_would_lose(tiny_bert_dir, tmp_path,
                                                                                      monkeypatch):
    """Checkpoint step-3 published, then killed before loss.csv (last written at step 2) had steps 3: the resumed
    curve used to come from loss.csv and miss step 3 for good. The checkpoint carries its own curve now."""
    from retromae_ir.pretrain.__main__ import main
    from retromae_ir.training.trainer import Trainer

    corpus = write_corpus(tmp_path / "corpus.jsonl", 40)

    def argv(output: Path, *extra: str) -> list[str]:
        return ["--method", "dupmae", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(output),
                "--max-length", "32", "--batch-size", "4", "--max-steps", "5", "--save-steps", "3",
                "--logging-steps", "2", "--seed", "3", "--device", "cpu", *extra]

    main(argv(tmp_path / "straight"))
    real = Trainer._write_curves

    def killed_at_the_checkpoint(self):
        if self.step == 3:
            raise KeyboardInterrupt
        real(self)

    monkeypatch.setattr(Trainer, "_write_curves", killed_at_the_checkpoint)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        main(argv(tmp_path / "killed"))
    monkeypatch.undo()
    assert (tmp_path / "killed" / "checkpoints" / "step-3").is_dir()
    assert [line.split(",")[0] for line in (tmp_path / "killed" / "loss.csv").read_text().split()[1:]] == ["1", "2"]
    main(argv(tmp_path / "killed", "--resume"))
    assert (tmp_path / "killed" / "loss.csv").read_text() == (tmp_path / "straight" / "loss.csv").read_text()


def test_finetuning_killed_after_a_checkpoint_then_resumed_gives_the_uninterrupted_weights(tiny_bert_dir, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 120)
    (tmp_path / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(4))}) + "\n"
        for i in range(120)))
    (tmp_path / "qrels.tsv").write_text("".join(f"q{i}\td{i}\t1\n" for i in range(120)))
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 20\nquery_k: 10\n"
                    "max_query_length: 16\nmax_passage_length: 32\n")

    def finetune(output: Path, *extra: str) -> list[str]:
        return python_m("retromae_ir.finetune", "--stage", "1", "--encoder", str(card), "--queries",
                        str(tmp_path / "queries.jsonl"), "--qrels", str(tmp_path / "qrels.tsv"), "--corpus",
                        str(corpus), "--group-size", "1", "--batch-size", "4", "--max-steps", "12",
                        "--save-steps", "2", "--seed", "3", "--device", "cpu", "--output", str(output), *extra)

    run(finetune(tmp_path / "straight"))
    interrupted = tmp_path / "interrupted"
    killed_once(finetune(interrupted), lambda: (interrupted / "checkpoints" / "step-2").is_dir())
    assert not (interrupted / "card.yaml").exists()
    run(finetune(interrupted, "--resume"))
    assert re.search(r"resumed from \S*interrupted/checkpoints/step-\d+ at step \d+",
                     (interrupted / "train.log").read_text())
    assert_same_weights(tmp_path / "straight", interrupted)
    assert (interrupted / "loss.csv").read_text() == (tmp_path / "straight" / "loss.csv").read_text()


def test_a_publish_killed_midway_leaves_no_finished_marker(tmp_path, monkeypatch):
    """The trainer copies its final checkpoint to the output's top file by file. The chain takes config.json or
    card.yaml there as "stage done", so those go last, and an earlier publish's are removed first: a kill after
    the first file leaves neither (the stage runs again) rather than new weights beside old ones."""
    from retromae_ir.training import trainer

    checkpoint, output = tmp_path / "checkpoint-3", tmp_path / "out"
    checkpoint.mkdir()
    output.mkdir()
    for name in ("card.yaml", "config.json", "model.safetensors", "projection.safetensors", "tokenizer.json"):
        (checkpoint / name).write_text(f"new {name}")
        (output / name).write_text(f"old {name}")
    copied = []
    real = trainer.atomic_write

    def killed_after_one(path, *args, **kwargs):
        if copied:
            raise KeyboardInterrupt("killed")
        copied.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(trainer, "atomic_write", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        trainer._publish(checkpoint, output)
    assert copied == ["model.safetensors"]
    assert not (output / "config.json").exists() and not (output / "card.yaml").exists()
    monkeypatch.setattr(trainer, "atomic_write", real)
    trainer._publish(checkpoint, output)
    order = []
    monkeypatch.setattr(trainer, "atomic_write", lambda path, *a, **kw: order.append(Path(path).name) or real(
        path, *a, **kw))
    trainer._publish(checkpoint, output)
    assert order[-2:] == ["config.json", "card.yaml"]  # card.yaml, the fine-tuning stage's done file, last
    assert {path.name: path.read_text() for path in output.iterdir()} == {
        name: f"new {name}" for name in ("card.yaml", "config.json", "model.safetensors", "projection.safetensors",
                                          "tokenizer.json")}


def test_a_publish_removes_model_files_its_checkpoint_lacks(tmp_path):
    """A checkpoint without a projection published over an output that has one: the old projection would load
    with the new weights (the projection is optional), so the publish removes it; the run's own logs stay."""
    from retromae_ir.training import trainer

    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    checkpoint.mkdir()
    output.mkdir()
    for name in ("card.yaml", "config.json", "model.safetensors"):
        (checkpoint / name).write_text(f"new {name}")
    for name in ("card.yaml", "config.json", "model.safetensors", "projection.safetensors", "loss.csv"):
        (output / name).write_text(f"old {name}")
    trainer._publish(checkpoint, output)
    assert {path.name: path.read_text() for path in output.iterdir()} == {
        "card.yaml": "new card.yaml", "config.json": "new config.json", "model.safetensors": "new model.safetensors",
        "loss.csv": "old loss.csv"}


def test_resume_without_checkpoints_is_checked_against_the_published_output(tmp_path):
    """--resume over a finished output whose checkpoints were deleted: the published identity still keys it, so
    other inputs are refused instead of training from scratch beside (and at the end over) the old model."""
    import json
    from types import SimpleNamespace

    from retromae_ir.training import trainer

    output = tmp_path / "out"
    (output / trainer.STATE_DIR).mkdir(parents=True)
    (output / trainer.STATE_DIR / trainer.IDENTITY_FILE).write_text(json.dumps({"identity": {"train": "a"}}))
    args = SimpleNamespace(output=str(output), resume=True, overwrite=False)
    assert trainer.check_output(args, {"train": "a"}) is None  # the same run: nothing to resume, nothing refused
    with pytest.raises(trainer.TrainerError, match=r"cannot resume .*out: it was trained with other inputs"):
        trainer.check_output(args, {"train": "b"})
