"""Each fine-tuning loss on hand-made score matrices, against values worked out by hand."""
import math

import pytest
import torch

from retromae_ir.finetune.losses import (contrastive_loss, distillation_loss, group_columns, group_scores,
                                         listwise_loss)


def test_in_batch_loss_eq13():
    # G = 1: query i's positive is column i, the other queries' positives are its negatives
    scores = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    expected = (math.log(1 + math.exp(-2.0)) + math.log(2.0)) / 2
    assert contrastive_loss(scores, 1).item() == pytest.approx(expected, abs=1e-6)


def test_hard_negative_loss_eq14_counts_every_passage_of_the_batch():
    # G = 2: query 0 owns columns 0-1 (positive 0), query 1 owns columns 2-3 (positive 2)
    scores = torch.tensor([[3.0, 0.0, 1.0, 0.0],
                           [0.0, 0.0, 2.0, 1.0]])
    row0 = -3.0 + math.log(math.exp(3) + 1 + math.e + 1)
    row1 = -2.0 + math.log(1 + 1 + math.exp(2) + math.e)
    assert contrastive_loss(scores, 2).item() == pytest.approx((row0 + row1) / 2, abs=1e-6)


def test_temperature_divides_the_scores():
    scores = torch.tensor([[3.0, 0.0, 1.0, 0.0], [0.0, 0.0, 2.0, 1.0]])
    assert contrastive_loss(scores, 2, temperature=0.5).item() == pytest.approx(
        contrastive_loss(scores * 2, 2).item(), abs=1e-6)


def test_group_columns_and_scores():
    assert group_columns(2, 3).tolist() == [[0, 1, 2], [3, 4, 5]]
    scores = torch.arange(12.0).view(2, 6)
    assert group_scores(scores, 3).tolist() == [[0.0, 1.0, 2.0], [9.0, 10.0, 11.0]]


def test_distillation_is_kl_on_a_known_example():
    # each query's own group scores [0, ln 3] -> softmax [1/4, 3/4]; teacher equal scores -> [1/2, 1/2]
    # KL = 1/2 ln((1/2)/(1/4)) + 1/2 ln((1/2)/(3/4)) = 1/2 ln(4/3); the other query's columns play no part
    scores = torch.tensor([[0.0, math.log(3.0), 50.0, -50.0],
                           [-50.0, 50.0, 0.0, math.log(3.0)]])
    teacher = torch.tensor([[7.0, 7.0], [-1.0, -1.0]])
    assert distillation_loss(scores, teacher, 2).item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)


def test_distillation_equals_eq15_soft_cross_entropy_minus_teacher_entropy():
    torch.manual_seed(0)
    scores, teacher = torch.randn(3, 12), torch.randn(3, 4)
    sigma = teacher.softmax(1)
    student = scores.gather(1, group_columns(3, 4)).log_softmax(1)
    eq15 = -(sigma * student).sum(1).mean()
    entropy = -(sigma * sigma.log()).sum(1).mean()
    assert distillation_loss(scores, teacher, 4).item() == pytest.approx((eq15 - entropy).item(), abs=1e-5)


def test_distillation_is_zero_when_student_matches_teacher_and_uses_teacher_temperature():
    scores = torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, -1.0]])
    assert distillation_loss(scores, torch.tensor([[1.0, 2.0], [3.0, -1.0]]), 2).item() == pytest.approx(0, abs=1e-7)
    assert distillation_loss(scores, torch.tensor([[2.0, 4.0], [6.0, -2.0]]), 2,
                             teacher_temperature=2.0).item() == pytest.approx(0, abs=1e-7)


def test_listwise_loss_positive_in_column_zero():
    scores = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    expected = ((-1 + math.log(math.e + 2)) + math.log(3)) / 2
    assert listwise_loss(scores).item() == pytest.approx(expected, abs=1e-6)


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match=r"\[Q, Q\*G\]"):
        contrastive_loss(torch.zeros(2, 3), 2)
    with pytest.raises(ValueError, match="teacher scores"):
        distillation_loss(torch.zeros(2, 4), torch.zeros(2, 3), 2)


def test_false_negatives_mark_a_querys_own_positives_in_the_pool_but_not_its_target():
    from retromae_ir.finetune.losses import false_negatives

    keys = torch.tensor([10, 11, 12, 20, 21, 22])  # G = 3: query 0's group, then query 1's
    positives = torch.tensor([[10, 21], [20, 12]])
    assert false_negatives(keys, positives, 3).tolist() == [[False, False, False, False, True, False],
                                                            [False, False, True, False, False, False]]
    # this process's queries start at pool query 1 (torchrun): its target column is 3
    assert false_negatives(keys, positives[1:], 3, first_query=1).tolist() == [[False] * 2 + [True] + [False] * 3]


def test_masked_pool_leaves_out_exactly_the_passages_that_are_a_querys_positives(tiny_bert_dir):
    """--mask-false-negatives on a batch where query 3's negative is query 0's positive and query 1 shares query
    2's positive: the loss is Eq. 14 over the pool without those columns (found here by text), and differs from
    the unmasked one."""
    from tiny import SHARED, full_batch, tiny_bi_encoder

    from retromae_ir.finetune.data import sample_group

    masked, plain = tiny_bi_encoder(tiny_bert_dir, "2", mask=True), tiny_bi_encoder(tiny_bert_dir, "2")
    batch = full_batch(masked, SHARED)
    generator = torch.Generator().manual_seed(0)  # the collator's draws, again: the pool's texts in order
    texts = [p for e in SHARED for p in sample_group(e, 3, generator).passages]
    expected = torch.tensor([[texts[j] in e.positives and j != 3 * i for j in range(len(texts))]
                             for i, e in enumerate(SHARED)])
    assert expected.sum() >= 2  # query 0 (query 3's negative) and query 1 or 2 (the shared positive)
    with torch.no_grad():
        scores = masked.scores(masked(batch))
        loss = masked.loss(masked(batch), batch)["loss"]
        unmasked = plain.loss(plain(full_batch(plain, SHARED)), batch)["loss"]
    reference = contrastive_loss(scores.masked_fill(expected, float("-inf")), 3, 0.5)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    assert abs(loss.item() - unmasked.item()) > 1e-4
