"""Fine-tuning options as dataclasses (``transformers.HfArgumentParser`` turns the fields into flags).

The optimisation options extend pre-training's ``TrainingArguments`` (same trainer), with fine-tuning defaults
(the RetroMAE MS MARCO recipe: lr 2e-5; temperature 1 for a dot product, 0.05 for a cosine) and gradient caching in place of plain
accumulation, which would shrink the pool of in-batch negatives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from retromae_ir.cli import check_at_least_one
from retromae_ir.data.readers import check_min_relevance
from retromae_ir.training.arguments import TrainingArguments

STAGES = ("1", "2", "distill")


@dataclass
class ModelArguments:
    encoder: str = field(default="dupmae-minilm", metadata={
        "help": "encoder card (name in encoders/ or YAML path) giving the kind (dupmae: dense + sparse, else dense), "
                "pooling, k, activation and max lengths; a card written by a previous stage continues from it"})
    model: str | None = field(default=None, metadata={
        "help": "checkpoint to start from instead of the card's (e.g. a pre-training output directory)"})
    dims: int | None = field(default=None, metadata={
        "help": "dense dimension d'; a new W_cls (orthogonal init) is created when the checkpoint has none and "
                "d' differs from the hidden size. Default: the card's"})
    attention_dropout: float | None = field(default=None, metadata={
        "help": "dropout on the attention probabilities while training (default: the checkpoint's, 0.1 for BERT "
                "and MiniLM). 0 lets PyTorch's fused attention kernel run instead of materialising [B, heads, L, "
                "L] probabilities and their dropout mask: a DupMAE MiniLM step at 256 tokens took 2.0x less time "
                "on a 2-core CPU, a dense one 2.4x (docs/finetuning.md). Not saved into the checkpoint's config"})

    def __post_init__(self):
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            raise ValueError(f"--attention-dropout must be in [0, 1), got {self.attention_dropout}")


@dataclass
class DataArguments:
    train: str | None = field(default=None, metadata={
        "help": "training examples: JSONL {query, positives, negatives[, positive_scores, negative_scores]} "
                "(ids resolved in --corpus, or inline {title, text}) or MS MARCO text triples (.tsv)"})
    corpus: str | None = field(default=None, metadata={
        "help": "passages for document ids: BEIR corpus.jsonl or MS MARCO collection.tsv"})
    queries: str | None = field(default=None, metadata={
        "help": "with --qrels instead of --train: BEIR queries.jsonl or MS MARCO queries.train.tsv"})
    qrels: str | None = field(default=None, metadata={
        "help": "with --queries: BEIR qrels/train.tsv or MS MARCO qrels.train.tsv (positives only: in-batch "
                "negatives, use --group-size 1)"})
    min_relevance: int = field(default=1, metadata={"help": "qrels label counted as a positive"})
    group_size: int = field(default=8, metadata={
        "help": "passages per query: 1 positive + (G-1) negatives sampled from the example's negatives"})
    max_query_length: int | None = field(default=None, metadata={
        "help": "query truncation in training only (default: the card's); the output card keeps the card's length, "
                "which encoding uses"})
    max_passage_length: int | None = field(default=None, metadata={
        "help": "passage truncation in training only (default: the card's); the output card keeps the card's "
                "length, which encoding uses (train short, encode long; edit card.yaml to encode otherwise)"})

    def __post_init__(self):
        # a max length of 0 was read as unset: the card's length, silently
        check_at_least_one(self, "group_size", "max_query_length", "max_passage_length")
        if (self.train is None) == (self.qrels is None and self.queries is None):
            raise ValueError("give either --train FILE or --queries FILE --qrels FILE (with --corpus)")
        if self.train is None and not (self.queries and self.qrels and self.corpus):
            raise ValueError("--qrels training data needs --queries, --qrels and --corpus")
        check_min_relevance(self.min_relevance)
        if self.train is not None and self.min_relevance != 1:  # a --train file names its positives itself
            raise ValueError("--min-relevance goes with --queries/--qrels, not --train")
        if self.corpus is not None and self.train is not None and ".tsv" in Path(self.train).suffixes:
            # read and keyed in the run identity, never looked up: a resume without it was refused
            raise ValueError(f"--corpus looks up document ids, and --train {self.train} holds text triples (.tsv: "
                             "query, positive and negative texts): leave --corpus out")


@dataclass
class LossArguments:
    stage: str = field(default="1", metadata={
        "help": "1: in-batch (+ BM25) negatives, Eq. 13; 2: mined hard negatives, Eq. 14; distill: Eq. 15"})
    temperature: float | None = field(default=None, metadata={
        "help": "scores are divided by it. Default: 0.05 when the card's dense side is normalised (a cosine in "
                "[-1, 1], sentence-transformers' scale 20), 1 for raw dot products (the official RetroMAE recipe)"})
    teacher_temperature: float = field(default=1.0, metadata={"help": "distill: teacher softmax temperature"})
    hard_label_weight: float = field(default=0.0, metadata={
        "help": "distill: weight of an added Eq. 14 contrastive term on the hard labels (0: none; Eq. 15 alone "
                "only when --dense-loss-weight and --sparse-loss-weight are 0 too)"})
    sparse_loss_weight: float = field(default=0.0, metadata={
        "help": "DupMAE cards: weight of an added contrastive term on the OT side's own scores (raw OT dot, the "
                "card's sparse_weight taken out), so the sparse side trains even when Eq. 12 weights it lightly"})
    sparse_temperature: float = field(default=1.0, metadata={
        "help": "temperature of that term on the raw OT dot (1: SPLADE's raw-dot softmax)"})
    dense_loss_weight: float = field(default=0.0, metadata={
        "help": "DupMAE cards: weight of an added contrastive term on the dense side's own scores (at --temperature), "
                "so the dense side learns to rank on its own, as a dense retriever, and not only what the OT side "
                "leaves to it inside Eq. 12"})
    mask_false_negatives: bool = field(default=False, metadata={
        "help": "leave out of each query's pool the in-batch passages whose text is one of its own positives "
                "(another query's positive or mined negative): Eq. 13/14 would push the query away from them"})
    calibrate_teacher: bool = field(default=False, metadata={
        "help": "distill: set --teacher-temperature to the teacher's median group score spread over the start "
                "model's, so the soft labels ask for the teacher's ranking at the student's own score scale "
                "(retromae_ir/finetune/calibration.py)"})

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"--stage must be one of {STAGES}, got {self.stage!r}")
        if (self.temperature is not None and self.temperature <= 0) or self.teacher_temperature <= 0 \
                or self.hard_label_weight < 0 or self.sparse_temperature <= 0 or self.sparse_loss_weight < 0 \
                or self.dense_loss_weight < 0:
            raise ValueError("temperatures must be > 0; --hard-label-weight, --sparse-loss-weight and "
                             "--dense-loss-weight >= 0")
        # flags that only distillation reads: elsewhere they changed nothing but the run's identity
        given = [flag for flag, set_ in (("--teacher-temperature", self.teacher_temperature != 1.0),
                                         ("--hard-label-weight", self.hard_label_weight != 0.0),
                                         ("--calibrate-teacher", self.calibrate_teacher)) if set_]
        if given and not self.distill:
            raise ValueError(f"{', '.join(given)}: distillation only (--stage distill), not --stage {self.stage}")
        if self.calibrate_teacher and self.teacher_temperature != 1.0:  # the calibrated value replaced it
            raise ValueError("--teacher-temperature and --calibrate-teacher do not combine: calibration sets the "
                             "teacher temperature")
        if self.sparse_temperature != 1.0 and self.sparse_loss_weight == 0:
            raise ValueError("--sparse-temperature is the temperature of the --sparse-loss-weight term, which is 0")
        contrastive = self.hard_label_weight or self.dense_loss_weight or self.sparse_loss_weight
        if self.mask_false_negatives and self.distill and not contrastive:  # Eq. 15's KL term is not masked
            raise ValueError("--mask-false-negatives with --stage distill masks the contrastive terms only: give "
                             "--hard-label-weight, --dense-loss-weight or --sparse-loss-weight > 0, or leave it out")

    @property
    def distill(self) -> bool:
        return self.stage == "distill"


@dataclass
class FinetuneTrainingArguments(TrainingArguments):
    batch_size: int = field(default=16, metadata={"help": "queries per process per optimizer step (the pool)"})
    lr: float = field(default=2e-5, metadata={"help": "peak learning rate (AdamW, linear warm-up and decay)"})
    save_steps: int = field(default=200, metadata={"help": "checkpoint every N steps; <= 0: only at the end"})
    grad_cache_chunk: int = field(default=0, metadata={
        "help": "gradient caching: encode this many queries (and their groups) at a time; the loss still sees "
                "the whole batch, so memory drops without shrinking the negative pool. 0: no chunking"})

    def __post_init__(self):
        super().__post_init__()
        if self.grad_accum != 1:
            raise ValueError("--grad-accum would shrink the negative pool: use --grad-cache-chunk to fit a large "
                             "--batch-size in memory instead")
        if self.grad_cache_chunk < 0:
            raise ValueError(f"--grad-cache-chunk must be >= 0, got {self.grad_cache_chunk}")
