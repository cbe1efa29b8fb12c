"""The training loop of both stages (pre-training and fine-tuning): gradient accumulation, bf16 autocast, torchrun data parallelism, checkpoints and
exact resume.

Determinism is by construction: the data order of an epoch and every random draw of a micro-batch (the
collator's masks, the model's decoder masks and dropout) are seeded from ``(seed, micro-step, rank)``. So the
state to resume from is only model + optimizer + learning-rate plan + step; the RNG state is re-derived, not stored.

Resume is keyed: every checkpoint records the run's identity (``run_identity``: the input files' contents and every
argument that shapes the result; not output paths, logging or checkpoint frequency, device, nor the run length), and
``--resume`` refuses a checkpoint whose identity differs, naming what differs. The run length may change: a run
continued for more (or fewer) steps re-plans its learning rate (``LinearPlan``) and says so in train.log and in the
``max_steps`` column of loss.csv. ``--overwrite`` starts afresh over an existing output instead. A command holds
``training_lock`` on the output for the whole run, and the run first deletes the ``.*.tmp`` a killed write left.

Output layout (OUTPUT = ``--output``)::

    OUTPUT/train.log, loss.csv, loss.png          appended / rewritten while training
    OUTPUT/checkpoints/step-N/                    every --save-steps (last two kept), each a full checkpoint;
                                                  trainer_state/run.json holds the run identity it resumes under
    OUTPUT/{config.json, model.safetensors, tokenizer files, decoders.safetensors, retromae_ir.json,
            trainer_state/}                       the final checkpoint, published when training ends
"""
from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import logging
import math
import os
import shutil
from dataclasses import asdict, dataclass, is_dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from retromae_ir.io import (as_stored, atomic_dir, atomic_write, check_read_unchanged, checkpoint_files,
                            file_digest, output_lock, remove_stale_temporaries)
from retromae_ir.logs import hold_records, release_held
from retromae_ir.training.arguments import TrainingArguments

log = logging.getLogger(__name__)

STATE_DIR = "trainer_state"
CHECKPOINTS = "checkpoints"
KEEP_CHECKPOINTS = 2
IDENTITY_FILE = "run.json"
# fields that say where to write, how often to log or save, or on what device: a resumed run may change them (the
# run length, max_steps / epochs, may change too, see LinearPlan; gradient caching's chunk may: without dropout
# its gradients equal the whole batch's, with dropout another chunk size draws the masks in another order, the same
# distribution, so a run resumed with another chunk is trained correctly but not bit for bit as an uninterrupted one)
UNKEYED = frozenset({"output", "resume", "overwrite", "save_steps", "logging_steps", "device", "max_steps", "epochs",
                     "tokenized_cache", "grad_cache_chunk", "nondeterministic"})  # the last: rounding only
# fields naming input files: keyed by the files' contents, so a moved file still resumes and an edited one does not
INPUT_FILES = frozenset({"corpus", "train", "queries", "qrels", "master_corpus_stats", "master_side_texts"})


class TrainerError(ValueError):
    """Bad training set-up (existing output without --resume, a resume state that does not fit...)."""


class TrainingDiverged(TrainerError):
    """A step's loss (or the weights to be saved) is not finite: nothing of it is saved."""


def as_written(value: float) -> Fraction:
    """A fraction of a run (``--epochs``, ``--warmup-ratio``) as the user wrote it: 1.1 x 100 batches is 110 steps,
    where the float 1.1 (1.10000000000000008882) made 111, and 0.29 x 100 is 29 warm-up steps, not 28."""
    return Fraction(str(value))


@dataclass
class Schedule:
    """How micro-batches map to optimizer steps and epochs for a given corpus size and world size.

    ``micro_batches`` is the run's length in global micro-batches: ``max_steps x grad_accum``, or under
    ``--epochs`` the epochs' micro-batches (rounded up), whose last optimizer step may then accumulate fewer than
    ``grad_accum`` of them (:meth:`window`). Rounding the steps up instead trained past the epochs asked for:
    ``--epochs 1 --grad-accum 4`` over 10 micro-batches an epoch ran 12, two of the next epoch's order."""

    examples: int
    batch_size: int
    world_size: int
    grad_accum: int
    max_steps: int
    micro_batches: int | None = None  # None: max_steps x grad_accum

    def __post_init__(self):
        if self.micro_batches is None:
            self.micro_batches = self.max_steps * self.grad_accum

    @classmethod
    def build(cls, examples: int, args: TrainingArguments, world_size: int) -> "Schedule":
        per_epoch = examples // (args.batch_size * world_size)
        if per_epoch < 1:
            raise TrainerError(f"corpus has {examples} segments, fewer than one global batch "
                               f"({args.batch_size} x {world_size} processes)")
        micro = (args.max_steps * args.grad_accum if args.max_steps > 0
                 else math.ceil(as_written(args.epochs) * per_epoch))
        steps = math.ceil(micro / args.grad_accum)
        if steps < 1:
            raise TrainerError("nothing to train: --max-steps and --epochs give 0 optimizer steps")
        return cls(examples, args.batch_size, world_size, args.grad_accum, steps, micro)

    def window(self, step: int) -> range:
        """The global micro-batches optimizer step ``step`` (from 0) accumulates: ``grad_accum`` of them, the last
        step of an ``--epochs`` run fewer when the epochs end before its window does (a run ended so is not
        continued for more steps: ``Trainer._check_continuable``)."""
        start = step * self.grad_accum
        return range(start, min(start + self.grad_accum, self.micro_batches))

    @property
    def micro_per_epoch(self) -> int:
        return self.examples // (self.batch_size * self.world_size)

    @property
    def left_out(self) -> int:
        """Examples each epoch leaves out: only whole global batches train (every rank's batch full, so gathered
        negatives line up). The order is reshuffled every epoch, so other examples are left out each time; a
        batch topped up with repeats would put an example beside itself as an in-batch negative."""
        return self.examples - self.micro_per_epoch * self.batch_size * self.world_size

    def indices(self, micro: int, rank: int, seed: int) -> list[int]:
        """This rank's example indices for global micro-batch number ``micro``."""
        epoch, position = divmod(micro, self.micro_per_epoch)
        order = _epoch_order(self.examples, seed + epoch)
        start = (position * self.world_size + rank) * self.batch_size
        return order[start:start + self.batch_size].tolist()

    def consumed(self, step: int) -> int:
        """Global micro-batches trained after ``step`` optimizer steps."""
        return min(step * self.grad_accum, self.micro_batches)

    def epoch(self, step: int) -> float:
        return self.consumed(step) / self.micro_per_epoch


@functools.lru_cache(maxsize=1)
def _epoch_order(examples: int, seed: int) -> torch.Tensor:
    """The shuffled example order of one epoch (cached: every micro-batch of the epoch reads it)."""
    return torch.randperm(examples, generator=torch.Generator().manual_seed(seed))


@dataclass
class LinearPlan:
    """The learning-rate factor of each optimizer step: linear warm-up over ``warmup`` steps, then linear decay to
    0 at ``total``.

    A resumed run asked for a different total keeps its warm-up length (steps already warmed are not warmed again)
    and from the resumed step on decays linearly from the end of that warm-up to 0 at the new total (a run planned
    for the new total from the start would have warmed up over the new total's share instead). So continuing a
    finished run for more steps trains at a real learning rate (not at the ~0 its old decay ended on, nor at a
    stale 0 from the restored optimizer), and a run stopped early decays to 0 by its new end. A new total within
    the kept warm-up is refused (the rate would still be rising at the end). The price is a step in the curve at
    the resume point (up when the total grows); loss.csv's ``max_steps`` column shows where the plan changed."""

    total: int
    warmup: int

    @classmethod
    def build(cls, total: int, warmup_ratio: float) -> "LinearPlan":
        return cls(total, math.floor(total * as_written(warmup_ratio)))

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        return max(0.0, (self.total - step) / max(1, self.total - self.warmup))


def run_identity(*groups: Any) -> dict:
    """What a training result depends on, keyed by flag name: the fields of the argument dataclasses ``groups``
    (None entries skipped) except ``UNKEYED``, with ``INPUT_FILES`` replaced by a digest of their contents, and the
    number of processes (the data order depends on it). A checkpoint resumes only under the same identity."""
    identity: dict[str, Any] = {"world_size": int(os.environ.get("WORLD_SIZE", "1"))}
    for name, value in _fields(groups):
        if name not in UNKEYED:
            identity[name] = _contents_key(value) if name in INPUT_FILES and value else value
    return as_stored(identity)  # as it reads back from run.json


def check_inputs_read(identity: dict, *groups: Any) -> None:
    """Once a run has read its ``INPUT_FILES``: refuse one that is no longer the file ``identity`` keyed (replaced
    while it was read, the checkpoint would record the first version's digest for a model trained on the second,
    exit 0). ``groups``: as given to ``run_identity``."""
    for name, value in _fields(groups):
        if name in INPUT_FILES and value and str(identity.get(name)).startswith("sha256:"):
            check_read_unchanged(value, identity[name].removeprefix("sha256:"), "this run read it")


def _fields(groups: tuple) -> Iterator[tuple[str, Any]]:
    for group in groups:
        yield from (asdict(group) if is_dataclass(group) else dict(group or {})).items()


def _contents_key(path: str) -> str:
    """``sha256:<hex>`` of a file (a missing one is keyed by its path: the run's own check reports it)."""
    return f"sha256:{file_digest(path)}" if Path(path).is_file() else f"missing file {path}"


def identity_digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


# identity keys that no flag sets: what the run's start and code versions are, named as such in a refusal
NOT_FLAGS = {"world_size": "processes", "start_weights": "start weights", "card": "card",
             "corpus_reader": "corpus reader", "masking": "twin-query rule",
             "keyword_masking": "keyword masking rule", "objective": "pre-training objective version",
             "encoding": "encoding code version", "corpus_stats_counting": "corpus statistics counting version"}


def identity_changes(saved: dict, current: dict) -> list[str]:
    """``--flag old -> new`` for each key whose value differs (file contents shown by a digest prefix)."""
    def show(value: Any) -> str:
        text = str(value) if value is not None else "unset"
        return text[:19] if text.startswith("sha256:") else text

    def flag(key: str) -> str:
        return NOT_FLAGS.get(key, "--" + key.replace("_", "-"))

    return [f"{flag(key)} {show(saved.get(key))} -> {show(current.get(key))}"
            for key in sorted(saved.keys() | current.keys()) if saved.get(key) != current.get(key)]


def latest_checkpoint(output: Path) -> Path | None:
    """The newest complete ``checkpoints/step-N`` (an interrupted write leaves only a ``.step-N.*.tmp``); with
    none left (deleted to save disk), the published output, a complete copy of the final checkpoint once its
    ``config.json`` is back (``_publish`` puts it back after everything else)."""
    found = sorted(Path(output).glob(f"{CHECKPOINTS}/step-*/{STATE_DIR}"), key=lambda p: int(p.parent.name[5:]))
    if found:
        return found[-1].parent
    published = Path(output)
    return published if (published / STATE_DIR / "state.pt").is_file() and (published / "config.json").is_file() \
        else None


def check_output(args: TrainingArguments, identity: dict) -> Path | None:
    """The checkpoint to resume from (None: start fresh), after refusing what would mix two runs in one output:
    a non-empty output without --resume or --overwrite, and a checkpoint trained with another identity. Cheap
    (reads one small JSON file), so commands run it before loading anything; it changes nothing on disk. Only the
    main process (RANK 0 under torchrun) checks emptiness: the others may look after it has started writing."""
    output = Path(args.output)
    if args.resume and args.overwrite:
        raise TrainerError("--resume continues the run in --output, --overwrite discards it: give one of them")
    if args.overwrite:
        return None
    if not args.resume:
        if int(os.environ.get("RANK", "0")) == 0 and output.exists() and any(output.iterdir()):
            raise TrainerError(f"output {output} exists and is not empty: pass --resume to continue it, --overwrite "
                               "to discard it and start afresh, or choose a new --output")
        return None
    checkpoint = latest_checkpoint(output)
    # no checkpoint at all (a half-published output, say): its identity still keys it, and a run with other inputs
    # would train from scratch beside it, publishing over it only at the end
    saved = read_identity(checkpoint if checkpoint is not None else output)
    if saved is not None and saved != identity:
        raise TrainerError(f"cannot resume {checkpoint or output}: it was trained with other inputs ("
                           f"{'; '.join(identity_changes(saved, identity))}); to start afresh pass --overwrite "
                           "(discards the old output) or choose a new --output")
    return checkpoint


@contextlib.contextmanager
def deterministic_kernels(on: bool = True) -> Iterator[None]:
    """PyTorch's deterministic kernels inside the block, as before after it. Without them, two CPU runs of the same
    seed differed by rounding after the first steps (embedding gradients summed in thread order), enough to move a
    fine-tuned stage's nDCG@10 by 0.006 over a chain; with them the weights are bit-identical, at no measured cost
    (``runs/deterministic/run.log``). ``warn_only``: an op without a deterministic kernel warns
    instead of failing; on CUDA cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG``, set here unless the user set it."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def read_identity(checkpoint: Path) -> dict | None:
    """The identity a checkpoint was trained under; None for one written before resume was keyed."""
    path = Path(checkpoint) / STATE_DIR / IDENTITY_FILE
    return json.loads(path.read_text())["identity"] if path.is_file() else None


@contextlib.contextmanager
def exclusive_run(args: TrainingArguments, identity: dict) -> Iterator[None]:
    """A training command's block: ``output_lock`` on ``args.output`` held throughout (by the main process only:
    under torchrun the other ranks write nothing, and would refuse each other), and ``check_output`` passed first.
    An output folder the block created is removed again if it fails before its first checkpoint, so a failed
    command leaves nothing that looks like a result (or like a run to resume)."""
    main = int(os.environ.get("RANK", "0")) == 0
    output = Path(args.output)
    with output_lock(args.output) if main else contextlib.nullcontext(), hold_records():
        created = not output.exists()
        check_output(args, identity)
        try:
            yield
        except BaseException:
            if main and created and output.is_dir() and latest_checkpoint(output) is None:
                log.info("removing %s: the run failed before its first checkpoint", output)
                shutil.rmtree(output, ignore_errors=True)
            raise
        finally:  # in one process (the chain, tests) the next job's lines went on into this run's train.log
            close_train_log()


def micro_seeds(seed: int, micro: int, rank: int) -> tuple[int, int]:
    """Two independent seeds (collator generator, global torch RNG) for one micro-batch on one rank."""
    first, second = np.random.SeedSequence([seed, micro, rank]).generate_state(2)
    return int(first), int(second)


class Trainer:
    """Runs one training job; see the module docstring for what it writes. ``model`` is the stage's ``nn.Module``
    with a ``name``, ``make_collator()``, ``forward``/``loss`` on a collated batch and ``save(directory, metadata)``:
    ``retromae_ir.pretrain.base.PretrainModel`` and ``retromae_ir.finetune.model.BiEncoder``."""

    job = "pre-training"  # the progress bar's and the loss curve's label (subclasses train other things)

    def __init__(self, model: torch.nn.Module, examples: Sequence[Any], args: TrainingArguments, metadata: dict,
                 identity: dict | None = None):
        """``identity``: the command's ``run_identity`` of all its arguments (default: of ``args`` alone)."""
        self.args = args
        self.identity = identity if identity is not None else run_identity(args)
        self.output = Path(args.output)
        self.metadata = metadata
        self.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.rank, self.world_size = _distributed_rank_world(self.device.type)
        if self.device.type == "cuda" and self.world_size > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.examples = examples
        self.schedule = Schedule.build(len(examples), args, self.world_size)
        self.model = model.to(self.device)
        self.collator = model.make_collator()
        self.wrapped = self._wrap(self.model)
        self.optimizer = _adamw(self.model, args)
        self.plan = LinearPlan.build(self.schedule.max_steps, args.warmup_ratio)
        self.step = 0
        self.history: list[dict] = []

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.world_size == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    # ---- resume ----------------------------------------------------------------------------------------------
    def restore(self, checkpoint: Path) -> None:
        """Model, optimizer, learning-rate plan and step from ``checkpoint`` (a ``checkpoints/step-N`` directory or
        the published output), whose identity ``check_output`` has matched with this run's."""
        if read_identity(checkpoint) is None:
            log.warning("%s predates keyed resume: its inputs cannot be checked against this run's", checkpoint)
        state = torch.load(checkpoint / STATE_DIR / "state.pt", map_location="cpu", weights_only=False)
        self.model.load_state_dict(self.load_model(checkpoint).state_dict())
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = state["step"]
        self._check_continuable(state.get("micro_batches", self.step * self.args.grad_accum))
        if "plan" in state:
            self.plan = self._replanned(LinearPlan(**state["plan"]))
        if "history" in state:  # the loss curve up to the checkpoint's step, whatever loss.csv held at the kill
            self.history = list(state["history"])
        else:  # a checkpoint from before it kept its curve
            self.history = [row for row in read_loss_csv(self.output / "loss.csv") if int(row["step"]) <= self.step]
        log.info("resumed from %s at step %d", checkpoint, self.step)

    def _check_continuable(self, consumed: int) -> None:
        """Refuse to continue for more steps a checkpoint whose last step accumulated a short window (its
        ``--epochs`` ended inside it): the next step's window starts at ``step x grad_accum`` and would leave the
        micro-batches in between untrained, with loss.csv's epochs counting them."""
        skipped = self.step * self.args.grad_accum - consumed
        if skipped > 0 and self.schedule.max_steps > self.step:
            raise TrainerError(f"the checkpoint's last optimizer step accumulated {self.args.grad_accum - skipped} "
                               f"of {self.args.grad_accum} micro-batches (its --epochs ended inside the window): "
                               f"continuing it would leave {skipped} untrained; pass --overwrite to start afresh "
                               "for the new length")

    def _replanned(self, saved: LinearPlan) -> LinearPlan:
        """``saved`` for this run's total (see ``LinearPlan``), refusing a total the checkpoint is already past."""
        total = self.schedule.max_steps
        if total == saved.total:
            return saved
        if self.step > total:
            raise TrainerError(f"the checkpoint is at step {self.step}, past this run's {total} steps: ask for at "
                               f"least {self.step} (--max-steps), or pass --overwrite to start afresh")
        if total <= saved.warmup:
            raise TrainerError(f"{total} steps end within the checkpoint's warm-up of {saved.warmup} steps: the "
                               "learning rate would still be rising at the end; ask for more steps (--max-steps), "
                               "or pass --overwrite to start afresh")
        plan = replace(saved, total=total)
        log.info("continuing with a new run length: %d optimizer steps instead of %d (same inputs); learning "
                 "rate re-planned over %d steps (warm-up of %d kept): factor %.4f at step %d, 0 at step %d",
                 total, saved.total, total, plan.warmup, plan.factor(self.step), self.step, total)
        return plan

    def load_model(self, checkpoint: Path) -> torch.nn.Module:
        """A model of the trained kind with ``checkpoint``'s weights (subclasses override for other kinds)."""
        return type(self.model).from_pretrained(checkpoint, self.model.masking, self.model.method_args)

    # ---- training ----------------------------------------------------------------------------------------------
    def train(self) -> Path:
        """Train to ``max_steps`` and publish the final checkpoint; with PyTorch's deterministic kernels unless
        ``--nondeterministic``, so that two runs of the same inputs and seed give the same weights."""
        with deterministic_kernels(not self.args.nondeterministic):
            return self._train()

    def _train(self) -> Path:
        resume_from = self._prepare_output()
        if resume_from is not None:
            self.restore(resume_from)
        check_same_step(self.step, self.world_size, self.device)
        if self.step >= self.schedule.max_steps:  # resumed at its end: nothing to train
            log.info("%s is trained to step %d already: nothing to do", self.output, self.step)
            if self.is_main:
                if resume_from != self.output:  # a kill before its publish: published as it is (saved again, it
                    _publish(resume_from, self.output)  # would record this invocation's schedule and arguments)
                self._write_curves()  # the curve of these weights (a kill may have come before it was written)
            return self.output
        log.info("training %s: %d segments, %d optimizer steps (%.2f epochs), %d process(es), device %s, bf16 %s",
                 self.model.name, self.schedule.examples, self.schedule.max_steps,
                 self.schedule.epoch(self.schedule.max_steps), self.world_size, self.device, self.args.bf16)
        if self.schedule.left_out:
            log.info("each epoch trains %d of the %d examples, in whole batches of %d x %d process(es): %d left out, "
                     "others each epoch", self.schedule.examples - self.schedule.left_out, self.schedule.examples,
                     self.schedule.batch_size, self.world_size, self.schedule.left_out)
        progress = tqdm(total=self.schedule.max_steps, initial=self.step, disable=not self.is_main, unit="step",
                        desc=f"{self.job} {self.model.name}")
        self.wrapped.train()
        while self.step < self.schedule.max_steps:
            lr = self._set_learning_rate()
            terms = self.train_step()
            self.step += 1
            self.history.append({"step": self.step, "epoch": round(self.schedule.epoch(self.step), 4), "lr": lr,
                                 "max_steps": self.plan.total, **terms})
            progress.update(1)
            progress.set_postfix(loss=f"{terms['loss']:.3f}")
            if self.is_main and self.step % self.args.logging_steps == 0:
                log.info("step %d %s", self.step, " ".join(f"{k}={v:.4f}" for k, v in terms.items()))
                self._write_curves()
            if self.args.save_steps > 0 and self.step % self.args.save_steps == 0 and self.step < self.schedule.max_steps:
                self.save_checkpoint()
        progress.close()
        final = self.save_checkpoint()
        if self.is_main:
            _publish(final, self.output)
            log.info("final checkpoint in %s", self.output)
        _barrier(self.world_size)
        return self.output

    def _prepare_output(self) -> Path | None:
        """Check the output (``check_output``), discard it on --overwrite, start train.log, delete what a killed
        write left; returns the checkpoint to resume from."""
        checkpoint = check_output(self.args, self.identity)
        discard = self.is_main and self.args.overwrite and self.output.exists() and any(self.output.iterdir())
        if discard:
            shutil.rmtree(self.output)
        self.output.mkdir(parents=True, exist_ok=True)
        self._setup_logging()
        if discard:
            log.info("--overwrite: discarded the previous contents of %s", self.output)
        if self.is_main:
            remove_stale_temporaries(self.output, self.output / CHECKPOINTS)
        if checkpoint is None and self.args.resume:
            log.info("--resume: no complete checkpoint in %s, nothing to resume: starting from step 0",
                     self.output / CHECKPOINTS)
        return checkpoint

    def _set_learning_rate(self) -> float:
        """Set every parameter group's learning rate for the coming step from the plan; returns it."""
        lr = self.args.lr * self.plan.factor(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def train_step(self) -> dict[str, float]:
        """One optimizer step over its window of micro-batches (``Schedule.window``: ``grad_accum`` of them, the
        last step of an ``--epochs`` run maybe fewer); returns every loss term averaged over them (and over
        processes)."""
        totals: dict[str, float] = {}
        window = self.schedule.window(self.step)
        for micro in window:
            collator_seed, torch_seed = micro_seeds(self.args.seed, micro, self.rank)
            examples = [self.examples[i] for i in self.schedule.indices(micro, self.rank, self.args.seed)]
            batch = self.collator(examples, torch.Generator().manual_seed(collator_seed))
            batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
            torch.manual_seed(torch_seed)
            last = micro == window[-1]
            with self._sync(last), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.args.bf16):
                losses = self.wrapped(batch)
            (losses["loss"] / len(window)).backward()
            for name, value in losses.items():
                totals[name] = totals.get(name, 0.0) + float(value.detach()) / len(window)
        return self.update(totals)

    def update(self, terms: dict[str, float]) -> dict[str, float]:
        """The optimizer step after a step's backward passes; returns the loss ``terms`` averaged over processes.
        A non-finite loss stops the run before the step (on every process: the mean is nan or inf on all of them),
        so that no checkpoint holds what it would have made: such a run used to train on to NaN weights, publish
        them and exit 0."""
        terms = mean_across_ranks(terms, self.world_size, self.device)
        if not math.isfinite(terms["loss"]):
            raise TrainingDiverged(
                f"step {self.step + 1}: the loss is {terms['loss']} "
                f"({', '.join(f'{k}={v:.4g}' for k, v in terms.items() if k != 'loss')}): training stopped before "
                f"this step's update; the checkpoints in {self.output / CHECKPOINTS} are from before it (a smaller "
                "--lr, or --max-grad-norm, may keep the loss finite)")
        if self.args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return terms

    def _sync(self, last: bool):
        if self.world_size > 1 and not last:
            return self.wrapped.no_sync()
        return contextlib.nullcontext()

    # ---- output ---------------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """A full checkpoint in ``checkpoints/step-N`` (main process), keeping the last two. Weights that are not
        finite (an update from a finite loss can overflow them) are refused, not saved."""
        path = self.output / CHECKPOINTS / f"step-{self.step}"
        bad = next((name for name, p in self.model.named_parameters() if not torch.isfinite(p).all()), None)
        if bad is not None:
            raise TrainingDiverged(f"step {self.step}: the update left {bad} with values that are not finite: not "
                                   f"saved; the checkpoints in {self.output / CHECKPOINTS} are from before it (a "
                                   "smaller --lr, or --max-grad-norm, may keep the weights finite)")
        if self.is_main:
            with atomic_dir(path) as tmp:
                self.model.save(tmp, self._metadata())
                (tmp / STATE_DIR).mkdir()
                torch.save({"optimizer": self.optimizer.state_dict(), "plan": asdict(self.plan),
                            "step": self.step, "micro_batches": self.schedule.consumed(self.step),
                            "seed": self.args.seed, "world_size": self.world_size,
                            "history": self.history},  # loss.csv is rewritten after the checkpoint is published
                           tmp / STATE_DIR / "state.pt")
                run = {"identity": self.identity, "digest": identity_digest(self.identity), "step": self.step}
                (tmp / STATE_DIR / IDENTITY_FILE).write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
            for old in sorted(self.output.glob(f"{CHECKPOINTS}/step-*"), key=lambda p: int(p.name[5:]))[:-KEEP_CHECKPOINTS]:
                shutil.rmtree(old)
            self._write_curves()
            log.info("checkpoint %s", path)
        _barrier(self.world_size)
        return path

    def _metadata(self) -> dict:
        return {**self.metadata, "step": self.step, "epoch": self.schedule.epoch(self.step),
                "world_size": self.world_size, "training": asdict(self.args)}

    def _write_curves(self) -> None:
        if not self.history:
            return
        fields = list(dict.fromkeys(key for row in self.history for key in row))  # rows from before a column
        with atomic_write(self.output / "loss.csv") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
            writer.writeheader()
            writer.writerows(self.history)
        plot_loss_curves(self.history, self.output / "loss.png", title=f"{self.model.name} {self.job}")

    def _setup_logging(self) -> None:
        """Append the package's log to train.log, replacing the handler an earlier run in this process added (two
        would write every line twice)."""
        if not self.is_main:
            return
        close_train_log()
        package = logging.getLogger("retromae_ir")
        handler = logging.FileHandler(self.output / "train.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.train_log = True
        release_held(handler)  # what the command logged while it read its data, before this file was open
        package.addHandler(handler)
        package.setLevel(logging.INFO)


def close_train_log() -> None:
    """Detach and close the package's train.log handler, if a run added one."""
    package = logging.getLogger("retromae_ir")
    for old in [h for h in package.handlers if getattr(h, "train_log", False)]:
        package.removeHandler(old)
        old.close()


PLAN_COLUMNS = ("step", "epoch", "lr", "max_steps")  # loss.csv's columns that are not loss terms


def plot_loss_curves(history: list[dict], path: Path, title: str) -> None:
    """One line per loss term against the optimizer step (matplotlib Agg), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in history]
    names = [k for k in history[0] if k not in PLAN_COLUMNS]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3), squeeze=False)
    for axis, name in zip(axes[0], names):
        values = [float(row[name]) for row in history]
        axis.plot(steps, values, lw=0.6, alpha=0.5)
        window = max(1, len(values) // 25)
        if window > 1:
            smooth = np.convolve(values, np.ones(window) / window, mode="valid")
            axis.plot(steps[window - 1:], smooth, lw=1.5)
        axis.set_title(name)
        axis.set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


PUBLISHED_LAST = ("config.json", "card.yaml")  # what marks a finished output (the chain's done files), in this order


def _publish(checkpoint: Path, output: Path) -> None:
    """Copy a checkpoint's files to the top of ``output``, each by an atomic rename. The files that mark a finished
    output (``PUBLISHED_LAST``) are taken down first and put back last, so a kill midway never leaves an output
    marked finished over missing files or a mix of two checkpoints' (a missing ``projection.safetensors`` would
    load as the identity)."""
    for name in PUBLISHED_LAST:
        (output / name).unlink(missing_ok=True)
    for stale in {path.name for path in checkpoint_files(output)} - {item.name for item in checkpoint.iterdir()}:
        (output / stale).unlink()  # an earlier publish's model file this checkpoint lacks (a projection, say)
    last = {name: place for place, name in enumerate(PUBLISHED_LAST, 1)}
    for item in sorted(checkpoint.iterdir(), key=lambda item: (last.get(item.name, 0), item.name)):
        target = output / item.name
        if item.is_dir():
            with atomic_dir(target) as tmp:
                shutil.copytree(item, tmp, dirs_exist_ok=True)
        else:
            with atomic_write(target, "wb") as handle:
                handle.write(item.read_bytes())


def _adamw(model: torch.nn.Module, args: TrainingArguments) -> torch.optim.Optimizer:
    """AdamW; no weight decay on biases and LayerNorm weights (1-d parameters)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim > 1]
    no_decay = [p for p in params if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)


def _distributed_rank_world(device_type: str) -> tuple[int, int]:
    """(rank, world size); starts the process group under torchrun: nccl for a run on GPUs, gloo for one on CPUs
    (``--device cpu`` on a GPU host got nccl, which has no CPU tensors: the first broadcast failed)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if not dist.is_initialized():
        if device_type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()


def check_same_step(step: int, world_size: int, device: torch.device) -> None:
    """Every process starts at the same step: each finds the checkpoint to resume in the output folder as its own
    machine sees it, and a node without the shared folder started at step 0 beside the others' step N (other data,
    another learning rate, weights drifting apart under one DDP). Refused on every process, once each reaches it (a
    refusal a process raises before it, on what only it sees, leaves the others to the process group's timeout)."""
    if world_size == 1:
        return
    bounds = torch.tensor([step, -step], dtype=torch.int64, device=device)
    dist.all_reduce(bounds, op=dist.ReduceOp.MAX)
    first, last = -int(bounds[1]), int(bounds[0])
    if first != last:
        raise TrainerError(f"the processes start at different steps ({first} to {last}): each read the output folder "
                           "on its own machine; give every node the same (shared) --output")


def mean_across_ranks(values: dict[str, float], world_size: int, device: torch.device) -> dict[str, float]:
    if world_size == 1:
        return values
    tensor = torch.tensor(list(values.values()), dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return {name: float(v) / world_size for name, v in zip(values, tensor.tolist())}


def _barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()


def read_loss_csv(path: Path) -> list[dict]:
    """loss.csv's rows: steps as int, other cells as float (a column added after a row was written is left out of
    that row)."""
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [{k: int(v) if k in ("step", "max_steps") else float(v) for k, v in row.items() if v != ""}
                for row in csv.DictReader(handle)]
