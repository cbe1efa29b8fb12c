"""Whole-word masking on token-id tensors.

Words are found from the ids alone (a WordPiece token starting with ``##`` continues the previous word),
so masking works the same on freshly tokenised text, on a cached tokenised file and on any device.
Every function takes an explicit ``torch.Generator`` so a batch's masks are a function of its seed.
"""
from __future__ import annotations

import torch

IGNORE_INDEX = -100


def continuation_table(tokenizer) -> torch.Tensor:
    """Bool [vocab]: True for WordPiece continuation pieces (``##...``), which belong to the previous word."""
    vocab = tokenizer.get_vocab()
    table = torch.zeros(max(len(tokenizer), max(vocab.values()) + 1), dtype=torch.bool)
    for token, index in vocab.items():
        if token.startswith("##"):
            table[index] = True
    return table


def special_table(tokenizer) -> torch.Tensor:
    """Bool [vocab]: True for the tokenizer's special tokens ([CLS], [SEP], [PAD], [MASK], [UNK]...)."""
    table = torch.zeros(len(continuation_table(tokenizer)), dtype=torch.bool)
    table[torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)] = True
    return table


def word_ids(input_ids: torch.Tensor, ordinary: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """Word index of every token ([..., L] long); -1 where ``ordinary`` is False (special tokens, padding).

    ``continuation`` is the bool lookup table from :func:`continuation_table`.
    """
    starts = ordinary & ~continuation.to(input_ids.device)[input_ids]
    # A continuation piece right after a special token (truncation artefact) starts its own word.
    previous_ordinary = torch.nn.functional.pad(ordinary[..., :-1], (1, 0), value=False)
    starts = starts | (ordinary & ~previous_ordinary)
    index = starts.long().cumsum(-1) - 1
    return torch.where(ordinary, index, torch.full_like(index, -1))


def sample_whole_words(words: torch.Tensor, ratio: float, generator: torch.Generator | None = None,
                       weights: torch.Tensor | None = None) -> torch.Tensor:
    """Select whole words at random until about ``ratio`` of the ordinary tokens are covered.

    ``words`` is [..., L] from :func:`word_ids`. Words are taken in a random order while the middle of each
    word's token span stays within ``ratio * n`` (so multi-piece words neither over- nor under-shoot on
    average); the first word is taken whenever ``ratio * n >= 0.5``. Returns a bool [..., L] mask, False on
    special tokens and padding.
    ``weights`` ([..., L], > 0, indexed like the word slots of ``words``) makes the order weighted sampling
    without replacement (Efraimidis-Spirakis keys); None keeps every word equally likely.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"mask ratio must be within [0, 1], got {ratio}")
    length = words.shape[-1]
    valid = words >= 0
    slot = words.clamp(min=0)
    sizes = torch.zeros(words.shape, dtype=torch.long, device=words.device).scatter_add_(-1, slot, valid.long())
    keys = torch.rand(words.shape, generator=generator, device=_gen_device(generator, words.device))
    keys = keys.to(words.device)
    if weights is not None:  # -log(1-u)/w: monotone in u, so equal weights give the unweighted order
        keys = -torch.log1p(-keys) / weights
    keys = keys.masked_fill(sizes == 0, float("inf"))  # empty word slots sort last
    order = keys.argsort(dim=-1)
    sorted_sizes = sizes.gather(-1, order)
    middle = sorted_sizes.cumsum(-1) - sorted_sizes / 2  # a word is taken if its middle falls within the target
    target = valid.sum(-1, keepdim=True) * ratio
    first = torch.arange(length, device=words.device) == 0
    taken_sorted = ((middle <= target) | (first & (target >= 0.5))) & (sorted_sizes > 0)
    taken = torch.zeros_like(taken_sorted).scatter_(-1, order, taken_sorted)
    return taken.gather(-1, slot) & valid


def mlm_corrupt(input_ids: torch.Tensor, selected: torch.Tensor, mask_token_id: int, vocab_size: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 corruption of the ``selected`` positions: [MASK], a random token, or unchanged.

    Returns (corrupted ids, labels) with labels = original id at selected positions, ``IGNORE_INDEX`` elsewhere.
    """
    device = input_ids.device
    draw = torch.rand(input_ids.shape, generator=generator, device=_gen_device(generator, device)).to(device)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator,
                               device=_gen_device(generator, device)).to(device)
    corrupted = torch.where(selected & (draw < 0.8), torch.full_like(input_ids, mask_token_id), input_ids)
    corrupted = torch.where(selected & (draw >= 0.8) & (draw < 0.9), random_ids, corrupted)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return corrupted, labels


def _gen_device(generator: torch.Generator | None, fallback: torch.device) -> torch.device:
    return fallback if generator is None else generator.device
