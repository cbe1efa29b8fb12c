"""The chain's stages: pre-training -> stage 1 -> mining -> stage 2 -> cross-encoder -> soft labels -> distillation,
each through the project's own command (``python -m retromae_ir.{pretrain,mine,finetune,rerank}``) in a
subprocess, each skipped while its output and the earlier outputs it read are the ones recorded (an interrupted chain
continues where it stopped; a stage whose inputs were made again is made again). Every fine-tuned
checkpoint is encoded once and searched dense-only, sparse-only and hybrid (exact Eq. 12) on the test split and
the dev split held out of the training queries; ``results.json`` records metrics and wall seconds per stage.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
import time
from functools import cached_property
from pathlib import Path
from typing import Sequence

import yaml

from retromae_ir.chain.config import ChainConfig
from retromae_ir.chain.settings import STAGES, check_settings, pipeline_stage, stage_settings
from retromae_ir.bm25 import index_code
from retromae_ir.data.beir import dataset_digest
from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.evaluate.metrics import EVALUATION_VERSION
from retromae_ir.finetune.data import MASKING_VERSION, twin_rule_acts
from retromae_ir.io import as_stored, atomic_write, cached_checkpoint_key, checkpoint_key, file_digest, start_key
from retromae_ir.mine import MINING_VERSION
from retromae_ir.packaged import default_model
from retromae_ir.pretrain import get_method
from retromae_ir.search.exact_hybrid import SEARCH_VERSION

log = logging.getLogger("retromae_ir.chain")
MODES = ("dense", "sparse", "hybrid")
EVALUATION = (*MODES, "dev", "eval_wall_s", "made_with", "sparse_weight", "sparse_weight_sweep")  # a record's metrics
METRICS = ("ndcg@10", "recall@100")
# A training stage's run-identity version, bumped when its command's run identity gains a key: checkpoints the chain
# started under the old one, which the command's --resume refuses, are then started afresh once, not resumed into a
# refusal on every run. A started.json entry without a version (or a stage folder without an entry) is version 1.
# 2 (2026-11-27): the fine-tuning identity keys the encoding code. (A new pre-training objective is in 0-pretrain's
# inputs: made again anyway.)
IDENTITY_VERSIONS = {"1-stage1": 2, "2-stage2": 2, "3-distill": 2}
# versions of the code a stage's output depends on besides its inputs (see Chain.timed): vectors and search runs
# (a card's evaluation and its mined negatives), and the representation fine-tuning trains (finetune/model.py)
RETRIEVAL_CODE = {"encoding": ENCODING_VERSION, "search": SEARCH_VERSION}
TRAINING_CODE = {"encoding": ENCODING_VERSION}
DEPTH = 100  # hits a run is scored on: retrieved one deeper, so that a dropped self-hit leaves DEPTH (as BEIR's 1,000)
# searched over the chain's own corpus (a sub-corpus changes every figure): stage name -> (label, its mode)
BASELINES = {"baseline-bm25": ("BM25 flat (Pyserini)", "sparse"),
             "baseline-minilm-mean": ("all-MiniLM-L6-v2 off the shelf (mean pooling)", "dense")}
ABLATION = "no-pretrain"


class StageFailed(RuntimeError):
    """A stage's command exited non-zero; its output is in the chain's commands.log."""


def command(*args: str, log_file: Path) -> None:
    """Run ``python -m ...``, output appended to ``log_file``; a failure stops the chain naming the log."""
    log.info("running: %s", " ".join(args))
    status = spawn(args, log_file)
    if status != 0:
        raise StageFailed(f"{args[0]} failed (exit {status}); see {log_file}")


def spawn(args: Sequence[str], log_file: Path) -> int:
    """``python -m ARGS`` in a new interpreter, its output appended to ``log_file``; its exit status."""
    with open(log_file, "a") as handle:
        return subprocess.run([sys.executable, "-m", *args], stdout=handle, stderr=subprocess.STDOUT).returncode


def grad_cache_flags(config: ChainConfig, group: int) -> list[str]:
    """``--grad-cache-chunk`` when a step's passages (batch x group) exceed ``chunk_passages``: as many queries a
    chunk as fit; none otherwise (gradient caching costs a second forward pass)."""
    if config.batch * group <= config.chunk_passages:
        return []
    return ["--grad-cache-chunk", str(max(1, config.chunk_passages // group))]


def artifact_digest(path: Path) -> dict | str:
    """What a stage's output (or an input it reads) is keyed by, wherever the chain's folder lies: a card by its
    fingerprint but the checkpoint's path, and the files of the checkpoint it names (weights, config, tokenizer:
    what a stage reading the card trains from; a hub name's cached revision's); a checkpoint folder (or its
    ``config.json``) by those files; any other file by its bytes. A card that cannot be loaded is keyed by why, so
    it is never current."""
    from retromae_ir.encode.cards import CardError, load_card

    path = Path(path)
    if path.suffix == ".yaml":
        try:
            card = load_card(path)
            checkpoint = cached_checkpoint_key(card.checkpoint_path())
        except CardError as error:
            return f"not found: {error}"
        return {"card": dataclasses.replace(card, checkpoint="").fingerprint(), "checkpoint": checkpoint}
    if path.name == "config.json":
        path = path.parent
    return file_digest(path) if path.is_file() else cached_checkpoint_key(path)  # a folder, or a hub name


def artifact_label(path: Path) -> str:
    """An input's name in a stage's record: the file's, or the stage folder's for its card."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}" if path.name in ("card.yaml", "config.json") else path.name


class Chain:
    """The chain (with DupMAE pre-training unless the configuration says not); results.json in ``output`` records
    metrics and wall time per stage."""

    @property
    def label(self) -> str:
        return "DupMAE pre-training" if self.config.pretrain else "no pre-training"

    def __init__(self, folder: Path, corpus: Path, output: Path, config: ChainConfig, model: str | None, bf16: bool,
                 pretrained: Path | None = None, lucene: bool = True):
        self.folder, self.output, self.config, self.model, self.bf16 = folder, output, config, model, bf16
        self.corpus, self.pretrained = corpus, pretrained
        self.lucene = lucene  # False (a host without Java): no Lucene impact indexes and no BM25 baseline
        output.mkdir(parents=True, exist_ok=True)
        self.results_path = output / "results.json"
        self.results = json.loads(self.results_path.read_text()) if self.results_path.is_file() else {}
        # what this run made or found current: only these are reported (a stage this configuration skips, say
        # distillation switched off, keeps its record, but its rows were made from outputs since made again)
        self.made: set[str] = set()
        self.evaluated: set[str] = set()
        self.started_path = output / "started.json"
        self.started = json.loads(self.started_path.read_text()) if self.started_path.is_file() else {}
        resumable = {name: entry for name, entry in self.started.items()  # unfinished, with checkpoints to resume
                     if name not in self.results and (output / entry["folder"]).is_dir()
                     and started_under_current_identity(name, entry)}
        self.inputs = {"dataset": folder.name, "data_sha256": dataset_digest(folder), "model": model, "bf16": bf16,
                       "pretrained": str(pretrained) if pretrained else None,
                       # every stage starts from --model, else the packaged MiniLM: keyed by its files either way
                       "model_weights": as_stored(start_key(model or default_model())),
                       "pretrained_weights": as_stored(checkpoint_key(pretrained)) if pretrained else None}
        check_settings(self.results, config, self.inputs, str(self.results_path))
        check_settings(resumable, config, self.inputs, str(self.started_path), verb="started")
        from retromae_ir.data.splits import carve_dev_split

        train_qrels, self.dev_qrels = carve_dev_split(folder / "qrels" / "train.tsv", config.dev_queries,
                                                      output / "splits", queries=folder / "queries.jsonl",
                                                      evaluated=(folder / "qrels" / "test.tsv",))
        self.train_files = (folder / "queries.jsonl", train_qrels)
        self.train = ["--queries", str(self.train_files[0]), "--qrels", str(self.train_files[1])]
        self.log_file = output / "commands.log"
        self.index_root = output / "indexes"

    def timed(self, name: str, done: Path, run, inputs: tuple[Path, ...] = (), code: dict | None = None) -> Path:
        """Run a stage unless ``done`` exists and results.json records it as made from these ``inputs`` (the
        chain's earlier outputs it reads) into this very output, both by digest (``artifact_digest``). A stage
        without a record (interrupted, or killed before its record: made under settings nobody checked) is run,
        a training stage resuming from its checkpoints under the settings check of started.json, unless they were
        trained from other inputs. A finished stage whose output was deleted or replaced by hand, or whose inputs
        were made again (a stage 1 trained anew would otherwise keep the negatives mined with the old one), is
        made again from scratch, its old metrics dropped (they would stand beside the new weights). An entry
        recorded before these digests existed is adopted: its present files are recorded. ``code``: versions of the
        code that makes the output, recorded with the inputs (a stage made by older code is made again). The wall
        time goes into results.json."""
        made_from = as_stored({**{artifact_label(path): artifact_digest(path) for path in inputs}, **(code or {})})
        entry = self.results.get(name)
        if entry is not None and "output" not in entry and done.exists():
            log.info("%s: recorded by an older retromae_ir; its present inputs and output are recorded", name)
            self.record(name, inputs=made_from, output=as_stored(artifact_digest(done)))
        stale = self.stale(name, done, made_from)
        if stale:
            folder = done.parent if done.parent != self.output and done.parent.is_relative_to(self.output) else None
            if name in self.results:  # a finished stage made again: from scratch, never resumed from its checkpoints
                log.info("%s is made again: %s", name, stale)
                self.discard(name, done, folder)
            elif folder and self.started.get(name, {}).get("made_from", made_from) != made_from:
                log.info("%s: its checkpoints were trained from other inputs; started afresh", name)
                remove_tree(folder)
            elif folder and folder.is_dir() and not started_under_current_identity(name, self.started.get(name, {})):
                log.info("%s: its checkpoints were started under an older run identity; started afresh", name)
                remove_tree(folder)
            if folder:  # a stage folder: a training stage resumes from its checkpoints there
                self.started[name] = {"settings": stage_settings(self.config, name, self.inputs, started=True),
                                      "folder": str(folder.relative_to(self.output)),  # an output copied elsewhere
                                      "made_from": made_from, "version": identity_version(name)}  # its own
                with atomic_write(self.started_path) as handle:
                    json.dump(self.started, handle, indent=2)
            start = time.time()
            run()
            self.record(name, wall_s=round(time.time() - start, 1), inputs=made_from,
                        output=as_stored(artifact_digest(done)))
        self.made.add(name)
        return done

    def reported_results(self) -> dict:
        """results.json as this run stands by it: the stages it made or found current, with metrics only where it
        evaluated them or found them current (what the report shows)."""
        return {name: entry if name in self.evaluated else {k: v for k, v in entry.items() if k not in EVALUATION}
                for name, entry in self.results.items() if name in self.made | self.evaluated}

    def discard(self, name: str, done: Path, folder: Path | None) -> None:
        """Drop a finished stage's output (its stage ``folder``, or its file), then its record (metrics included):
        a removal that fails leaves the record, so the next run makes the stage again instead of resuming."""
        if folder:
            remove_tree(folder)
        else:
            done.unlink(missing_ok=True)
        self.results.pop(name)
        self.save_results()

    def stale(self, name: str, done: Path, inputs: dict) -> str | None:
        """Why the stage must be made (again), or None when its recorded output stands."""
        entry = self.results.get(name)
        if not done.exists():
            return f"{done} is missing"
        if entry is None:
            return "its output has no record"
        changed = sorted(label for label in set(inputs) | set(entry["inputs"])
                         if inputs.get(label) != entry["inputs"].get(label))
        if changed:
            return f"made from other {', '.join(changed)}"
        if entry["output"] != as_stored(artifact_digest(done)):
            return f"{done} was changed since it was made"
        return None

    def record(self, name: str, **values) -> None:
        """Add ``values`` to the stage's results.json entry, with the settings that made it."""
        settings = stage_settings(self.config, name, self.inputs)
        self.results.setdefault(name, {}).update(values, settings=settings)
        self.save_results()

    def save_results(self) -> None:
        """results.json, its entries in pipeline order (a stage made again is not listed after the later ones)."""
        self.results = dict(sorted(self.results.items(), key=lambda item: STAGES.index(pipeline_stage(item[0]))))
        with atomic_write(self.results_path) as handle:
            json.dump(self.results, handle, indent=2)

    def flags(self, stage_dir: Path, steps: int, epochs: float = 0.0) -> list[str]:
        length = ["--epochs", str(epochs)] if epochs > 0 else ["--max-steps", str(steps)]
        return ["--output", str(stage_dir), *length, "--warmup-ratio", str(self.config.warmup_ratio),
                "--save-steps", "50", "--logging-steps", "5", "--resume", *(["--bf16"] if self.bf16 else [])]

    def write_card(self, name: str, checkpoint: Path | str, sparse_weight: float = 1.0) -> Path:
        """A DupMAE card over ``checkpoint`` with the configuration's lengths and k; pooling and normalisation are
        what the checkpoint declares (retromae_ir/encode/declared.py)."""
        c, card = self.config, self.output / f"{name}.yaml"
        card.write_text(yaml.safe_dump({"checkpoint": self.as_written(checkpoint), "kind": "dupmae",
                                        "dims": self.hidden(checkpoint), "k": c.k, "query_k": c.query_k,
                                        "sparse_weight": sparse_weight, "max_query_length": c.query_length,
                                        "max_passage_length": c.passage_length}))
        return card

    def as_written(self, checkpoint: Path | str) -> str:
        """A checkpoint folder inside the chain's folder relative to it (a card there reads it so: the folder can
        move), another local folder absolute, a hub name as given."""
        path = Path(checkpoint).expanduser()
        if not path.is_dir():
            return str(checkpoint)
        path, output = path.resolve(), self.output.resolve()
        return f"./{path.relative_to(output)}" if path.is_relative_to(output) else str(path)

    @staticmethod
    def hidden(checkpoint: Path | str) -> int:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(checkpoint)).hidden_size

    # ---- stages ------------------------------------------------------------------------------------------------
    def start(self) -> Path:
        """The card stage 1 starts from: the DupMAE pre-training output (skipped for --pretrained), or the model
        itself without pre-training; its OT weight chosen on the dev split."""
        if not self.config.pretrain:
            return self.start_card("0-start", self.start_checkpoint())
        if self.pretrained:  # a finished pre-training of the user's: never trained here (nor into that folder)
            return self.start_card("0-pretrain", self.pretrained.resolve())
        c, out = self.config, self.output / "0-pretrain"
        model = ["--model", self.model] if self.model else []
        self.timed("0-pretrain", out / "config.json", lambda: command(
            "retromae_ir.pretrain", "--method", "dupmae", *model, "--corpus", str(self.corpus),
            "--max-length", str(c.pretrain_length), "--batch-size", str(c.pretrain_batch), "--lr", "1e-4",
            *self.flags(out, c.pretrain_steps), log_file=self.log_file), inputs=(self.corpus,),
            code=get_method("dupmae").code_identity(None))
        return self.start_card("0-pretrain", out.resolve())

    def start_checkpoint(self) -> str:
        from retromae_ir.encode.cards import load_card

        return self.model or load_card("dupmae-minilm").checkpoint_path()

    def start_card(self, name: str, checkpoint: Path | str) -> Path:
        """The starting checkpoint's card with Eq. 12's OT weight: the configured one, or the best on the dev split
        (then the starting checkpoint is also evaluated, at that weight, on the test split)."""
        if self.config.sparse_weight > 0:
            card = self.write_card(name, checkpoint, self.config.sparse_weight)
            if self.config.evaluate_pretrained:
                self.evaluate(name, self.card_retrievers(card), {"start": artifact_digest(card)})
            return card
        # keyed as stage 1 keys its start (the card's fingerprint, with the pooling the checkpoint declares, and its
        # files or cached revision): a start that changed so is measured and its weight chosen again (it kept the
        # old ones while stage 1 was trained again from the new start)
        unweighted = self.write_card(f"{name}-unweighted", checkpoint)
        depends_on = {"start": artifact_digest(unweighted)}
        self.drop_stale_evaluation(name, depends_on)
        if "sparse_weight" not in self.results.get(name, {}):
            self.choose_sparse_weight(name, unweighted, depends_on)
        self.evaluated.add(name)
        return self.write_card(name, checkpoint, self.results[name]["sparse_weight"])

    def choose_sparse_weight(self, name: str, card: Path, depends_on: dict) -> None:
        """Sweep the OT weight on the dev split over the starting checkpoint's index; record the sweep, the choice,
        and the starting checkpoint's test metrics (dense, sparse, and the hybrid at the chosen weight only)."""
        from retromae_ir.evaluate.sparse_weight import best_weight, sweep_sparse_weight

        start = time.time()
        self.record_made_with(name, depends_on)
        retrievers = self.card_retrievers(card)
        retriever = retrievers["hybrid"]
        index = retriever.build_index(self.corpus, self.index_name(name))
        sweep = sweep_sparse_weight(index, retriever.model, *self.dev_queries)
        weight = best_weight(sweep)  # chosen before any test query is searched
        test = sweep_sparse_weight(index, retriever.model, *self.test_queries, weights=[weight])[weight]
        for mode in ("dense", "sparse"):
            self.evaluate_mode(name, mode, retrievers[mode])
        log.info("%s: OT weight %g chosen on the dev split (dev %s); test %s", name, weight, sweep[weight], test)
        self.record(name, sparse_weight=weight, sparse_weight_sweep={str(w): m for w, m in sweep.items()},
                    hybrid=test, eval_wall_s=round(time.time() - start, 1))

    def bm25_negatives(self) -> Path:
        return self.mine("1-bm25-negatives", "bm25")

    def stage1_data(self) -> Path | list[str]:
        """Eq. 13 is in-batch negatives only (group 1: the training qrels); a larger group adds BM25 negatives (a
        file, so :meth:`finetune` keys the stage on it)."""
        if self.config.group_stage1 == 1:
            return self.train
        return self.bm25_negatives()

    def index_name(self, stage: str) -> str:
        return f"{self.folder.name}-{self.output.name}-{stage}"

    def mine(self, name: str, retriever: str, index_name: str | None = None) -> Path:
        """Negatives for the training queries; with a card, through the index its evaluation built."""
        c, out = self.config, self.output / f"{name}.jsonl"
        return self.timed(name, out, lambda: command(
            "retromae_ir.mine", "--retriever", retriever, "--corpus", str(self.corpus), *self.train,
            "--output", str(out), "--min-rank", "3", "--max-rank", str(c.max_rank), "--negatives", str(c.negatives),
            "--index-root", str(self.index_root), *(["--index-name", index_name] if index_name else []),
            *([] if retriever == "bm25" else [  # a card: the precision and index its stage's evaluation built
                "--dtype", "bf16" if self.bf16 else "fp32", *([] if self.lucene else ["--no-lucene"])]),
            log_file=self.log_file),
            inputs=(*([] if retriever == "bm25" else [Path(retriever)]), self.corpus, *self.train_files),
            code={"mining": MINING_VERSION, **(index_code() if retriever == "bm25" else RETRIEVAL_CODE)})

    def finetune(self, name: str, stage: str, card: Path, data: Path | list[str], group: int) -> Path:
        """A fine-tuning stage on ``data``: a training file (mined negatives, soft labels) or qrels flags."""
        out = self.output / name
        c, distill = self.config, stage == "distill"
        calibrate = ["--calibrate-teacher"] if distill and c.calibrate_teacher else []
        terms = (["--sparse-loss-weight", str(c.sparse_loss_weight), "--sparse-temperature",
                  str(c.sparse_temperature)] if c.sparse_loss_weight > 0 else [])
        terms += ["--dense-loss-weight", str(c.dense_loss_weight)] if c.dense_loss_weight > 0 else []
        dropout = ["--attention-dropout", str(c.attention_dropout)] if c.attention_dropout >= 0 else []
        # distillation masks only its contrastive terms (refused without one)
        dropout += ["--mask-false-negatives"] if c.mask_false_negatives and (not distill or terms) else []
        files = self.train_files if isinstance(data, list) else (data,)
        data = data if isinstance(data, list) else ["--train", str(data)]
        self.timed(name, out / "card.yaml", lambda: command(
            "retromae_ir.finetune", "--stage", stage, "--encoder", str(card), *data,
            "--corpus", str(self.corpus), "--group-size", str(group), "--batch-size", str(c.batch),
            "--lr", str(c.stage_lr(stage)), *calibrate, *terms, *dropout,
            *grad_cache_flags(c, group),
            *self.flags(out, c.steps, c.stage_epochs(stage)),
            log_file=self.log_file), inputs=(card, self.corpus, *files),
            code={**TRAINING_CODE, **({"masking": MASKING_VERSION}
                                      if twin_rule_acts("--mask-false-negatives" in dropout, "--train" in data)
                                      else {})})
        return out / "card.yaml"

    def cross_encoder(self, negatives: Path) -> Path:
        """Train the teacher on the stage-2 negatives."""
        c, out = self.config, self.output / "4-cross-encoder"
        model = ["--model", self.model] if self.model else []
        self.timed("4-cross-encoder", out / "config.json", lambda: command(
            "retromae_ir.rerank", "train", *model, "--train", str(negatives), "--corpus", str(self.corpus),
            "--group-size", str(c.group), "--batch-size", str(c.ce_batch), "--max-length", str(c.ce_length),
            "--lr", str(c.ce_lr), *self.flags(out, c.ce_steps), log_file=self.log_file),
            inputs=(negatives, self.corpus), code={"masking": MASKING_VERSION})  # the twin rule on its negatives
        return out

    def soft_labels(self, teacher: Path | str, negatives: Path) -> Path:
        scored = self.output / "5-soft-labels.jsonl"
        return self.timed("5-soft-labels", scored, lambda: command(
            "retromae_ir.rerank", "score", "--model", str(teacher), "--input", str(negatives),
            "--corpus", str(self.corpus), "--output", str(scored),  # at the length the teacher was trained at
            log_file=self.log_file), inputs=(Path(teacher), negatives, self.corpus))

    def card_retrievers(self, card: Path) -> dict:
        """One retriever per mode over the same index: the corpus is encoded once for all three."""
        from retromae_ir.search.retriever import EncoderRetriever

        return {mode: EncoderRetriever(str(card), mode=mode, index_root=self.index_root, hits=DEPTH + 1,
                                       bf16=self.bf16, lucene=self.lucene) for mode in MODES}

    @cached_property
    def test_queries(self) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
        """The test split's judged queries and qrels, read once for every evaluation."""
        from retromae_ir.evaluate.beir_suite import judged_queries

        return judged_queries(self.folder, "test")

    @cached_property
    def dev_queries(self) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
        """The dev split (held out of the training queries): settings are compared on it."""
        from retromae_ir.data.readers import load_beir_queries, load_qrels

        qrels = load_qrels(self.dev_qrels)
        queries = load_beir_queries(self.folder / "queries.jsonl")
        return {qid: queries[qid] for qid in qrels}, qrels

    def evaluate(self, name: str, retrievers: dict, made_with: dict | None = None) -> None:
        """Search the test and dev queries over the chain's corpus with each mode's retriever: nDCG@10, R@100
        (the test metrics under the mode's name, the dev metrics under ``dev``). ``made_with``: what the metrics
        depend on beyond the stage's settings and the encoding code's version (a baseline's card and checkpoint
        files); see :meth:`drop_stale_evaluation`."""
        self.drop_stale_evaluation(name, made_with or {})
        self.record_made_with(name, made_with or {})
        start = time.time()
        for mode, retriever in retrievers.items():
            self.evaluate_mode(name, mode, retriever)
        if "eval_wall_s" not in self.results.get(name, {}):
            self.record(name, eval_wall_s=round(time.time() - start, 1))
        self.evaluated.add(name)

    @cached_property
    def evaluated_on(self) -> dict:
        """The files the chain makes that every evaluation reads: the (sub-)corpus and the dev split (carved again
        when its rule changes; an OT weight chosen on the old split was kept, with its dev rows)."""
        return {"corpus_sha256": file_digest(self.corpus), "dev_qrels_sha256": file_digest(self.dev_qrels)}

    def made_with(self, depends_on: dict) -> dict:
        """What a recorded evaluation was made with: ``depends_on``, the corpus and dev split, and the encoding,
        search and evaluation code's versions (a record made otherwise is evaluated again, not kept)."""
        return as_stored({**depends_on, **self.evaluated_on, **RETRIEVAL_CODE, "evaluation": EVALUATION_VERSION})

    def record_made_with(self, name: str, depends_on: dict) -> None:
        """Record what ``name``'s evaluation is made with before its first row, so an interrupted one's rows say
        too (:meth:`drop_stale_evaluation`); nothing is written when already recorded."""
        if self.results.get(name, {}).get("made_with") != self.made_with(depends_on):
            self.record(name, made_with=self.made_with(depends_on))

    def drop_stale_evaluation(self, name: str, depends_on: dict) -> None:
        """Drop the metrics (and a start's dev-chosen OT weight) recorded for ``name`` with anything else than
        ``depends_on`` and this encoding code (older ones recorded none), finished or interrupted, so they are
        measured again; the stage's training record stays. Before the version was recorded, a chain re-run after a
        vector-changing fix reported the old code's stage rows beside baselines measured anew."""
        recorded = self.results.get(name, {})
        if any(key in recorded for key in EVALUATION) and recorded.get("made_with") != self.made_with(depends_on):
            log.info("%s is evaluated again: recorded with other retrievers or encoding code", name)
            self.results[name] = {key: value for key, value in recorded.items() if key not in EVALUATION}
            if not self.results[name]:
                self.results.pop(name)
            self.save_results()

    def evaluate_mode(self, name: str, mode: str, retriever) -> None:
        from retromae_ir.evaluate import evaluate_run, remove_self_hits

        done = self.results.get(name, {})
        if mode in done and mode in done.get("dev", {}):
            return
        metrics = {}
        for split, (queries, qrels) in (("test", self.test_queries), ("dev", self.dev_queries)):
            run = remove_self_hits(retriever.retrieve(self.corpus, self.index_name(name), queries), DEPTH)  # as BEIR
            metrics[split] = evaluate_run(run, qrels, METRICS)
        self.record(name, **{mode: metrics["test"]}, dev={**done.get("dev", {}), mode: metrics["dev"]})
        log.info("%s %s: test %s, dev %s", name, mode, metrics["test"], metrics["dev"])

    def baselines(self) -> None:
        """BM25 and the off-the-shelf MiniLM over the same corpus as the stages."""
        from retromae_ir.bm25 import BM25Retriever
        from retromae_ir.search.retriever import EncoderRetriever

        baselines = {}
        if self.lucene:
            baselines["baseline-bm25"] = {"sparse": BM25Retriever(self.index_root / "bm25")}
        else:
            log.warning("no Lucene (--no-lucene): the BM25 baseline is not run")
        baselines["baseline-minilm-mean"] = {"dense": EncoderRetriever(
            "minilm-mean", mode="dense", index_root=self.index_root, hits=DEPTH + 1, bf16=self.bf16)}
        for name, retrievers in baselines.items():  # keyed by their run keys: an edited card is evaluated anew
            self.evaluate(name, retrievers, {mode: r.run_key(self.corpus) for mode, r in retrievers.items()})

    def run(self):
        """The stages, as a generator that pauses after each evaluated stage (see ``run_in_lockstep``)."""
        self.baselines()
        start = self.start()
        stage1 = self.finetune("1-stage1", "1", start, self.stage1_data(), self.config.group_stage1)
        self.evaluate("1-stage1", self.card_retrievers(stage1))
        yield
        mined = self.mine("2-mined-negatives", str(stage1), self.index_name("1-stage1"))
        stage2 = self.finetune("2-stage2", "2", stage1, mined, self.config.group)
        self.evaluate("2-stage2", self.card_retrievers(stage2))
        yield
        if not self.config.distill:
            return
        teacher = self.config.teacher or self.cross_encoder(mined)
        soft = self.soft_labels(teacher, mined)
        stage3 = self.finetune("3-distill", "distill", stage2, soft, self.config.group)
        self.evaluate("3-distill", self.card_retrievers(stage3))


def identity_version(stage: str) -> int:
    """The run-identity version of ``stage``'s command (:data:`IDENTITY_VERSIONS`)."""
    return IDENTITY_VERSIONS.get(stage, 1)


def started_under_current_identity(stage: str, entry: dict) -> bool:
    """Whether ``stage``'s started.json ``entry`` ({} for a stage folder without one) holds its command's current
    run-identity version."""
    return entry.get("version", 1) == identity_version(stage)


def remove_tree(folder: Path) -> None:
    """Remove a stage folder about to be made again, or fail: a removal that half failed (a file held open on a
    network file system, say) would leave checkpoints of the old inputs for the new run to resume."""
    if folder.exists():
        shutil.rmtree(folder)


def run_in_lockstep(chains: list[Chain]) -> None:
    """Advance every chain one stage at a time, so an interrupted run leaves comparable rows for each chain
    (the ablation reads the main chain's BM25 negatives and cross-encoder, which the main chain makes first)."""
    runners = [chain.run() for chain in chains]
    while runners:
        for runner in list(runners):
            if next(runner, StopIteration) is StopIteration:
                runners.remove(runner)


class AblationChain(Chain):
    """The same chain from the starting model, without DupMAE pre-training. BM25 negatives and the cross-encoder
    (whose training does not involve the bi-encoder beyond its mined negatives) are the main chain's; the soft
    labels are this chain's own mined negatives scored by that teacher."""

    label = "no pre-training (ablation)"

    def __init__(self, main: Chain):
        super().__init__(main.folder, main.corpus, main.output / ABLATION, main.config, main.model, main.bf16,
                         lucene=main.lucene)
        self.main, self.index_root = main, main.index_root

    def baselines(self) -> None:
        """The main chain's (same corpus)."""

    def start(self) -> Path:
        return self.start_card("0-start", self.start_checkpoint())

    def bm25_negatives(self) -> Path:
        return self.main.output / "1-bm25-negatives.jsonl"

    def cross_encoder(self, negatives: Path) -> Path:
        return self.main.output / "4-cross-encoder"


def chain_corpus(folder: Path, output: Path, config: ChainConfig) -> Path:
    """The folder's corpus, or with ``corpus_docs`` its judged sub-corpus (written once under ``output``)."""
    corpus = folder / "corpus.jsonl"
    if not config.corpus_docs:
        return corpus
    from retromae_ir.data.subcorpus import SubCorpusSizeError, write_judged_subcorpus

    sub = output / f"corpus-{config.corpus_docs}.jsonl"
    qrels = [folder / "qrels" / "train.tsv", folder / "qrels" / "test.tsv"]
    source = {"corpus_sha256": file_digest(corpus), "qrels_sha256": [file_digest(path) for path in qrels]}
    recorded = sub.with_name(sub.name + ".source.json")
    if not (sub.is_file() and recorded.is_file() and json.loads(recorded.read_text()) == source):
        recorded.unlink(missing_ok=True)  # a sub-corpus of other data (a folder of the same name) is made again
        try:
            log.info("%s: %d documents", sub, write_judged_subcorpus(corpus, qrels, config.corpus_docs, sub))
        except SubCorpusSizeError as error:  # named as the chain's user sets it (other errors name their file)
            raise ValueError(f"corpus_docs={config.corpus_docs}: {error} (corpus_docs=0)") from None
        with atomic_write(recorded) as out:
            json.dump(source, out)
    return sub


def corpus_title(folder: Path, config: ChainConfig) -> str:
    """What the figures were searched over, for the plot's titles."""
    return folder.name + (f", {config.corpus_docs}-document judged sub-corpus" if config.corpus_docs else "")


CHAIN_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv")


def check_chain_inputs(folder: Path, config: ChainConfig, pretrained: Path | None = None,
                       model: str | None = None) -> None:
    """Refuse, before any output exists, a dataset folder that lacks a file the chain reads, a ``pretrained``
    folder that is no finished pre-training or that this chain would not start from, and a ``model`` that
    ``pretrained`` leaves unread (only the ablation and the chain's own teacher would start from it), which the
    stages' records would hold as if used."""
    missing = [name for name in CHAIN_FILES if not (Path(folder) / name).is_file()]
    if missing:
        raise ValueError(f"{folder}: not a BEIR-layout folder with a train split; missing {', '.join(missing)}")
    if pretrained is not None and not (pretrained / "config.json").is_file():
        raise ValueError(f"--pretrained {pretrained}: no config.json, not a finished pre-training output")
    if pretrained is not None and not config.pretrain:
        raise ValueError(f"--pretrained {pretrained}: this chain does not pre-train (pretrain: false), so it would "
                         "start from the model instead; add --set pretrain=true to start from the pre-training")
    model_read = config.ablation or (config.distill and not config.teacher)  # what starts from the model
    if pretrained is not None and model is not None and not model_read:
        raise ValueError(f"--model {model} is read by no stage with --pretrained: stage 1 starts from the "
                         "pre-training (the model starts only the ablation and the chain's own cross-encoder)")


def run_chain(folder: Path, output: Path, config: ChainConfig, model: str | None = None, bf16: bool = False,
              pretrained: Path | None = None, lucene: bool = True) -> list[Chain]:
    """Every stage of the chain (and its ablation, when configured) over ``folder``, results under ``output``."""
    check_chain_inputs(folder, config, pretrained, model)
    output.mkdir(parents=True, exist_ok=True)
    chains = [Chain(folder, chain_corpus(folder, output, config), output, config, model, bf16, pretrained, lucene)]
    if config.ablation and config.pretrain:
        chains.append(AblationChain(chains[0]))
    run_in_lockstep(chains)
    return chains
