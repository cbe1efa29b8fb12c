"""The DupMAE representation (paper Eq. 10-12), shared by fine-tuning, brute-force scoring and the indexes.

One function per step so training and inference cannot drift apart:
- ``dense_representation``: the [CLS] (or mean-pooled) hidden state times ``W_cls`` (Eq. 10);
- ``sparse_representation``: LM-head logits of the ordinary tokens, max-pooled over positions and passed
  through a non-negative activation (Eq. 6-7, with the activation the paper leaves unspecified), times
  sqrt(lambda), the card's ``sparse_weight``;
- ``top_k``: Eq. 11's sparsification; ``quantize`` the integer impacts Lucene stores;
- ``score``: Eq. 12, dense dot plus sparse dot.

The weight lambda of the OT side in Eq. 12 is folded into the vectors as sqrt(lambda) on each side, so
``q_dense . d_dense + q_ot . d_ot`` already *is* ``dense + lambda * sparse``: every consumer (training, brute force,
the exact hybrid searcher, the Lucene impacts) scores with the same weight without knowing it. It matters once the
dense side is a cosine (a normalised checkpoint such as all-MiniLM-L6-v2): raw OT dots of the identity head are
tens, a cosine at most 1, and an unweighted sum would be the sparse side alone.

The activations are monotone non-decreasing, so activating the max-pooled logits equals max-pooling the
activated logits; pooling first keeps memory at [B, V] instead of [B, L, V] after the head.
"""
from __future__ import annotations

import torch

ACTIVATIONS = {
    "relu": torch.relu,
    "log1p_relu": lambda x: torch.log1p(torch.relu(x)),
}


def activation(name: str):
    """The non-negative activation called ``name`` (``relu`` or ``log1p_relu``)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[B, L, d] -> [B, d]: the [CLS] vector, or the mean over the attended positions."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    raise ValueError(f"unknown pooling {pooling!r}; choose 'cls' or 'mean'")


def dense_representation(pooled: torch.Tensor, projection: torch.nn.Module | None = None,
                         normalize: bool = False) -> torch.Tensor:
    """Eq. 10: the pooled vector times W_cls (identity when ``projection`` is None), optionally L2-normalised."""
    out = pooled if projection is None else projection(pooled)
    return torch.nn.functional.normalize(out, dim=-1) if normalize else out


def ordinary_token_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        special_ids: torch.Tensor) -> torch.Tensor:
    """True at attended positions that are not special tokens ([CLS], [SEP], [PAD], ...)."""
    return attention_mask.bool() & ~torch.isin(input_ids, special_ids)


def max_pool_logits(lm_head, hidden: torch.Tensor, token_mask: torch.Tensor, chunk: int = 16) -> torch.Tensor:
    """Eq. 6-7 before the activation: max over ordinary positions of ``lm_head(hidden)``, [B, V].

    Rows are processed ``chunk`` at a time so the [chunk, L, V] logits are the only large tensor.
    A text without ordinary tokens pools to -inf, which every activation maps to 0.
    """
    rows = []
    for start in range(0, hidden.shape[0], chunk):
        logits = lm_head(hidden[start:start + chunk])
        mask = token_mask[start:start + chunk].unsqueeze(-1)
        rows.append(logits.masked_fill(~mask, float("-inf")).amax(dim=1))
    return torch.cat(rows)


def sparse_representation(pooled_logits: torch.Tensor, activation_name: str, weight: float = 1.0) -> torch.Tensor:
    """Non-negative OT vector [B, V] from max-pooled logits, scaled by sqrt(``weight``) (Eq. 12's lambda)."""
    out = activation(activation_name)(pooled_logits.float())
    return out if weight == 1.0 else out * weight ** 0.5


def top_k(weights: torch.Tensor, k: int | None) -> torch.Tensor:
    """Eq. 11: keep each row's ``k`` largest entries (all when ``k`` is None), zero the rest; zeros stay zero."""
    if k is None or k >= weights.shape[-1]:
        return weights
    if k <= 0:
        raise ValueError(f"top-k needs k >= 1, got {k}")
    values, indices = weights.topk(k, dim=-1)
    return torch.zeros_like(weights).scatter_(-1, indices, values)


def quantize(weights, scale: float):
    """Integer impacts round(w * scale) (numpy or torch); |dequantized - w| <= 0.5 / scale."""
    if scale <= 0:
        raise ValueError(f"quantisation scale must be positive, got {scale}")
    return (weights * scale).round()


def score(q_dense, d_dense, q_sparse, d_sparse):
    """Eq. 12 for every query-document pair: q_dense @ d_dense.T + q_sparse @ d_sparse.T (either part may be None)."""
    total = 0
    if q_dense is not None:
        total = total + q_dense @ d_dense.T
    if q_sparse is not None:
        total = total + q_sparse @ d_sparse.T
    return total


def impact_dicts(matrix, vocab: list[str], scale: float) -> list[dict[str, int]]:
    """Rows of a CSR matrix of OT weights -> ``{token: round(w * scale)}`` (Lucene impacts); zeros dropped."""
    out = []
    for row in range(matrix.shape[0]):
        start, end = matrix.indptr[row], matrix.indptr[row + 1]
        impacts = quantize(matrix.data[start:end], scale).astype("int64")
        out.append({vocab[i]: int(w) for i, w in zip(matrix.indices[start:end], impacts) if w > 0})
    return out
