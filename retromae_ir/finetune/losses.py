"""The fine-tuning objectives of DupMAE (paper Eq. 13-15) on a score matrix.

Every loss takes ``scores`` [Q, Q*G]: query i against all passages of the (gathered) batch, where passages
``i*G .. i*G+G-1`` are query i's group (its positive first, then its G-1 negatives). So
- Eq. 13 (in-batch negatives) is ``contrastive_loss`` with G = 1,
- Eq. 14 (plus hard negatives D-) is ``contrastive_loss`` with G > 1 (other queries' negatives count too),
- Eq. 15 (distillation) is ``distillation_loss``: the teacher's softmax over {d+, D-} of the query's own
  group as soft targets, so in-batch passages are not part of it.
Scores come from ``retromae_ir.encode.representation.score`` (Eq. 12), the function retrieval uses.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


COSINE_TEMPERATURE = 0.05  # sentence-transformers' MultipleNegativesRankingLoss scale 20


def default_temperature(card) -> float:
    """The softmax temperature that suits the card's score scale. A cosine lies in [-1, 1]: at temperature 1 the
    softmax over a batch is nearly uniform and the loss barely moves, so it is sharpened to 0.05. A raw dot product
    is left as it is (1), the official RetroMAE recipe. The OT side's weight (``sparse_weight``) is part of the
    representation, not of this temperature, so it stays the same in retrieval."""
    return COSINE_TEMPERATURE if card.normalize else 1.0


def group_columns(queries: int, group_size: int, device=None) -> torch.Tensor:
    """[Q, G] column indices of each query's own group in the [Q, Q*G] score matrix."""
    return (torch.arange(queries, device=device).unsqueeze(1) * group_size
            + torch.arange(group_size, device=device).unsqueeze(0))


def _check(scores: torch.Tensor, group_size: int) -> None:
    if scores.ndim != 2 or scores.shape[1] != scores.shape[0] * group_size:
        raise ValueError(f"scores must be [Q, Q*G] with G={group_size}, got {tuple(scores.shape)}")


def contrastive_loss(scores: torch.Tensor, group_size: int, temperature: float = 1.0) -> torch.Tensor:
    """Eq. 13/14: mean over queries of -log softmax(scores / tau)[own positive] over the whole pool."""
    _check(scores, group_size)
    targets = torch.arange(scores.shape[0], device=scores.device) * group_size
    return F.cross_entropy(scores.float() / temperature, targets)


def false_negatives(passage_keys: torch.Tensor, positive_keys: torch.Tensor, group_size: int,
                    first_query: int = 0) -> torch.Tensor:
    """[Q, N] True where pool passage j (``passage_keys`` [N], every process's) is one of query i's positives
    (``positive_keys`` [Q, P], -1 padded; queries ``first_query ..`` of the pool), except its target column."""
    same = (passage_keys[None, :, None] == positive_keys[:, None, :]).any(-1)
    targets = (torch.arange(positive_keys.shape[0], device=same.device) + first_query) * group_size
    same[torch.arange(same.shape[0], device=same.device), targets] = False
    return same


def group_scores(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """[Q, G]: each query's scores on its own group {d+, D-}."""
    _check(scores, group_size)
    return scores.gather(1, group_columns(scores.shape[0], group_size, scores.device))


def distillation_loss(scores: torch.Tensor, teacher: torch.Tensor, group_size: int, temperature: float = 1.0,
                      teacher_temperature: float = 1.0) -> torch.Tensor:
    """Eq. 15 as KL(sigma_teacher || softmax_student) over each query's group, averaged over queries.

    Eq. 15's soft-label cross-entropy differs from this KL only by the teacher's entropy, a constant, so both
    have the same gradient; KL is reported because it reaches 0 when the student matches the teacher.
    """
    student = F.log_softmax(group_scores(scores, group_size).float() / temperature, dim=1)
    if teacher.shape != student.shape:
        raise ValueError(f"teacher scores must be [Q, G] = {tuple(student.shape)}, got {tuple(teacher.shape)}")
    target = F.log_softmax(teacher.float() / teacher_temperature, dim=1)
    return F.kl_div(student, target, log_target=True, reduction="batchmean")


def listwise_loss(scores: torch.Tensor) -> torch.Tensor:
    """Group-wise contrastive loss of a cross-encoder: scores [Q, G], the positive in column 0."""
    return F.cross_entropy(scores.float(), torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device))
