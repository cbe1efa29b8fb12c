"""The arguments of the training loop both stages share (``retromae_ir.training.trainer``): the output, the run
length, optimisation, precision, checkpointing and resume. Each stage adds its own model and data arguments."""
from __future__ import annotations

from dataclasses import dataclass, field

from retromae_ir.cli import check_at_least_one


@dataclass
class TrainingArguments:
    output: str = field(metadata={"help": "output checkpoint directory"})
    epochs: float = field(default=1.0, metadata={"help": "passes over the training examples: the corpus's segments "
                                                              "(pre-training), the queries (fine-tuning, rerank "
                                                              "train); ignored when --max-steps > 0"})
    max_steps: int = field(default=-1, metadata={"help": "optimizer steps; > 0 overrides --epochs (-1: use --epochs)"})
    batch_size: int = field(default=16, metadata={"help": "segments per device per micro-batch"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimizer step (pre-training; "
                                                             "fine-tuning takes 1 only: --grad-cache-chunk)"})
    lr: float = field(default=1e-4, metadata={"help": "peak learning rate (AdamW, linear warm-up and decay)"})
    warmup_ratio: float = field(default=0.1, metadata={"help": "fraction of the steps over which the learning rate "
                                                               "rises linearly to --lr, in [0, 1)"})
    weight_decay: float = field(default=0.01)
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping; <= 0 disables"})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 autocast (CPU and GPU)"})
    save_steps: int = field(default=500, metadata={"help": "checkpoint every N optimizer steps; <= 0: only at the end"})
    logging_steps: int = field(default=10, metadata={"help": "log and write the loss CSV every N steps"})
    resume: bool = field(default=False, metadata={
        "help": "continue from OUTPUT's latest checkpoint (refused if its inputs or settings differ; --max-steps may "
                "change, the learning rate is then re-planned); with no checkpoint yet, start from step 0"})
    overwrite: bool = field(default=False, metadata={"help": "discard a non-empty OUTPUT and start afresh"})
    seed: int = field(default=42)
    nondeterministic: bool = field(default=False, metadata={
        "help": "allow PyTorch's nondeterministic kernels (by default training uses deterministic ones, so two runs "
                "of the same seed give the same weights)"})
    device: str | None = field(default=None, metadata={"help": "cpu / cuda (default: cuda when available)"})

    def __post_init__(self):
        check_at_least_one(self, "batch_size", "grad_accum", "logging_steps")
        if self.lr <= 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup_ratio < 1:  # at 1 the rate would rise to the last step and never decay
            raise ValueError(f"--warmup-ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(f"--max-steps must be > 0 (or -1: train for --epochs), got {self.max_steps}: "
                             "a run of no steps trains nothing")
        if self.max_steps == -1 and self.epochs <= 0:
            raise ValueError(f"--epochs must be > 0 when --max-steps is not given, got {self.epochs}")
