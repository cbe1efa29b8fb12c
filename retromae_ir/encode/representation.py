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

import functools
import warnings
from typing import Sequence

import torch

from retromae_ir.encode.fused_max_pool import fused_max_pool
from retromae_ir.encode.packed_linear import PackedLinear, output_slices

ENCODING_VERSION = 1
"""The version of the code that turns a checkpoint and a card into vectors (tokenising, joining title and text,
pooling, this module's representation, top-k, the impacts). Every cache of vectors records it (chunks, index
manifests, run keys, pre-encoded queries): an index or run of another version is encoded or searched again, never
reused, and an index of another version is refused at search, where queries would be encoded by other code than
its documents. Bump it in the commit that changes any card's vectors beyond rounding;
``tests/search/test_encoding_version.py`` pins the packaged MiniLM's vectors under it. Indexes written before it
was recorded (2026-11-25) read as version 0."""

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


def max_pool_logits_naive(lm_head, hidden: torch.Tensor, token_mask: torch.Tensor, chunk: int = 16) -> torch.Tensor:
    """The reference for :func:`max_pool_logits`: ``lm_head`` over every position of ``chunk`` texts at a time
    ([chunk, L, V] logits, padding and special tokens included), masked, max over positions. The reference of the
    tests and ``benchmarks/ot_maxpool.py``, and the route on a CUDA GPU at inference (:func:`padded_head_is_faster`)."""
    rows = []
    for start in range(0, hidden.shape[0], chunk):
        logits = lm_head(hidden[start:start + chunk])
        mask = token_mask[start:start + chunk].unsqueeze(-1)
        rows.append(logits.masked_fill(~mask, float("-inf")).amax(dim=1))
    return torch.cat(rows)


def split_lm_head(lm_head) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(transform, decoder) of BERT's MLM head (``BertOnlyMLMHead`` or its ``BertLMPredictionHead``), whose
    forward is ``decoder(transform(h))``; None for any other head, or when the decoder is neither a plain
    ``nn.Linear`` nor its :class:`PackedLinear` copy (int8 dynamic quantisation replaces it), which
    :func:`max_pool_logits` then runs whole on row tiles."""
    from transformers.models.bert.modeling_bert import BertLMPredictionHead

    head = getattr(lm_head, "predictions", lm_head)
    if isinstance(head, BertLMPredictionHead) and type(head.decoder) in (torch.nn.Linear, PackedLinear):
        return head.transform, head.decoder
    return None


def max_pool_logits(lm_head, hidden: torch.Tensor, token_mask: torch.Tensor, rows: int | None = None,
                    vocab_tile: int = 4096) -> torch.Tensor:
    """Eq. 6-7 before the activation: max over ordinary positions of ``lm_head(hidden)``, [B, V].

    The positions where ``token_mask`` is True are packed into one [N, H] matrix, so padding and special tokens
    cost nothing. BERT's head (:func:`split_lm_head`) runs its transform (dense, activation, LayerNorm) once on
    the packed rows, and its decoder (the tied word embeddings, plus bias) on tiles of at most ``rows`` packed
    rows (:data:`CPU_ROWS` on a CPU, :data:`ACCELERATOR_ROWS` elsewhere, when None) by ``vocab_tile`` vocabulary
    entries, so [rows, vocab_tile] is the largest logits tensor. On a CUDA GPU in inference mode (encoding) and
    with ``rows`` None, :func:`max_pool_logits_naive` runs instead (:func:`padded_head_is_faster`). Row tiles are
    ``rows`` consecutive packed rows whatever the documents (:func:`row_tiles`), so every product but the last has
    its full height; each document's part of a tile is reduced with ``amax`` into its row
    (``index_reduce_(..., "amax")`` over a tile of more than :data:`SEGMENT_LOOP` documents, or of more than one
    off the CPU). Another head, or an int8-quantised
    decoder, runs whole on tiles of ``rows * vocab_tile // V`` packed rows, reduced the same way. With ``rows``
    None, encoding's fp32 decoder (a :class:`PackedLinear`, or an ``nn.Linear`` in inference mode) on an AVX2 CPU
    runs untiled on the fused kernel of :mod:`retromae_ir.encode.fused_max_pool`, which writes no logits at all.

    Equal to :func:`max_pool_logits_naive` up to the matmuls' summation order (tests/encode/test_ot_maxpool.py
    checks values and gradients), except under int8: dynamic quantisation scales the activations per input tensor,
    and the packed rows (ordinary tokens only) are not the padded ones, so int8 logits move within int8's own
    noise. Fine-tuning calls the same code as encoding: with a graph, BERT's head goes through
    :class:`_TiledMaxPool`, whose backward touches only the entries that receive a gradient (ties share it, as
    ``amax``'s do); another head back-propagates through its tiles' running max (updated out of place).
    A text without ordinary tokens pools to -inf, which every activation maps to 0.
    """
    if rows is not None and rows < 1 or vocab_tile < 1:
        raise ValueError(f"rows and vocab_tile must be positive, got {rows} and {vocab_tile}")
    tiling_free = rows is None  # no tiling asked for: a route that does not tile may run
    if tiling_free and padded_head_is_faster(hidden):
        return max_pool_logits_naive(lm_head, hidden, token_mask)
    rows = rows or (CPU_ROWS if hidden.device.type == "cpu" else ACCELERATOR_ROWS)
    batch = hidden.shape[0]
    packed = hidden[token_mask.bool()]  # [N, H], documents in order
    counts = token_mask.sum(1)  # ordinary tokens a document
    owner = torch.repeat_interleave(torch.arange(batch, device=hidden.device), counts)  # row -> document
    with warnings.catch_warnings():  # index_reduce_ warns (once a process) that its API is in beta
        warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta")
        parts = split_lm_head(lm_head)
        if parts is None:
            decoder = getattr(getattr(lm_head, "predictions", lm_head), "decoder", None)
            vocab = getattr(decoder, "out_features", None)
            tile_rows = max(1, rows * vocab_tile // vocab) if vocab else rows
            return _running_max(lm_head, packed, row_tiles(counts.tolist(), tile_rows), owner, batch)
        transform, decoder = parts
        transformed = transform(packed)
        trainable = [transformed, decoder.weight] + ([] if decoder.bias is None else [decoder.bias])
        if torch.is_grad_enabled() and any(t.requires_grad for t in trainable):
            return _TiledMaxPool.apply(transformed, decoder.weight, decoder.bias, owner, counts, rows, vocab_tile)
        fused = fused_max_pool(transformed, decoder, owner, batch) if tiling_free else None
        if fused is not None:
            return fused
        return _tiled_max(transformed, _decoder_tiles(decoder, vocab_tile), owner, counts, rows)


def padded_head_is_faster(hidden: torch.Tensor) -> bool:
    """Whether the head over every position of 16 texts at a time beats the packed, tiled route: on a CUDA GPU
    without a graph. There the tiled route's many small products and ``index_reduce_``'s atomic maxima lose: on
    an H100 (2,000 scifact documents, batches of 64, runs/gpu-h100/encode-search-cuda-*.log) DupMAE encoded
    1,638-1,776 docs/s tiled against 2,418-2,583 naive in bf16 and 1,425-1,498 against 1,682-1,694 in fp32, in
    every round; with this route chosen, 2,430 against 1,602 in bf16 and within noise in fp32
    (runs/gpu-h100/route-after-change.log). Under a graph the naive route would keep [16, L, V] logits for the
    backward, so training keeps the tiled one, and so does training's graph-less pass (the gradient cache's first
    pass, calibration: ``no_grad``, not inference mode), whose vectors must be the ones the graph pass makes:
    rounding apart, top-k cuts them differently. Encoding runs in inference mode."""
    return hidden.device.type in PADDED_ROUTE_DEVICES and torch.is_inference_mode_enabled()


PADDED_ROUTE_DEVICES = ("cuda",)  # measured on CUDA only


# [256, 4096] fp32 logits (4 MiB) a tile. On AMD's AVX-512 EPYC, over two runs of the head alone on scifact's
# hidden states, 512 rows was the slowest tiling (419-465 GFLOP/s against 450-486 for 128, 256 and 384), pooled
# logits equal (runs/encode-head-rows/). With full-height tiles across document boundaries (docs/encoders.md "What
# the kernels allow"), 384 and 512 rows were no faster on an Intel Xeon VM (runs/head-full-tiles/rows.sh).
CPU_ROWS = 256
SEGMENT_LOOP = 8  # on a CPU, documents in a tile up to which each is reduced by its own amax, not index_reduce_
ACCELERATOR_ROWS = 1024  # fewer, larger launches


def _decoder_tiles(decoder, vocab_tile: int) -> list:
    """The decoder as callables over consecutive slices of ``vocab_tile`` vocabulary entries."""
    if isinstance(decoder, PackedLinear):
        return decoder.column_tiles(vocab_tile)
    return _linear_tiles(decoder.weight, decoder.bias, vocab_tile)


def _linear_tiles(weight, bias, vocab_tile: int) -> list:
    """``F.linear`` over consecutive slices of ``vocab_tile`` rows of ``weight`` (and ``bias``)."""
    return [functools.partial(torch.nn.functional.linear, weight=w, bias=b)
            for w, b in output_slices(weight, bias, vocab_tile)]


def row_tiles(counts: list[int], rows: int) -> list[tuple[int, int, tuple[tuple[int, int, int], ...]]]:
    """(begin, end, segments) of consecutive ranges of ``rows`` packed rows (the last may be shorter) covering
    every row, documents in order; ``segments``: (document, begin, end) of each document's rows in the range. No
    rows at all still give one (empty) range, which fixes the logits' width and dtype."""
    total = sum(counts)
    tiles = [(begin, min(begin + rows, total), []) for begin in range(0, total, rows)] or [(0, 0, [])]
    start = 0
    for document, count in enumerate(counts):
        for index in range(start // rows, (start + count - 1) // rows + 1 if count else 0):
            begin, end, segments = tiles[index]
            segments.append((document, max(start, begin), min(start + count, end)))
        start += count
    return [(begin, end, tuple(segments)) for begin, end, segments in tiles]


def _tiled_max(transformed, decoder_tiles, owner, counts, rows: int) -> torch.Tensor:
    """[batch, V]: each of ``decoder_tiles``' logits over the packed rows, max per document, one row tile
    (:func:`row_tiles`) at a time (no graph)."""
    tiles = row_tiles(counts.tolist(), rows)
    with torch.no_grad():  # the caller silences index_reduce_'s beta warning
        columns = [_running_max(logits_of, transformed, tiles, owner, counts.numel()) for logits_of in decoder_tiles]
    return torch.cat(columns, dim=1)


class _TiledMaxPool(torch.autograd.Function):
    """The decoder's max-pooled logits with a backward that never rebuilds [N, V].

    Forward is :func:`_tiled_max` and keeps only its inputs. The gradient of a max reaches one row per (document,
    vocabulary entry), and only where the upstream gradient is non-zero: after Eq. 11's top-k that is k entries
    of each document's V. Backward therefore recomputes the logits of just those entries (each document's rows
    times the decoder rows it needs, [docs, L, K]), takes their max again (``amax``: ties share the gradient, as
    the naive path's do) and back-propagates through that small graph, under the autocast state of the forward.
    Autograd through the tiled forward instead stored every [rows, vocab_tile] tile and ran two full [N, H] x
    [H, V] matmuls backward: most of the head's training time and memory (``benchmarks/ot_maxpool.py --backward``).
    """

    ELEMENTS = 1 << 24  # largest [docs, L, K] logits tensor a backward chunk builds

    @staticmethod
    def forward(ctx, transformed, weight, bias, owner, counts, rows, vocab_tile):
        device = transformed.device.type
        ctx.autocast = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        ctx.has_bias = bias is not None
        ctx.save_for_backward(transformed, weight, bias if bias is not None else weight.new_empty(0), owner, counts)
        return _tiled_max(transformed, _linear_tiles(weight, bias, vocab_tile), owner, counts, rows)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, upstream):
        transformed, weight, bias, owner, counts = ctx.saved_tensors
        device, autocast, dtype = ctx.autocast
        wanted = [*ctx.needs_input_grad[:2], ctx.needs_input_grad[2] and ctx.has_bias]
        grads = [torch.zeros_like(t) if want else None for t, want in zip((transformed, weight, bias), wanted)]
        needed = upstream != 0
        width = int(needed.sum(1).max()) if needed.numel() else 0
        if width == 0 or int(counts.max()) == 0:  # no gradient, or no document has a row to send one to
            return (*grads, None, None, None, None)
        # each document's needed vocabulary columns first (stable: ascending ids), padded to ``width``
        columns = needed.to(torch.int8).argsort(dim=1, descending=True, stable=True)[:, :width]
        upstream = torch.where(needed.gather(1, columns), upstream.gather(1, columns), 0)
        length, ends = int(counts.max()), counts.cumsum(0)
        step = max(1, _TiledMaxPool.ELEMENTS // max(1, length * width))
        for first in range(0, counts.numel(), step):
            docs = slice(first, min(first + step, counts.numel()))
            begin, end = int(ends[first] - counts[first]), int(ends[docs.stop - 1])
            with torch.enable_grad(), torch.autocast(device, dtype=dtype, enabled=autocast):
                leaves = [transformed[begin:end], weight, bias if ctx.has_bias else None]
                leaves = [leaf.detach().requires_grad_(want) if leaf is not None else None
                          for leaf, want in zip(leaves, wanted)]
                pooled = _pooled_columns(*leaves, owner[begin:end] - first, counts[docs], columns[docs], length)
                total = (torch.where(torch.isfinite(pooled), pooled, 0).float() * upstream[docs].float()).sum()
                partial = iter(torch.autograd.grad(total, [leaf for leaf, want in zip(leaves, wanted) if want]))
            for index, (want, target) in enumerate(zip(wanted, (slice(begin, end), slice(None), slice(None)))):
                if want:
                    grads[index][target] += next(partial)
        return (*grads, None, None, None, None)


def _pooled_columns(rows, weight, bias, owner, counts, columns, length: int) -> torch.Tensor:
    """[docs, K]: max over each document's rows of its logits at its ``columns`` [docs, K]; -inf for no rows."""
    docs = counts.numel()
    position = torch.arange(rows.shape[0], device=rows.device) - (counts.cumsum(0) - counts)[owner]
    padded = rows.new_zeros(docs, length, rows.shape[1]).index_put((owner, position), rows)
    if bias is None:
        logits = torch.bmm(padded, weight[columns].transpose(1, 2))  # [docs, L, K]
    else:  # one fused step, as the forward's linear: under autocast both round once, in the same dtype
        logits = torch.baddbmm(bias[columns].unsqueeze(1), padded, weight[columns].transpose(1, 2))
    present = torch.arange(length, device=rows.device) < counts.unsqueeze(1)
    return logits.masked_fill(~present.unsqueeze(-1), float("-inf")).amax(dim=1)


def _running_max(logits_of, rows, tiles, owner, batch: int) -> torch.Tensor:
    """[batch, V'] max per document of ``logits_of(rows[begin:end])`` over the (begin, end, segments) ``tiles``
    (:func:`row_tiles`); -inf where a document owns no row. There is always a tile, and the first fixes V' and
    the dtype (bf16 under autocast)."""
    out, loop = None, SEGMENT_LOOP if rows.device.type == "cpu" else 1  # on a GPU each amax is another launch
    for begin, end, segments in tiles:
        logits = logits_of(rows[begin:end])
        if out is None:
            out = logits.new_full((batch, logits.shape[1]), float("-inf"))
        if logits.requires_grad:  # backward needs each step's result: no in-place update then
            out = out.index_reduce(0, owner[begin:end], logits, "amax")
        elif len(segments) > loop:
            out.index_reduce_(0, owner[begin:end], logits, "amax")
        else:
            for document, first, last in segments:
                torch.maximum(out[document], logits[first - begin:last - begin].amax(0), out=out[document])
    return out


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
    """Integer impacts round(w * scale) (numpy or torch); |dequantized - w| <= 0.5 / scale, plus one rounding of
    the product in the weights' dtype (float32 rounds 0.015 * 100 to exactly 1.5, then half to even: 2)."""
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


def check_lucene_terms(vocab: list[str], source: str) -> list[str]:
    """``vocab`` (token strings by id, from ``source``), refused where the strings cannot be the sparse side's Lucene
    terms: an id without a string, two ids of one string (the impact dict kept one weight, the exact searcher's
    store both) or a string holding whitespace (Lucene's whitespace analyzer splits it in documents, a query sends
    it whole: it never matched). BERT's WordPiece vocabularies pass."""
    first: dict[str, int] = {}
    for index, token in enumerate(vocab):
        if not token or any(character.isspace() for character in token):
            raise ValueError(f"{source}: token {index} ({token!r}) cannot be a Lucene term of the sparse side (empty, "
                             "or holding whitespace)")
        if first.setdefault(token, index) != index:
            raise ValueError(f"{source}: tokens {first[token]} and {index} are both {token!r}: as Lucene terms of the "
                             "sparse side their weights would become one term's")
    return vocab


LUCENE_MAX_IMPACT = 2**31 - 1  # a term frequency is a Java int: Anserini dropped larger impacts, or wrapped them


def impact_dicts(matrix, vocab: list[str], scale: float, ids: Sequence[str] | None = None) -> list[dict[str, int]]:
    """Rows of a CSR matrix of OT weights -> ``{token: round(w * scale)}`` (Lucene impacts); zeros dropped. An
    impact beyond a Java int (a huge scale, or weights that are not finite) is refused: cast to int64 an infinite one
    became negative and was dropped as a zero, and Anserini wrapped or dropped the others, each with exit 0. ``ids``
    name the rows in that error."""
    out = []
    for row in range(matrix.shape[0]):
        start, end = matrix.indptr[row], matrix.indptr[row + 1]
        impacts = quantize(matrix.data[start:end], scale)
        largest = float(abs(impacts).max()) if impacts.size else 0.0
        if not largest <= LUCENE_MAX_IMPACT:
            where = f"id {ids[row]!r}" if ids is not None else f"row {row}"
            raise ValueError(f"{where}: an OT weight times the card's scale {scale} is {largest}, "
                             f"beyond a Lucene impact (at most {LUCENE_MAX_IMPACT}): lower the card's scale")
        impacts = impacts.astype("int64")
        out.append({vocab[i]: int(w) for i, w in zip(matrix.indices[start:end], impacts) if w > 0})
    return out
