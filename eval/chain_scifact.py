"""The whole DupMAE chain on BEIR scifact, on a CPU: pre-training -> stage 1 -> mining -> stage 2 -> cross-encoder
-> soft labels -> distillation, each checkpoint encoded, searched (exact hybrid, Eq. 12) and evaluated on the
test split.

    .venv/bin/python eval/chain_scifact.py                      # quick configuration (CPU minutes)
    .venv/bin/python eval/chain_scifact.py --config full        # the full one
    .venv/bin/python eval/chain_scifact.py --folder DIR --model TINY_BERT --output OUT   # any BEIR-layout folder

Every stage runs the project's own command (``python -m retromae_ir.{pretrain,mine,finetune,rerank}``) in a
subprocess and is skipped when its output exists, so an interrupted chain continues where it stopped. Written
under OUTPUT: one directory per stage, ``results.json`` (nDCG@10, R@100 and wall seconds per stage),
``results.md`` (the table) and ``chain.png`` (the per-stage plot).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import subprocess
import sys
import time
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
REFERENCES = {"BM25 flat (Pyserini)": 0.6789, "all-MiniLM-L6-v2 off the shelf (mean, cosine)": 0.6451}


@dataclasses.dataclass(frozen=True)
class Config:
    pretrain_steps: int
    pretrain_batch: int
    pretrain_length: int
    query_length: int
    passage_length: int
    steps: int  # optimizer steps of each fine-tuning stage and of the cross-encoder
    batch: int
    group_stage1: int
    group: int
    negatives: int
    max_rank: int
    ce_length: int
    ce_batch: int
    k: int = 384
    query_k: int = 64


CONFIGS = {
    "quick": Config(pretrain_steps=40, pretrain_batch=8, pretrain_length=128, query_length=32, passage_length=128,
                    steps=50, batch=16, group_stage1=2, group=4, negatives=7, max_rank=100, ce_length=160,
                    ce_batch=8),
    "full": Config(pretrain_steps=1300, pretrain_batch=16, pretrain_length=256, query_length=64, passage_length=256,
                   steps=300, batch=32, group_stage1=2, group=8, negatives=15, max_rank=200, ce_length=256,
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
    def __init__(self, folder: Path, output: Path, config: Config, model: str | None, bf16: bool,
                 pretrained: Path | None = None):
        self.folder, self.output, self.config, self.model, self.bf16 = folder, output, config, model, bf16
        self.pretrained = pretrained
        self.corpus = folder / "corpus.jsonl"
        self.train = ["--queries", str(folder / "queries.jsonl"), "--qrels", str(folder / "qrels" / "train.tsv")]
        self.results_path = output / "results.json"
        self.results = json.loads(self.results_path.read_text()) if self.results_path.is_file() else {}
        self.log_file = output / "commands.log"

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

    def flags(self, stage_dir: Path, steps: int) -> list[str]:
        return ["--output", str(stage_dir), "--max-steps", str(steps), "--save-steps", "50", "--logging-steps", "5",
                "--resume", *(["--bf16"] if self.bf16 else [])]

    # ---- stages ------------------------------------------------------------------------------------------------
    def pretrain(self) -> Path:
        c, out = self.config, self.pretrained or self.output / "0-pretrain"
        model = ["--model", self.model] if self.model else []
        self.timed("0-pretrain", out / "config.json", lambda: command(
            "retromae_ir.pretrain", "--method", "dupmae", *model, "--corpus", str(self.corpus),
            "--max-length", str(c.pretrain_length), "--batch-size", str(c.pretrain_batch), "--lr", "1e-4",
            *self.flags(out, c.pretrain_steps), log_file=self.log_file))  # skipped for --pretrained
        card = self.output / "0-pretrain.yaml"
        card.write_text(yaml.safe_dump({"checkpoint": str(out.resolve()), "kind": "dupmae", "dims": self.hidden(out),
                                        "k": c.k, "query_k": c.query_k, "max_query_length": c.query_length,
                                        "max_passage_length": c.passage_length}))
        return card

    @staticmethod
    def hidden(checkpoint: Path) -> int:
        return json.loads((checkpoint / "config.json").read_text())["hidden_size"]

    def mine(self, name: str, retriever: str) -> Path:
        c, out = self.config, self.output / f"{name}.jsonl"
        return self.timed(name, out, lambda: command(
            "retromae_ir.mine", "--retriever", retriever, "--corpus", str(self.corpus), *self.train,
            "--output", str(out), "--min-rank", "3", "--max-rank", str(c.max_rank), "--negatives", str(c.negatives),
            "--index-root", str(self.output / "indexes"), log_file=self.log_file))

    def finetune(self, name: str, stage: str, card: Path, train: Path, group: int, extra=()) -> Path:
        out = self.output / name
        self.timed(name, out / "card.yaml", lambda: command(
            "retromae_ir.finetune", "--stage", stage, "--encoder", str(card), "--train", str(train),
            "--corpus", str(self.corpus), "--group-size", str(group), "--batch-size", str(self.config.batch),
            *extra, *self.flags(out, self.config.steps), log_file=self.log_file))
        return out / "card.yaml"

    def cross_encoder(self, negatives: Path) -> Path:
        c, out, scored = self.config, self.output / "4-cross-encoder", self.output / "5-soft-labels.jsonl"
        model = ["--model", self.model] if self.model else []
        self.timed("4-cross-encoder", out / "config.json", lambda: command(
            "retromae_ir.rerank", "train", *model, "--train", str(negatives), "--corpus", str(self.corpus),
            "--group-size", str(c.group), "--batch-size", str(c.ce_batch), "--max-length", str(c.ce_length),
            "--lr", "3e-5", *self.flags(out, c.steps), log_file=self.log_file))
        return self.timed("5-soft-labels", scored, lambda: command(
            "retromae_ir.rerank", "score", "--model", str(out), "--input", str(negatives), "--corpus", str(self.corpus),
            "--output", str(scored), "--max-length", str(c.ce_length), log_file=self.log_file))

    def evaluate(self, name: str, card: Path) -> None:
        """Encode the corpus with ``card``, search the test queries (exact hybrid), nDCG@10 and R@100."""
        if "ndcg@10" in self.results.get(name, {}):
            return
        from retromae_ir.data.readers import load_qrels, load_topics
        from retromae_ir.evaluate import evaluate_run
        from retromae_ir.search.retriever import EncoderRetriever

        qrels = load_qrels(self.folder / "qrels" / "test.tsv")
        topics = load_topics(self.folder / "queries.jsonl")
        start = time.time()
        retriever = EncoderRetriever(str(card), index_root=self.output / "indexes", hits=100,
                                     bf16=self.bf16)
        run = retriever.retrieve(self.corpus, f"{self.folder.name}-{name}", {q: topics[q] for q in qrels})
        metrics = evaluate_run(run, qrels, ("ndcg@10", "recall@100"))
        self.record(name, **metrics, eval_wall_s=round(time.time() - start, 1))
        log.info("%s: %s", name, metrics)

    def run(self) -> None:
        pretrained = self.pretrain()
        self.evaluate("0-pretrain", pretrained)
        bm25 = self.mine("1-bm25-negatives", "bm25")
        stage1 = self.finetune("1-stage1", "1", pretrained, bm25, self.config.group_stage1)
        self.evaluate("1-stage1", stage1)
        mined = self.mine("2-mined-negatives", str(stage1))
        stage2 = self.finetune("2-stage2", "2", stage1, mined, self.config.group)
        self.evaluate("2-stage2", stage2)
        soft = self.cross_encoder(mined)
        stage3 = self.finetune("3-distill", "distill", stage2, soft, self.config.group)
        self.evaluate("3-distill", stage3)
        self.report()

    # ---- report ------------------------------------------------------------------------------------------------
    def report(self) -> None:
        rows = ["| stage | nDCG@10 | R@100 | train wall s | eval wall s |", "| --- | --- | --- | --- | --- |"]
        for name, values in self.results.items():
            if "ndcg@10" in values:
                rows.append(f"| {name} | {values['ndcg@10']:.4f} | {values['recall@100']:.4f} | "
                            f"{values.get('wall_s', '')} | {values['eval_wall_s']} |")
            else:
                rows.append(f"| {name} | | | {values.get('wall_s', '')} | |")
        rows += [f"| {name} (reference) | {value:.4f} | | | |" for name, value in REFERENCES.items()]
        with atomic_write(self.output / "results.md") as handle:
            handle.write("\n".join(rows) + "\n")
        print("\n".join(rows))
        self.plot()

    def plot(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        stages = [name for name, values in self.results.items() if "ndcg@10" in values]
        fig, axis = plt.subplots(figsize=(6, 3.5))
        for metric in ("ndcg@10", "recall@100"):
            axis.plot(range(len(stages)), [self.results[s][metric] for s in stages], marker="o", label=metric)
        for (name, value), style in zip(REFERENCES.items(), (":", "--")):
            axis.axhline(value, color="grey", linestyle=style, lw=1, label=f"{name} nDCG@10")
        walls = [f"{self.results[s]['wall_s']:.0f} s train" if "wall_s" in self.results[s] else "reused"
                 for s in stages]
        axis.set_xticks(range(len(stages)), [f"{s}\n{wall}" for s, wall in zip(stages, walls)], fontsize=7)
        axis.set_ylabel("scifact test")
        axis.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(self.output / "chain.png", dpi=110)
        plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=INT",
                        help=f"override configuration fields ({', '.join(f.name for f in dataclasses.fields(Config))})")
    args = parser.parse_args(argv)
    config = dataclasses.replace(CONFIGS[args.config], **{k: int(v) for k, v in (s.split("=", 1) for s in args.set)})
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
    Chain(Path(args.folder), output, config, args.model, bf16, args.pretrained).run()


if __name__ == "__main__":
    main()
