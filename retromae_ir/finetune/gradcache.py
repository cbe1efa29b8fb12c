"""Gradient caching: a large batch of contrastive pairs on little memory, with the full batch's gradient (without
dropout; with it, the masks are drawn chunk by chunk: other draws of the same distribution).

Accumulating micro-batches would give each one its own (smaller) pool of in-batch negatives. Instead
(Gao et al.'s gradient cache): (1) encode the batch chunk by chunk without a graph, (2) compute the loss on
the whole pool of representations and back-propagate it to them only, (3) re-encode each chunk with a graph
and back-propagate the cached representation gradients into the model. The RNG state of (1) is restored in
(3) so dropout draws the same masks; under DDP, gradients are synchronised only with the last chunk.

A batch is a dict with ``size`` (queries) and tensors whose rows are a whole number of rows per query
(queries: 1, passages / pairs: G, teacher: 1), so a chunk of queries selects the matching rows everywhere.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

Outputs = dict[str, torch.Tensor]


def split_batch(batch: dict, chunk: int) -> list[dict]:
    """Consecutive sub-batches of at most ``chunk`` queries (each tensor sliced at its rows per query)."""
    size = batch["size"]
    parts = []
    for start in range(0, size, chunk):
        end = min(start + chunk, size)
        part = {"size": end - start}
        for key, value in batch.items():
            if torch.is_tensor(value):
                rows = value.shape[0] // size
                part[key] = value[start * rows:end * rows]
            elif key != "size":
                part[key] = value
        parts.append(part)
    return parts


def _rng_state():
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)


def _set_rng_state(state) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def forward_backward(module: torch.nn.Module, batch: dict, loss_fn: Callable[[Outputs, dict], dict], chunk: int = 0,
                     loss_scale: float = 1.0, autocast=contextlib.nullcontext, no_sync=None) -> dict:
    """Run ``loss_fn(module(batch), batch)`` and back-propagate ``loss * loss_scale``; with ``chunk`` > 0, through
    the gradient cache. ``no_sync`` (DDP's) skips the gradient all-reduce for all but the last chunk.
    Returns the losses, detached."""
    if chunk <= 0 or chunk >= batch["size"]:
        with autocast():
            outputs = module(batch)
        losses = loss_fn(outputs, batch)
        (losses["loss"] * loss_scale).backward()
        return {name: value.detach() for name, value in losses.items()}
    parts = split_batch(batch, chunk)
    states, cached = [], []
    with torch.no_grad():
        for part in parts:
            states.append(_rng_state())
            with autocast():
                cached.append(module(part))
    outputs = {key: torch.cat([c[key] for c in cached]).detach().requires_grad_() for key in cached[0]}
    losses = loss_fn(outputs, batch)
    (losses["loss"] * loss_scale).backward()
    grads = split_batch({"size": batch["size"], **{key: value.grad if value.grad is not None
                                                   else torch.zeros_like(value) for key, value in outputs.items()}},
                        chunk)
    for index, (part, state, grad) in enumerate(zip(parts, states, grads)):
        _set_rng_state(state)
        sync = no_sync() if no_sync is not None and index < len(parts) - 1 else contextlib.nullcontext()
        with sync:
            with autocast():
                out = module(part)
            torch.autograd.backward([out[key] for key in out], [grad[key] for key in out])
    return {name: value.detach() for name, value in losses.items()}
