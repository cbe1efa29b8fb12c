"""What each finished stage of a chain was made with, so a re-run never reuses a stage made with other settings.

A chain skips every stage whose output exists (an interrupted chain continues). Without a record, re-running into
the same output with ``--set epochs=2`` would report the old one-epoch rows as if they were the new ones. Each
stage's entry in results.json therefore carries ``settings``: the settings that shaped it and every stage before it
(the chain is a pipeline: stage 2 trains on negatives mined with stage 1, so stage 1's settings are stage 2's too).
A re-run whose settings differ for a finished stage stops before running anything and names the stage and fields.
So does one whose settings differ for a stage that was started and interrupted (``started.json``): a training
stage resumes from its checkpoints, and resuming with another length or learning rate would train under two
schedules while the results name one.
"""
from __future__ import annotations

import dataclasses

from retromae_ir.chain.config import ChainConfig

# the pipeline in order: stage -> the settings (ChainConfig fields, or the run's inputs: a local --model's or
# --pretrained's weight and tokenizer files by digest as well as by path, since a folder trained again in place keeps
# its path, and bf16, which the baselines are encoded under too) that shape it. Fields not
# listed choose which stages run (pretrain, distill, ablation, evaluate_pretrained) or how a step fits in memory
# (chunk_passages: gradient caching; the same loss and gradients without dropout, other draws of the same dropout
# masks with it), not what a finished stage computed. Stage 1 records
# the epochs and learning rate it ran with (``stage1_epochs``, ``stage1_lr``), so a stage-2 ``epochs`` or ``lr``
# reuses a finished stage 1
PIPELINE: list[tuple[str, tuple[str, ...]]] = [
    ("baseline", ("dataset", "data_sha256", "corpus_docs", "dev_queries", "bf16")),
    ("0-pretrain", ("model", "model_weights", "pretrained", "pretrained_weights", "pretrain_steps", "pretrain_batch",
                    "pretrain_length", "warmup_ratio")),  # pre-training's schedule warms up as stage 1's does
    ("0-start", ("model", "model_weights", "bf16", "query_length", "passage_length", "k", "query_k",
                 "sparse_weight")),
    ("1-bm25-negatives", ("negatives", "max_rank")),
    ("1-stage1", ("steps", "stage1_epochs", "stage1_lr", "batch", "group_stage1", "warmup_ratio",
                  "sparse_loss_weight", "sparse_temperature", "dense_loss_weight", "attention_dropout",
                  "mask_false_negatives")),
    ("2-mined-negatives", ("negatives", "max_rank")),
    ("2-stage2", ("group", "epochs", "lr")),
    ("4-cross-encoder", ("ce_length", "ce_batch", "ce_steps", "ce_lr")),
    ("5-soft-labels", ("teacher",)),
    ("3-distill", ("distill_lr", "calibrate_teacher")),
]
STAGES = [stage for stage, _ in PIPELINE]
PRETRAINING = ("pretrain_steps", "pretrain_batch", "pretrain_length")  # the chain's own pre-training's settings
# settings added to a stage's record after outputs were recorded without them: what a stage made before then was
# made with, unless a later stage of the same run recorded it (0-pretrain recorded no warm-up before 2026-11-25; the
# chain gives pre-training the warm-up 1-stage1 records)
SINCE_ADDED = {"mask_false_negatives": False, "warmup_ratio": 0.1}


class ChainSettingsError(ValueError):
    """A finished stage in the output was made with other settings than this run's."""


def pipeline_stage(name: str) -> str:
    """results.json's entry name -> its place in the pipeline (both baselines are one place)."""
    return "baseline" if name.startswith("baseline-") else name


def stage_settings(config: ChainConfig, name: str, inputs: dict, started: bool = False) -> dict:
    """The settings that shaped stage ``name``: its own and those of every stage before it. Stages a configuration
    skips (:func:`skipped_stages`) contribute nothing. ``started``:
    what its training resumes under (for 0-pretrain, the pre-training alone, not the start's evaluation)."""
    values = {**dataclasses.asdict(config), "stage1_epochs": config.stage_epochs("1"),
              "stage1_lr": config.stage_lr("1"), **inputs}
    skipped = skipped_stages(config)
    unread = set(PRETRAINING) if inputs.get("pretrained") else set()  # a given pre-training is not made here
    settings = {"pretrain": config.pretrain}
    # with pre-training, the 0-pretrain entry also holds the start's evaluation (its OT weight and metrics), which
    # the start's settings (lengths, k, bf16) shaped
    last = "0-start" if pipeline_stage(name) == "0-pretrain" and not started else pipeline_stage(name)
    for stage, fields in PIPELINE:
        if stage not in skipped:
            settings.update({field: values[field] for field in fields if field not in unread})
        if stage == last:
            return settings
    raise KeyError(f"{name}: not a stage of the chain ({', '.join(STAGES)})")


def since_added(results: dict, name: str, field: str):
    """What an older entry ``name`` without ``field`` was made with: the value the first later stage of ``results``
    recorded, else :data:`SINCE_ADDED`'s."""
    def place(entry: str) -> int:
        return STAGES.index(pipeline_stage(entry))

    for other in sorted((other for other in results if place(other) > place(name)), key=place):
        if field in (results[other].get("settings") or {}):
            return results[other]["settings"][field]
    return SINCE_ADDED[field]


def skipped_stages(config: ChainConfig) -> set[str]:
    """The pipeline's stages ``config`` does not run: pre-training without ``pretrain``, BM25 negatives with an
    in-batch stage 1, the teacher and distillation without ``distill``, the chain's own cross-encoder under a given
    ``teacher``. (``ChainConfig.check_read`` refuses the settings only these stages read.)"""
    skipped = {"0-pretrain"} if not config.pretrain else set()
    skipped |= {"1-bm25-negatives"} if config.group_stage1 == 1 else set()
    skipped |= set(DISTILLATION) if not config.distill else set()
    return skipped | ({"4-cross-encoder"} if config.teacher else set())


DISTILLATION = ("4-cross-encoder", "5-soft-labels", "3-distill")


def not_run(config: ChainConfig) -> set[str]:
    """The recorded stages ``config`` neither runs nor reports, which are not held to its settings until they run
    again: distillation's without ``distill``, the chain's own cross-encoder under a given ``teacher``."""
    return skipped_stages(config) & set(DISTILLATION)


def check_settings(results: dict, config: ChainConfig, inputs: dict, where: str, verb: str = "made") -> None:
    """Refuse to continue a chain whose finished stages were made with other settings (or recorded none); with
    ``verb`` "started", the same for stages begun (a training stage resumes from its checkpoints). The earliest
    such stage in the pipeline is named, whatever order the file lists them in (a stage made again is listed last)."""
    for name in results:
        if pipeline_stage(name) not in STAGES:
            raise ChainSettingsError(f"{where}: {name!r} is not a stage of the chain ({', '.join(STAGES)})")
    for name in sorted(results, key=lambda name: STAGES.index(pipeline_stage(name))):
        if pipeline_stage(name) in not_run(config):  # kept, not reported, checked again once the stage runs
            continue
        entry = results[name]
        expected = stage_settings(config, name, inputs, started=verb == "started")
        recorded = entry.get("settings")
        if recorded is None:
            raise ChainSettingsError(
                f"{where}: stage {name} has no recorded settings (made by an older retromae_ir), so it cannot be "
                f"reused safely; use a new --output")
        recorded = {**{field: since_added(results, name, field) for field in SINCE_ADDED if field in expected},
                    **recorded}
        changed = {field: (recorded.get(field), value) for field, value in expected.items()
                   if recorded.get(field) != value}
        if changed:
            fields = ", ".join(f"{field} {'not recorded (an older retromae_ir)' if field not in recorded else repr(old)}"
                               f" -> {new!r}" for field, (old, new) in changed.items())
            raise ChainSettingsError(
                f"{where}: stage {name} was {verb} with other settings ({fields}); this run would mix its results "
                f"with the new ones. Use a new --output, or remove that stage's folder and entry (and every later "
                f"stage's) to remake them")
