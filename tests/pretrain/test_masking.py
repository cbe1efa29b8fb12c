"""Whole-word masking and RetroMAE's position-specific decoder mask: exact values and mask properties."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from retromae_ir.pretrain.collate import TokenTables
from retromae_ir.pretrain.masking import IGNORE_INDEX, mlm_corrupt, sample_whole_words, word_ids
from retromae_ir.pretrain.retromae import position_specific_mask

TEXTS = ["the unbelievably long tokenization of photosynthesis", "retrieval oriented pre training",
         "masked auto encoders reconstruct sentences from their embeddings and contexts"] * 4


@pytest.fixture(scope="module")
def tables(minilm_path):
    return TokenTables(AutoTokenizer.from_pretrained(minilm_path))


@pytest.fixture(scope="module")
def batch(tables):
    encoded = tables.tokenizer(TEXTS, padding=True, return_tensors="pt")
    return encoded["input_ids"]


def test_word_ids_group_wordpieces(tables):
    ids = tables.tokenizer(["the unbelievably long tokenization"], return_tensors="pt")["input_ids"]
    # [CLS] the un ##bel ##ie ##va ##bly long token ##ization [SEP]
    assert word_ids(ids, tables.ordinary(ids), tables.continuation).tolist() == [[-1, 0, 1, 1, 1, 1, 1, 2, 3, 3, -1]]


def test_sampled_words_are_whole_and_near_ratio(tables, batch):
    words = tables.words(batch)
    selected = sample_whole_words(words, 0.3, torch.Generator().manual_seed(0))
    assert not selected[~tables.ordinary(batch)].any()  # special tokens and padding never masked
    for row in range(len(batch)):
        for word in words[row].unique().tolist():
            if word >= 0:  # a word is taken entirely or not at all
                assert selected[row][words[row] == word].unique().numel() == 1
        n = int((words[row] >= 0).sum())
        longest_word = int(torch.bincount(words[row][words[row] >= 0]).max())
        assert abs(int(selected[row].sum()) - 0.3 * n) <= longest_word / 2 + 0.5


def test_sampling_is_a_function_of_the_generator(tables, batch):
    words = tables.words(batch)
    first = sample_whole_words(words, 0.3, torch.Generator().manual_seed(7))
    assert torch.equal(first, sample_whole_words(words, 0.3, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, sample_whole_words(words, 0.3, torch.Generator().manual_seed(8)))


def test_bad_ratio_is_refused(tables, batch):
    with pytest.raises(ValueError, match="mask ratio"):
        sample_whole_words(tables.words(batch), 1.5)


def test_mlm_corruption_80_10_10():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 2000, (200, 100), generator=generator)
    selected = torch.rand(ids.shape, generator=generator) < 0.5
    corrupted, labels = mlm_corrupt(ids, selected, mask_token_id=103, vocab_size=30522, generator=generator)
    assert torch.equal(labels[selected], ids[selected]) and (labels[~selected] == IGNORE_INDEX).all()
    assert torch.equal(corrupted[~selected], ids[~selected])
    n = int(selected.sum())
    masked = int((corrupted[selected] == 103).sum())
    kept = int((corrupted[selected] == ids[selected]).sum())
    assert abs(masked / n - 0.8) < 0.02 and abs(kept / n - 0.1) < 0.02


def test_position_specific_mask_properties(tables, batch):
    torch.manual_seed(0)
    words = tables.words(batch)
    visible = position_specific_mask(words, visible_ratio=0.5)
    length = batch.shape[1]
    ordinary = tables.ordinary(batch)
    assert visible.shape == (len(batch), length, length) and visible.dtype == torch.bool
    assert not visible.diagonal(dim1=1, dim2=2).any()  # a token never sees itself
    assert visible[:, 1:, 0].all()  # every row but the first sees h at position 0
    assert not visible[:, 0, 0].any()  # row 0 does not (its samples are non-empty here)
    assert not visible[:, :, 1:][~ordinary[:, 1:].unsqueeze(1).expand(-1, length, -1)].any()  # specials/padding
    ratios = []
    for row in range(len(batch)):
        n = int(ordinary[row].sum())
        for i in torch.nonzero(ordinary[row]).flatten().tolist():
            seen = int(visible[row, i, 1:].sum())
            ratios.append(seen / (n - 1))
            assert seen <= n - 1
    assert abs(sum(ratios) / len(ratios) - 0.5) < 0.05
    rows = visible[0, 1:, 1:]
    assert len({tuple(r.tolist()) for r in rows}) > 1  # contexts differ from row to row


def test_the_decoder_sees_the_sep_from_every_other_row(tables, batch):
    """The authors' masks never cover [CLS] or [SEP], so every row but its own sees the [SEP] (its position tells
    the text's length); it was never visible here. Padding stays invisible."""
    sep = batch == tables.tokenizer.sep_token_id
    visible = position_specific_mask(tables.words(batch), 0.5, torch.Generator().manual_seed(0), always_visible=sep)
    rows, columns = torch.nonzero(sep, as_tuple=True)
    for row, column in zip(rows.tolist(), columns.tolist()):
        others = torch.arange(batch.shape[1]) != column
        assert visible[row, others, column].all() and not visible[row, column, column]
    assert not visible[(batch == tables.tokenizer.pad_token_id).unsqueeze(1).expand_as(visible)].any()
    without = position_specific_mask(tables.words(batch), 0.5, torch.Generator().manual_seed(0))
    assert not without[sep.unsqueeze(1).expand_as(without)].any()  # the sampling alone never picks it


def test_position_specific_mask_follows_the_ratio(tables, batch):
    torch.manual_seed(1)
    ordinary = tables.ordinary(batch)
    visible = position_specific_mask(tables.words(batch), visible_ratio=0.1)
    seen = visible[:, :, 1:].sum(-1)[ordinary].float() / ordinary.sum(-1, keepdim=True).expand_as(ordinary)[ordinary]
    assert abs(seen.mean() - 0.1) < 0.03  # a decoder that sees nothing (or a fifth) is not the ratio asked for
