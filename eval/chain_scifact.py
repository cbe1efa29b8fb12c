"""The whole DupMAE chain on BEIR scifact, on a CPU: pre-training -> stage 1 -> mining -> stage 2 -> cross-encoder
-> soft labels -> distillation; every fine-tuned checkpoint encoded once and searched dense-only, sparse-only and
hybrid (exact Eq. 12) on the test split; then the same chain without DupMAE pre-training (the ablation).

    .venv/bin/python eval/chain_scifact.py                      # quick: a 1000-document sub-corpus, no ablation
    .venv/bin/python eval/chain_scifact.py --set ablation=true  # ... and the chain without pre-training
    .venv/bin/python eval/chain_scifact.py --config short       # the whole corpus, short training (~1.5 h on 2 cores)
    .venv/bin/python eval/chain_scifact.py --config full        # the full one (a GPU job)
    .venv/bin/python eval/chain_scifact.py --folder DIR --model TINY_BERT --output OUT   # any BEIR-layout folder

Every stage runs the project's own command (``python -m retromae_ir.{pretrain,mine,finetune,rerank}``) in a
subprocess and is skipped when its output exists, so an interrupted chain continues where it stopped. BM25 and
the off-the-shelf MiniLM (mean pooling) are searched over the same corpus as the stages, so a sub-corpus run
compares like with like. Written under OUTPUT: one directory per stage, ``results.json`` (metrics per stage and
mode, wall seconds per stage), the ablation under ``OUTPUT/no-pretrain``, and ``results.md`` / ``chain.png``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import subprocess
import sys
import time
from functools import cached_property
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from retromae_ir.hardware import bf16_is_fast  # noqa: E402
from retromae_ir.io import atomic_write  # noqa: E402
from retromae_ir.logs import setup_logging  # noqa: E402

log = logging.getLogger("chain")
SHARED_BEIR = REPO.parent / "shared" / "data" / "beir"
MODES = ("dense", "sparse", "hybrid")
METRICS = ("ndcg@10", "recall@100")
# searched over the chain's own corpus (a sub-corpus changes every figure): stage name -> (label, its mode)
BASELINES = {"baseline-bm25": ("BM25 flat (Pyserini)", "sparse"),
             "baseline-minilm-mean": ("all-MiniLM-L6-v2 off the shelf (mean pooling)", "dense")}
ABLATION = "no-pretrain"


@dataclasses.dataclass(frozen=True)
class Config:
    pretrain_steps: int
    pretrain_batch: int
    pretrain_length: int
    query_length: int
    passage_length: int
    steps: int  # optimizer steps of each fine-tuning stage (when epochs is 0)
    batch: int
    group_stage1: int
    group: int
    negatives: int
    max_rank: int
    ce_length: int
    ce_batch: int
    lr: float = 2e-5  # fine-tuning stages 1 and 2
    distill_lr: float = 2e-5  # distillation starts from a tuned stage 2: at 1e-4 its dense side collapsed (quick)
    ce_steps: int = 300  # the cross-encoder (teacher): a new head on MiniLM needs more steps than the bi-encoder
    ce_lr: float = 3e-5
    calibrate_teacher: bool = True  # distillation at the student's score scale (retromae_ir/finetune/calibration.py)
    evaluate_pretrained: bool = True  # also encode and evaluate the pre-trained checkpoint before fine-tuning
    ablation: bool = True  # also run the chain from the starting model without DupMAE pre-training
    k: int = 384
    query_k: int = 64
    corpus_docs: int = 0  # 0: the whole corpus; N: every judged document plus a seeded sample, N in all
    epochs: float = 0.0  # > 0: each fine-tuning stage trains this many passes over its queries (overrides steps)
    warmup_ratio: float = 0.1
    dev_queries: int = 100  # training queries held out (seeded) to choose settings on; never the test split
    sparse_weight: float = 0.0  # Eq. 12's OT weight; 0: chosen on the dev split with the starting checkpoint
    pretrain: bool = True  # False: the chain starts from the model itself (and has no ablation)

    def replace(self, assignments: list[str]) -> "Config":
        """``FIELD=VALUE`` overrides, each converted to the field's type."""
        values = {}
        for assignment in assignments:
            key, _, value = assignment.partition("=")
            if key not in {f.name for f in dataclasses.fields(self)}:
                raise SystemExit(f"--set {assignment}: no configuration field {key!r}")
            kind = type(getattr(self, key))
            values[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
        return dataclasses.replace(self, **values)


CONFIGS = {
    # the README's main job: fine-tuning from MiniLM over a judged 1000-document sub-corpus, one epoch a stage
    "quick": Config(pretrain_steps=0, pretrain_batch=8, pretrain_length=128, query_length=64, passage_length=128,
                    steps=0, epochs=1.0, batch=32, group_stage1=1, group=2, negatives=3, max_rank=100, ce_length=128,
                    ce_batch=8, lr=2e-5, distill_lr=2e-5, ce_steps=100, ce_lr=1e-4, evaluate_pretrained=False,
                    pretrain=False, corpus_docs=1000),
    # the whole corpus on a CPU: one epoch a stage; with pre-training, one pass over the corpus first
    "short": Config(pretrain_steps=650, pretrain_batch=8, pretrain_length=128, query_length=64, passage_length=256,
                    steps=0, epochs=1.0, batch=32, group_stage1=1, group=2, negatives=3, max_rank=100, ce_length=256,
                    ce_batch=8, lr=2e-5, distill_lr=2e-5, ce_steps=200, ce_lr=1e-4, evaluate_pretrained=False),
    "full": Config(pretrain_steps=1300, pretrain_batch=16, pretrain_length=256, query_length=64, passage_length=256,
                   steps=0, epochs=4.0, batch=32, group_stage1=1, group=8, negatives=15, max_rank=200, ce_length=256,
                   ce_batch=16),
}


def command(*args: str, log_file: Path) -> None:
    """Run ``python -m ...``, output appended to ``log_file``; a failure stops the chain naming the log."""
    log.info("running: %s", " ".join(args))
    with open(log_file, "a") as handle:
        done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed (exit {done.returncode}); see {log_file}")


class Chain:
    """The chain (with DupMAE pre-training unless the configuration says not); results.json in ``output`` records
    metrics and wall time per stage."""

    @property
    def label(self) -> str:
        return "DupMAE pre-training" if self.config.pretrain else "no pre-training"

    def __init__(self, folder: Path, corpus: Path, output: Path, config: Config, model: str | None, bf16: bool,
                 pretrained: Path | None = None):
        self.folder, self.output, self.config, self.model, self.bf16 = folder, output, config, model, bf16
        self.corpus, self.pretrained = corpus, pretrained
        output.mkdir(parents=True, exist_ok=True)
        from retromae_ir.data.splits import carve_dev_split

        train_qrels, self.dev_qrels = carve_dev_split(folder / "qrels" / "train.tsv", config.dev_queries,
                                                      output / "splits")
        self.train = ["--queries", str(folder / "queries.jsonl"), "--qrels", str(train_qrels)]
        self.results_path = output / "results.json"
        self.results = json.loads(self.results_path.read_text()) if self.results_path.is_file() else {}
        self.log_file = output / "commands.log"
        self.index_root = output / "indexes"

    def timed(self, name: str, done: Path, run) -> Path:
        """Run a stage unless ``done`` exists; its wall time goes into results.json."""
        if not done.exists():
            start = time.time()
            run()
            self.record(name, wall_s=round(time.time() - start, 1))
        return done

    def record(self, name: str, **values) -> None:
        self.results.setdefault(name, {}).update(values)
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
        card.write_text(yaml.safe_dump({"checkpoint": str(checkpoint), "kind": "dupmae",
                                        "dims": self.hidden(checkpoint), "k": c.k, "query_k": c.query_k,
                                        "sparse_weight": sparse_weight, "max_query_length": c.query_length,
                                        "max_passage_length": c.passage_length}))
        return card

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
        c, out = self.config, self.pretrained or self.output / "0-pretrain"
        model = ["--model", self.model] if self.model else []
        self.timed("0-pretrain", out / "config.json", lambda: command(
            "retromae_ir.pretrain", "--method", "dupmae", *model, "--corpus", str(self.corpus),
            "--max-length", str(c.pretrain_length), "--batch-size", str(c.pretrain_batch), "--lr", "1e-4",
            *self.flags(out, c.pretrain_steps), log_file=self.log_file))
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
                self.evaluate(name, self.card_retrievers(card))
            return card
        if "sparse_weight" not in self.results.get(name, {}):
            self.choose_sparse_weight(name, self.write_card(f"{name}-unweighted", checkpoint))
        return self.write_card(name, checkpoint, self.results[name]["sparse_weight"])

    def choose_sparse_weight(self, name: str, card: Path) -> None:
        """Sweep the OT weight on the dev split over the starting checkpoint's index; record the sweep, the choice,
        and the starting checkpoint's test metrics (dense, sparse, and the hybrid at the chosen weight only)."""
        from retromae_ir.evaluate.sparse_weight import best_weight, sweep_sparse_weight

        start = time.time()
        retrievers = self.card_retrievers(card)
        for mode in ("dense", "sparse"):
            self.evaluate_mode(name, mode, retrievers[mode])
        retriever = retrievers["hybrid"]
        index = retriever.build_index(self.corpus, self.index_name(name))
        sweep = sweep_sparse_weight(index, retriever.model, *self.dev_queries)
        weight = best_weight(sweep)
        test = sweep_sparse_weight(index, retriever.model, *self.test_queries, weights=[weight])[weight]
        log.info("%s: OT weight %g chosen on the dev split (dev %s); test %s", name, weight, sweep[weight], test)
        self.record(name, sparse_weight=weight, sparse_weight_sweep={str(w): m for w, m in sweep.items()},
                    hybrid=test, eval_wall_s=round(time.time() - start, 1))

    def bm25_negatives(self) -> Path:
        return self.mine("1-bm25-negatives", "bm25")

    def stage1_data(self) -> list[str]:
        """Eq. 13 is in-batch negatives only (group 1: the training qrels); a larger group adds BM25 negatives."""
        if self.config.group_stage1 == 1:
            return self.train
        return ["--train", str(self.bm25_negatives())]

    def index_name(self, stage: str) -> str:
        return f"{self.folder.name}-{self.output.name}-{stage}"

    def mine(self, name: str, retriever: str, index_name: str | None = None) -> Path:
        """Negatives for the training queries; with a card, through the index its evaluation built."""
        c, out = self.config, self.output / f"{name}.jsonl"
        return self.timed(name, out, lambda: command(
            "retromae_ir.mine", "--retriever", retriever, "--corpus", str(self.corpus), *self.train,
            "--output", str(out), "--min-rank", "3", "--max-rank", str(c.max_rank), "--negatives", str(c.negatives),
            "--index-root", str(self.index_root), *(["--index-name", index_name] if index_name else []),
            log_file=self.log_file))

    def finetune(self, name: str, stage: str, card: Path, data: Path | list[str], group: int) -> Path:
        """A fine-tuning stage on ``data``: a training file (mined negatives, soft labels) or qrels flags."""
        out = self.output / name
        c, distill = self.config, stage == "distill"
        calibrate = ["--calibrate-teacher"] if distill and c.calibrate_teacher else []
        data = data if isinstance(data, list) else ["--train", str(data)]
        self.timed(name, out / "card.yaml", lambda: command(
            "retromae_ir.finetune", "--stage", stage, "--encoder", str(card), *data,
            "--corpus", str(self.corpus), "--group-size", str(group), "--batch-size", str(c.batch),
            "--lr", str(c.distill_lr if distill else c.lr), *calibrate, *self.flags(out, c.steps, c.epochs),
            log_file=self.log_file))
        return out / "card.yaml"

    def cross_encoder(self, negatives: Path) -> Path:
        """Train the teacher on the stage-2 negatives."""
        c, out = self.config, self.output / "4-cross-encoder"
        model = ["--model", self.model] if self.model else []
        self.timed("4-cross-encoder", out / "config.json", lambda: command(
            "retromae_ir.rerank", "train", *model, "--train", str(negatives), "--corpus", str(self.corpus),
            "--group-size", str(c.group), "--batch-size", str(c.ce_batch), "--max-length", str(c.ce_length),
            "--lr", str(c.ce_lr), *self.flags(out, c.ce_steps), log_file=self.log_file))
        return out

    def soft_labels(self, teacher: Path, negatives: Path) -> Path:
        scored = self.output / "5-soft-labels.jsonl"
        return self.timed("5-soft-labels", scored, lambda: command(
            "retromae_ir.rerank", "score", "--model", str(teacher), "--input", str(negatives),
            "--corpus", str(self.corpus), "--output", str(scored), "--max-length", str(self.config.ce_length),
            log_file=self.log_file))

    def card_retrievers(self, card: Path) -> dict:
        """One retriever per mode over the same index: the corpus is encoded once for all three."""
        from retromae_ir.search.retriever import EncoderRetriever

        return {mode: EncoderRetriever(str(card), mode=mode, index_root=self.index_root, hits=100, bf16=self.bf16)
                for mode in MODES}

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

    def evaluate(self, name: str, retrievers: dict) -> None:
        """Search the test and dev queries over the chain's corpus with each mode's retriever: nDCG@10, R@100
        (the test metrics under the mode's name, the dev metrics under ``dev``)."""
        start = time.time()
        for mode, retriever in retrievers.items():
            self.evaluate_mode(name, mode, retriever)
        if "eval_wall_s" not in self.results.get(name, {}):
            self.record(name, eval_wall_s=round(time.time() - start, 1))

    def evaluate_mode(self, name: str, mode: str, retriever) -> None:
        from retromae_ir.evaluate import evaluate_run

        done = self.results.get(name, {})
        if mode in done and mode in done.get("dev", {}):
            return
        metrics = {}
        for split, (queries, qrels) in (("test", self.test_queries), ("dev", self.dev_queries)):
            metrics[split] = evaluate_run(retriever.retrieve(self.corpus, self.index_name(name), queries), qrels,
                                          METRICS)
        self.record(name, **{mode: metrics["test"]}, dev={**done.get("dev", {}), mode: metrics["dev"]})
        log.info("%s %s: test %s, dev %s", name, mode, metrics["test"], metrics["dev"])

    def baselines(self) -> None:
        """BM25 and the off-the-shelf MiniLM over the same corpus as the stages."""
        from retromae_ir.bm25 import BM25Retriever
        from retromae_ir.search.retriever import EncoderRetriever

        self.evaluate("baseline-bm25", {"sparse": BM25Retriever(self.index_root / "bm25")})
        self.evaluate("baseline-minilm-mean", {"dense": EncoderRetriever(
            "minilm-mean", mode="dense", index_root=self.index_root, hits=100, bf16=self.bf16)})

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
        soft = self.soft_labels(self.cross_encoder(mined), mined)
        stage3 = self.finetune("3-distill", "distill", stage2, soft, self.config.group)
        self.evaluate("3-distill", self.card_retrievers(stage3))


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
        super().__init__(main.folder, main.corpus, main.output / ABLATION, main.config, main.model, main.bf16)
        self.main, self.index_root = main, main.index_root

    def baselines(self) -> None:
        """The main chain's (same corpus)."""

    def start(self) -> Path:
        return self.start_card("0-start", self.start_checkpoint())

    def bm25_negatives(self) -> Path:
        return self.main.output / "1-bm25-negatives.jsonl"

    def cross_encoder(self, negatives: Path) -> Path:
        return self.main.output / "4-cross-encoder"


# ---- report ----------------------------------------------------------------------------------------------------
def baseline_rows(results: dict) -> list[dict]:
    """BM25 and the off-the-shelf MiniLM, as far as the main chain has evaluated them."""
    return [{"system": label, mode: results[stage][mode]} for stage, (label, mode) in BASELINES.items()
            if mode in results.get(stage, {})]


def evaluated_stages(results: dict) -> dict:
    """The chain's own evaluated stages (not the baselines, not the stages without an evaluation)."""
    return {stage: values for stage, values in results.items()
            if "eval_wall_s" in values and stage not in BASELINES}


def stage_rows(chains: list[tuple[str, dict]]) -> list[dict]:
    """One row per evaluated stage of each chain."""
    return [{"system": f"{label}: {stage}", **values} for label, results in chains
            for stage, values in evaluated_stages(results).items()]


def results_table(rows: list[dict]) -> str:
    """Markdown: nDCG@10 and R@100 in each mode (blank where a system has no such mode)."""
    header = ["system"] + [f"{metric} {mode}" for metric in METRICS for mode in MODES]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        cells = [f"{row[mode][metric]:.4f}" if mode in row else "" for metric in METRICS for mode in MODES]
        lines.append(f"| {row['system']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def wall_table(chains: list[tuple[str, dict]]) -> str:
    """Markdown: wall seconds per stage (training or mining, then evaluation) for each chain; - where a chain did
    not run the stage (the ablation reuses the BM25 negatives and the cross-encoder)."""
    stages = list(dict.fromkeys(stage for _, results in chains for stage in results))
    lines = ["| stage | " + " | ".join(label for label, _ in chains) + " |", "|" + " --- |" * (len(chains) + 1)]
    for stage in stages:
        cells = []
        for _, results in chains:
            values = results.get(stage, {})
            parts = [f"{values['wall_s']:.0f}" if "wall_s" in values else "",
                     f"eval {values['eval_wall_s']:.0f}" if "eval_wall_s" in values else ""]
            cells.append(" + ".join(part for part in parts if part) or "-")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    total = [sum(v.get("wall_s", 0) + v.get("eval_wall_s", 0) for v in results.values()) for _, results in chains]
    lines.append("| total | " + " | ".join(f"{seconds / 60:.1f} min" for seconds in total) + " |")
    return "\n".join(lines)


def plot(chains: list[tuple[str, dict]], baselines: list[dict], path: Path, title: str) -> None:
    """nDCG@10 and R@100 per stage, one line per chain and mode, baselines as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = list(dict.fromkeys(stage.split("-", 1)[1] for _, results in chains
                                for stage in evaluated_stages(results)))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, metric in zip(axes, METRICS):
        for (label, results), style in zip(chains, ("-", "--")):
            for mode, color in zip(MODES, ("tab:blue", "tab:orange", "tab:green")):
                points = [(stages.index(s.split("-", 1)[1]), v[mode][metric])
                          for s, v in evaluated_stages(results).items() if mode in v]
                if points:
                    axis.plot(*zip(*points), style, color=color, marker="o", label=f"{label}, {mode}")
        for row, style in zip(baselines, (":", "-.")):
            mode = next(m for m in MODES if m in row)
            axis.axhline(row[mode][metric], color="grey", linestyle=style, lw=1, label=row["system"])
        axis.set_xticks(range(len(stages)), stages)
        axis.set_title(f"{title}: test {metric}", fontsize=9)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    with atomic_write(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)


def report(chains: list[Chain], output: Path, title: str = "scifact") -> str:
    """results.md (both tables) and chain.png under ``output``; returns the markdown."""
    measured = [(chain.label, chain.results) for chain in chains]
    baselines = baseline_rows(chains[0].results)
    text = (results_table(baselines + stage_rows(measured)) + "\n\nWall seconds per stage:\n\n"
            + wall_table(measured) + "\n")
    with atomic_write(output / "results.md") as handle:
        handle.write(text)
    plot(measured, baselines, output / "chain.png", title)
    return text


def chain_corpus(folder: Path, output: Path, config: Config) -> Path:
    """The folder's corpus, or with ``corpus_docs`` its judged sub-corpus (written once under ``output``)."""
    corpus = folder / "corpus.jsonl"
    if not config.corpus_docs:
        return corpus
    from retromae_ir.data.subcorpus import write_judged_subcorpus

    sub = output / f"corpus-{config.corpus_docs}.jsonl"
    if not sub.is_file():
        qrels = [folder / "qrels" / "train.tsv", folder / "qrels" / "test.tsv"]
        log.info("%s: %d documents", sub, write_judged_subcorpus(corpus, qrels, config.corpus_docs, sub))
    return sub


def corpus_title(folder: Path, config: Config) -> str:
    """What the figures were searched over, for the plot's titles."""
    return folder.name + (f", {config.corpus_docs}-document judged sub-corpus" if config.corpus_docs else "")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="eval/chain_scifact.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="quick")
    parser.add_argument("--folder", type=Path, default=None,
                        help="BEIR-layout folder with corpus.jsonl, queries.jsonl, qrels/train.tsv and qrels/test.tsv "
                             "(default: scifact through retromae_ir.data.beir, looking in ../shared/data/beir first)")
    parser.add_argument("--model", default=None, help="starting encoder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--output", type=Path, default=None,
                        help="default: outputs/chain-scifact-<config> (git-ignored: checkpoints and indexes are large)")
    parser.add_argument("--pretrained", type=Path, default=None,
                        help="an existing DupMAE pre-training output to start from (skips the pre-training stage)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast for training and encoding (default: where the hardware runs it natively, "
                             "see retromae_ir/hardware.py; AVX2-only CPUs emulate bf16 and run it several times slower)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help=f"override configuration fields ({', '.join(f.name for f in dataclasses.fields(Config))})")
    args = parser.parse_args(argv)
    config = CONFIGS[args.config].replace(args.set)
    if args.pretrained is not None and not (args.pretrained / "config.json").is_file():
        raise SystemExit(f"--pretrained {args.pretrained}: no config.json, not a finished pre-training output")
    if args.folder is None:
        from retromae_ir.data.beir import resolve_beir

        args.folder = resolve_beir("scifact", SHARED_BEIR if SHARED_BEIR.is_dir() else None)
    output = args.output or REPO / "outputs" / f"chain-scifact-{args.config}"
    output.mkdir(parents=True, exist_ok=True)
    setup_logging(output / "chain.log")
    bf16 = args.bf16 if args.bf16 is not None else bf16_is_fast("cuda" if torch.cuda.is_available() else "cpu")
    log.info("configuration %s: %s; bf16 %s", args.config, config, bf16)
    folder = Path(args.folder)
    chains = [Chain(folder, chain_corpus(folder, output, config), output, config, args.model, bf16, args.pretrained)]
    if config.ablation and config.pretrain:
        chains.append(AblationChain(chains[0]))
    run_in_lockstep(chains)
    print(report(chains, output, corpus_title(folder, config)))


if __name__ == "__main__":
    main()
