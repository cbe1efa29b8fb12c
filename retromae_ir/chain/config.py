"""A chain's settings (``ChainConfig``) and the named chains of ``retromae_ir/repro/chains.yaml``.

A chain is a dataset plus settings: a new one (another BEIR dataset, other lengths) is a YAML entry, not code.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import yaml

from retromae_ir import strict_yaml

CHAINS_FILE = Path(__file__).resolve().parents[1] / "repro" / "chains.yaml"


@dataclasses.dataclass(frozen=True)
class ChainConfig:
    """Every setting of a chain; the YAML entry overrides these defaults (the whole-corpus CPU chain)."""

    pretrain_steps: int = 650  # DupMAE pre-training steps (with ``pretrain``)
    pretrain_batch: int = 8
    pretrain_length: int = 128
    query_length: int = 64
    passage_length: int = 256
    steps: int = 0  # optimizer steps of each fine-tuning stage whose epochs (``stage_epochs``) are 0
    # > 0: each fine-tuning stage trains this many passes over its queries (overrides steps). 2 epochs, 8 passages
    # a group and 15 mined negatives from ranks 3-200: chosen on the dev split (docs/finetuning.md, GPU dev runs)
    epochs: float = 2.0
    # stage 1's own passes and learning rate (0: ``epochs`` / ``lr``). 1.5 epochs at 5e-5 with the dense-side term
    # and no attention dropout: chosen on the dev split among four stage-1 variants (docs/finetuning.md)
    epochs_stage1: float = 1.5
    batch: int = 32
    # passages a training step encodes at once; a larger batch x group goes through gradient caching (less memory;
    # the same gradients without dropout, other draws of the same dropout masks with it): 32 queries x 8 passages
    # at 256 tokens needed more than this CPU's 24 GB
    chunk_passages: int = 64
    group_stage1: int = 1  # 1: Eq. 13, in-batch negatives only; more adds BM25 negatives
    group: int = 8  # passages per query in stage 2, the cross-encoder and distillation (1 positive + negatives)
    negatives: int = 15  # mined per query (ranks 3 .. max_rank)
    max_rank: int = 200
    ce_length: int = 256
    ce_batch: int = 8
    # fine-tuning stage 2 (and stage 1 when lr_stage1 is 0): 5e-5 over 2e-5 on the dev split of the whole-corpus
    # chain (stage-2 dev hybrid 0.7688 -> 0.7840, docs/finetuning.md)
    lr: float = 5e-5
    lr_stage1: float = 5e-5
    distill_lr: float = 2e-5  # distillation starts from a tuned stage 2: at 1e-4 its dense side collapsed (quick)
    ce_steps: int = 200  # the cross-encoder (teacher): a new head on MiniLM needs more steps than the bi-encoder
    ce_lr: float = 1e-4
    teacher: str = ""  # a trained cross-encoder (directory or hub name) to distil from; "": the chain trains one
    # True: a cross-encoder teacher and distillation after stage 2. Off by default, on dev evidence: the teacher
    # the chain trains reranks the dev split below its own student (0.6888 vs 0.7512 nDCG@10), and distilling it
    # lowered the GPU chain's dev hybrid (0.7813 -> 0.7546); on the CPU it moved dev by +0.002 (docs/finetuning.md)
    distill: bool = False
    calibrate_teacher: bool = True  # distillation at the student's score scale (retromae_ir/finetune/calibration.py)
    evaluate_pretrained: bool = False  # also evaluate the starting checkpoint at a configured OT weight
    ablation: bool = False  # with ``pretrain``: also run the chain from the starting model without pre-training
    k: int = 384
    query_k: int = 64
    corpus_docs: int = 0  # 0: the whole corpus; N: every judged document plus a seeded sample, N in all
    warmup_ratio: float = 0.1
    dev_queries: int = 100  # training queries held out (seeded) to choose settings on; never the test split
    sparse_weight: float = 0.0  # Eq. 12's OT weight; 0: chosen on the dev split with the starting checkpoint
    # every fine-tuning stage adds a contrastive term on the raw OT dot at this weight and temperature (0: none);
    # chosen on the dev split of the whole-corpus chain (docs/finetuning.md: stage-2 dev hybrid 0.7452 -> 0.7512);
    # temperature 10 puts the raw OT dot's in-batch spread (~106) on the dense logits' scale (~12)
    sparse_loss_weight: float = 1.0
    sparse_temperature: float = 10.0
    # every fine-tuning stage adds a contrastive term on the dense side's own cosine at this weight (0: none), so
    # the dense side also ranks well alone (stage-1 dev dense 0.7106 -> 0.7174, hybrid 0.7421 -> 0.7577)
    dense_loss_weight: float = 1.0
    # dropout on the attention probabilities in fine-tuning; < 0: the checkpoint's (MiniLM: 0.1). 0 lets the
    # fused attention kernel run: 2.1x less time for stage 1 on this CPU, dev dense unchanged (0.7113 -> 0.7106)
    attention_dropout: float = 0.0
    # True: each query's own positives leave its in-batch pool (finetune --mask-false-negatives); off until measured
    # on the whole-corpus chain's dev split
    mask_false_negatives: bool = False
    pretrain: bool = False  # True: DupMAE pre-training on the corpus first

    def __post_init__(self):
        # refused here, before the baselines run, rather than when stage 1's command starts
        if not self.attention_dropout < 1 or self.dense_loss_weight < 0 or self.sparse_loss_weight < 0:
            raise ValueError(f"chain settings: attention_dropout must be < 1 (negative: the checkpoint's), "
                             f"dense_loss_weight and sparse_loss_weight >= 0; got {self.attention_dropout}, "
                             f"{self.dense_loss_weight}, {self.sparse_loss_weight}")
        if not 0 <= self.warmup_ratio < 1:  # the trainer refuses it too, but only once the baselines have run
            raise ValueError(f"chain settings: warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.ablation and not self.pretrain:  # the ablation is the chain without pre-training: nothing to ablate
            raise ValueError("chain settings: ablation needs pretrain: true")
        if self.teacher and not self.distill:
            raise ValueError(f"chain settings: teacher={self.teacher} needs distill: true (the teacher is only used "
                             "for distillation)")
        if self.distill and self.group < 2:  # the cross-encoder and distillation learn from a query's group only
            raise ValueError(f"chain settings: distill needs group >= 2 (a positive and mined negatives), got "
                             f"{self.group}")
        for name in ("sparse_weight", "epochs", "epochs_stage1", "lr_stage1", "steps"):  # a negative read as 0
            if getattr(self, name) < 0:
                raise ValueError(f"chain settings: {name} must be >= 0 (0: {FALLBACKS[name]}), got "
                                 f"{getattr(self, name)}")
        if min(self.stage_epochs("1"), self.epochs) == 0 and self.steps == 0:
            raise ValueError("chain settings: a fine-tuning stage with epochs 0 trains 'steps' steps, and steps is 0")

    def check_read(self, given, pretrained: bool = False) -> None:
        """Refuse a setting of ``given`` (the names a chain entry or ``--set`` sets) that no stage of this chain
        reads (``pretrained``: it starts from a given pre-training): it was accepted, ignored, and recorded in the
        stages' settings as if used. Settings the entry set and an override switched off stay allowed (``--set
        distill=false`` on a chain that sets ``ce_steps``)."""
        # the stage-bound rows follow chain.settings.skipped_stages (which imports this module)
        unread = {"steps": min(self.stage_epochs("1"), self.epochs) > 0,
                  "pretrain_steps pretrain_batch pretrain_length": not self.pretrain or pretrained,
                  "ce_steps ce_lr ce_batch ce_length": not self.distill or bool(self.teacher),
                  "distill_lr calibrate_teacher": not self.distill,
                  "sparse_temperature": self.sparse_loss_weight == 0}
        for names, is_unread in unread.items():
            named = [name for name in names.split() if name in given]
            if named and is_unread:
                why = "the chain starts from --pretrained" if pretrained and names.startswith("pretrain") \
                    else UNREAD_BECAUSE[names]
                raise ValueError(f"chain settings: {', '.join(named)} {'is' if len(named) == 1 else 'are'} read "
                                 f"by no stage of this chain: {why}")

    def stage_epochs(self, stage: str) -> float:
        """Passes over the training queries of fine-tuning ``stage`` ("1", "2", "distill"); 0: ``steps`` steps."""
        return self.epochs_stage1 if stage == "1" and self.epochs_stage1 > 0 else self.epochs

    def stage_lr(self, stage: str) -> float:
        """The peak learning rate of fine-tuning ``stage``."""
        if stage == "distill":
            return self.distill_lr
        return self.lr_stage1 if stage == "1" and self.lr_stage1 > 0 else self.lr

    def replace(self, assignments: list[str], pretrained: bool = False) -> "ChainConfig":
        """``FIELD=VALUE`` overrides (``--set``), each converted to the field's type; one that no stage of the
        result reads is refused (``check_read``)."""
        values = {}
        for assignment in assignments:
            key, _, value = assignment.partition("=")
            if key not in FIELDS:
                raise ValueError(f"--set {assignment}: no chain setting {key!r} (settings: {', '.join(FIELDS)})")
            try:
                values[key] = typed(key, value)
            except ValueError as error:
                raise ValueError(f"--set {assignment}: {error}") from None
        replaced = dataclasses.replace(self, **values)
        replaced.check_read(values, pretrained)
        return replaced


KINDS = {field.name: type(field.default) for field in dataclasses.fields(ChainConfig)}
FIELDS = list(KINDS)
FALLBACKS = {"sparse_weight": "chosen on the dev split", "epochs": "'steps' steps", "epochs_stage1": "epochs",
             "lr_stage1": "lr", "steps": "none; read where a stage's epochs are 0"}
UNREAD_BECAUSE = {
    "steps": "every fine-tuning stage trains for its epochs (set epochs=0, and epochs_stage1=0 for stage 1, to train "
             "a number of steps)",
    "pretrain_steps pretrain_batch pretrain_length": "the chain pre-trains only with pretrain: true",
    "ce_steps ce_lr ce_batch ce_length": "the chain trains its own cross-encoder teacher only with distill: true and "
                                         "no teacher given",
    "distill_lr calibrate_teacher": "the chain distils only with distill: true",
    "sparse_temperature": "it is the temperature of the sparse_loss_weight term, which is 0",
}
BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def typed(name: str, value):
    """Setting ``name``'s ``value`` (``--set``'s text, or what YAML read) as its field's type. A yes/no setting
    takes a YAML boolean or one of ``BOOLEANS``, anything else (``--set distill``, ``distill: maybe``) is an error,
    never False; a number takes a number or its text (YAML reads ``2e-5`` as text), finite; text takes text.
    (A YAML entry's quoted ``distill: "false"`` was the string, which counted as true: the stage ran.)"""
    kind = KINDS[name]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in BOOLEANS:
            return BOOLEANS[value.strip().lower()]
        raise ValueError(f"a yes/no setting takes one of {', '.join(BOOLEANS)}, got {value!r}")
    if kind is str:
        if value is None:  # YAML's empty value (``teacher:``): the default, none
            return ""
        if isinstance(value, str):
            return value
        raise ValueError(f"{name} takes text, got {value!r}")
    wanted = f"{name} takes {'a whole number' if kind is int else 'a number'}, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or kind is int and isinstance(value, float):
        raise ValueError(wanted)
    try:
        number = kind(value)
        finite = math.isfinite(number)
    except (ValueError, OverflowError):  # math.isfinite(10 ** 400) overflows
        raise ValueError(wanted) from None
    if not finite:
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


@dataclasses.dataclass(frozen=True)
class ChainSpec:
    """A named chain: the BEIR dataset it runs on, what it is for, and its settings."""

    name: str
    dataset: str
    description: str
    config: ChainConfig


def load_chains(path: str | Path = CHAINS_FILE) -> dict[str, ChainSpec]:
    """The chains of a YAML file (``chains: {name: {dataset, description, settings}}``); unknown keys are errors
    naming the file and the chain."""
    path = Path(path)
    try:
        document = strict_yaml.load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: cannot read the chains: {error}") from error
    entries = document.get("chains") if isinstance(document, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ValueError(f"{path}: no 'chains:' mapping")
    if set(document) != {"chains"}:  # a misplaced or misspelt section would be dropped unread
        raise ValueError(f"{path}: unknown top-level key(s) {', '.join(sorted(map(str, set(document) - {'chains'})))}"
                         " (the file holds one 'chains:' mapping)")
    return {name: _spec(path, name, entry) for name, entry in entries.items()}


def _spec(path: Path, name: str, entry) -> ChainSpec:
    if not isinstance(entry, dict) or "dataset" not in entry:
        raise ValueError(f"{path}: chain {name!r} needs a 'dataset'")
    unknown = set(entry) - {"dataset", "description", "settings"}
    settings = entry.get("settings") or {}
    unknown |= {f"settings.{key}" for key in set(settings) - set(FIELDS)}
    if unknown:
        raise ValueError(f"{path}: chain {name!r}: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        config = ChainConfig(**{key: typed(key, value) for key, value in settings.items()})
        config.check_read(settings)
    except ValueError as error:
        raise ValueError(f"{path}: chain {name!r}: {error}") from None
    return ChainSpec(name, entry["dataset"], entry.get("description", ""), config)
