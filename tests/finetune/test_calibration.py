"""The calibrated teacher temperature: the ratio of group spreads (the student's divided by its own temperature,
as its softmax sees them), invariant to the teacher's scale."""
from __future__ import annotations

import dataclasses

import pytest

from retromae_ir.finetune.calibration import calibrated_teacher_temperature, median_spread
from retromae_ir.finetune.losses import group_scores

from tiny import EXAMPLES, full_batch, tiny_bi_encoder


@pytest.fixture(scope="module")
def student(tiny_bert_dir):
    return tiny_bi_encoder(tiny_bert_dir, stage="distill")


def test_temperature_is_the_teacher_spread_over_the_student_logit_spread(student):
    batch = full_batch(student)  # the same seeded groups as one calibration batch of all four examples
    scores = group_scores(student.scores(student(batch)), 3)
    assert student.loss_args.temperature == 0.5
    expected = median_spread(batch["teacher"]) / median_spread(scores.detach() / 0.5)
    assert calibrated_teacher_temperature(student, EXAMPLES, batch_size=4) == pytest.approx(expected, rel=1e-5)
    assert not student.training  # left in the mode it was in


def test_soft_labels_do_not_depend_on_the_teacher_scale(student):
    scaled = [dataclasses.replace(e, positive_scores=[10 * s for s in e.positive_scores],
                                  negative_scores=[10 * s for s in e.negative_scores]) for e in EXAMPLES]
    base = calibrated_teacher_temperature(student, EXAMPLES, batch_size=4)
    assert calibrated_teacher_temperature(student, scaled, batch_size=4) == pytest.approx(10 * base, rel=1e-5)


def test_median_spread():
    import torch

    assert median_spread(torch.tensor([[1.0, 4.0, 2.0], [0.0, 0.5, 0.0], [3.0, 3.0, 9.0]])) == 3.0
