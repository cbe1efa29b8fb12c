"""Put a teacher's scores on the student's scale before distillation.

KL(teacher softmax || student softmax) over a group is zero only when the student's score *gaps* equal the
teacher's (divided by the teacher temperature). A bi-encoder's raw Eq. 12 scores and a cross-encoder's logits
live on unrelated scales: on the scifact chain the stage-2 student separated a positive from its mined
negative by a median of 62, its teacher by 2.2. At temperature 1 distillation must shrink the student's scores
28-fold, which it does fastest by shrinking its representations, and the dense side collapsed (nDCG@10 0.008;
calibrated, 0.392: docs/finetuning.md). The calibrated temperature asks for the teacher's *ranking* at the student's own scale.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch

from retromae_ir.finetune.data import TrainExample
from retromae_ir.finetune.losses import group_scores

logger = logging.getLogger(__name__)


def median_spread(scores: torch.Tensor) -> float:
    """Median over rows of (max - min): how far apart a group's scores are."""
    return (scores.max(dim=1).values - scores.min(dim=1).values).median().item()


@torch.no_grad()
def calibrated_teacher_temperature(model, examples: Sequence[TrainExample], groups: int = 256,
                                   batch_size: int = 16, seed: int = 0) -> float:
    """Teacher spread / student logit spread (median within-group max - min, the student's scores divided by its
    temperature) over the first ``groups`` examples'
    groups, scored by ``model`` (a distillation ``BiEncoder``) in eval mode with seeded group sampling, so the
    value is the same on every process and on resume."""
    collator, training = model.make_collator(), model.training
    model.eval()
    student, teacher = [], []
    for start in range(0, min(groups, len(examples)), batch_size):
        batch = collator(examples[start:start + batch_size], torch.Generator().manual_seed(seed + start))
        scores = model.scores(model(batch))
        student.append(group_scores(scores, scores.shape[1] // scores.shape[0]))
        teacher.append(batch["teacher"])
    model.train(training)
    student_spread, teacher_spread = median_spread(torch.cat(student)), median_spread(torch.cat(teacher))
    if student_spread <= 0:
        raise ValueError("cannot calibrate the teacher temperature: the student scores every group's passages alike")
    # the student's softmax sees scores / its own temperature: match the teacher's spread to that
    temperature = teacher_spread * model.loss_args.temperature / student_spread
    logger.info("teacher temperature calibrated to %.4g: median group spread teacher %.4g, student %.4g",
                temperature, teacher_spread, student_spread)
    return temperature
