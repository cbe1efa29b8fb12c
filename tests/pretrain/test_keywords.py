"""Corpus statistics (counts, file round trip, CLI) and keyword-weighted whole-word masking."""
from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from retromae_ir.pretrain import corpus_stats
from retromae_ir.pretrain.collate import TokenTables, pad_batch
from retromae_ir.pretrain.keywords import (CorpusStats, CorpusStatsError, KeywordMasker, KeywordWeighting,
                                           count_corpus, piece_table, word_strings)

TEXTS = ["Microstructural cats and dogs.", "The cats sleep and the dogs bark."]


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


def test_word_strings_join_wordpieces(tokenizer):
    table = piece_table(tokenizer)
    assert table[tokenizer.convert_tokens_to_ids("##ing")] == "ing" and table[101] == "[CLS]"
    pieces = ["[CLS]", "micro", "structural", "of", "[SEP]"]
    assert word_strings(pieces, [-1, 0, 0, 1, -1]) == ["microstructural", "of"]


def test_count_corpus_exact(tokenizer):
    stats = count_corpus(TEXTS, tokenizer, "minilm", batch_size=1)
    assert stats.num_docs == 2 and stats.num_words == 5 + 8
    assert stats.cf["microstructural"] == 1 and stats.df["microstructural"] == 1
    assert (stats.cf["the"], stats.df["the"]) == (2, 1)
    assert (stats.cf["cats"], stats.df["cats"]) == (2, 2)
    assert (stats.cf["."], stats.df["."]) == (2, 2)
    assert stats.vocab_size == len(tokenizer)


def test_stats_round_trip_and_cli(tmp_path, tokenizer, minilm_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "title": "", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    out = tmp_path / "stats.json"
    assert corpus_stats.main(["--corpus", str(corpus), "--model", str(minilm_path), "--output", str(out)]) == 0
    loaded = CorpusStats.load(out)
    expected = count_corpus(TEXTS, tokenizer, str(minilm_path))
    assert loaded == expected
    assert set(loaded.key) == {"digest", "version", "corpus_sha256", "tokenizer_sha256"}  # how pre-training finds it
    expected.key = loaded.key
    expected.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == out.read_text()


def test_bad_stats_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "stats.json"
    bad.write_text('{"words": {}}')
    with pytest.raises(CorpusStatsError, match="not a corpus statistics file"):
        CorpusStats.load(bad)
    with pytest.raises(CorpusStatsError, match="cannot read"):
        CorpusStats.load(tmp_path / "missing.json")
    bad.write_text('{"format": "retromae_ir.corpus_stats", "tokenizer": "t", "vocab_size": 5, "num_docs": 1, '
                   '"num_words": 1, "words": {"cell": [1]}}')
    with pytest.raises(CorpusStatsError, match="malformed"):
        CorpusStats.load(bad)


def test_tfidf_and_icf_weights():
    stats = CorpusStats("t", 10, num_docs=3, num_words=9, cf=Counter(the=6, cell=2), df=Counter(the=3, cell=1))
    icf = KeywordWeighting(stats, "icf").weights(["the", "cell", "novel"])
    assert icf == [1 / 6, 1 / 2, 1.0]
    tfidf = KeywordWeighting(stats, "tfidf").weights(["cell", "the", "cell"])
    # idf on each occurrence: "cell" (twice) weighs 2 x idf in all, as its TF-IDF weight says, not 2 x 2 x idf
    assert tfidf == pytest.approx([0.6931471805599453 + 1, 1.0, 0.6931471805599453 + 1])
    with pytest.raises(ValueError, match="keyword weighting"):
        KeywordWeighting(stats, "bm25")


RARE, COMMON = ["cat", "dog", "bird", "fish"], ["the", "and", "of", "in"]


def masked_counts(tokenizer, stats, rows=2000):
    """How often each word is masked over ``rows`` samples of one 8-word row at ratio 0.5."""
    words = [w for pair in zip(RARE, COMMON) for w in pair]
    ids = tokenizer.convert_tokens_to_ids(words)
    input_ids, _ = pad_batch([ids] * rows, tokenizer)
    masker = KeywordMasker(TokenTables(tokenizer), KeywordWeighting(stats, "icf"))
    selected = masker(input_ids, 0.5, torch.Generator().manual_seed(0))
    assert selected.sum(-1).eq(4).all()  # exactly 4 of the 8 single-token words, never [CLS]/[SEP]
    assert not selected[:, 0].any() and not selected[:, -1].any()
    return dict(zip(words, selected[:, 1:-1].sum(0).tolist()))


def expected_rare(rare: int, common: int, picks: int) -> float:
    """Expected rare words among ``picks`` successive draws without replacement, rare weight 4, common 1."""
    if picks == 0:
        return 0.0
    total = 4 * rare + common
    take_rare = 4 * rare / total * (1 + expected_rare(rare - 1, common, picks - 1)) if rare else 0.0
    return take_rare + (common / total * expected_rare(rare, common - 1, picks - 1) if common else 0.0)


def test_keyword_masking_prefers_rare_words(tokenizer):
    cf = Counter({**{w: 1 for w in RARE}, **{w: 4 for w in COMMON}})
    stats = CorpusStats("minilm", len(tokenizer), 100, 1000, cf)
    counts = masked_counts(tokenizer, stats)
    rare, common = sum(counts[w] for w in RARE), sum(counts[w] for w in COMMON)
    assert (rare, common) == (5860, 2140)  # seed 0
    assert abs(rare - 2000 * expected_rare(4, 4, 4)) < 100  # 5883.1 expected; the standard deviation is about 30


def test_equal_weights_are_uniform(tokenizer):
    stats = CorpusStats("minilm", len(tokenizer), 100, 1000, Counter({w: 3 for w in RARE + COMMON}))
    counts = masked_counts(tokenizer, stats)
    assert all(900 < c < 1100 for c in counts.values())  # each word about 2000 * 0.5


def test_stats_from_another_vocabulary_are_refused(tokenizer):
    with pytest.raises(CorpusStatsError, match="vocabulary"):
        KeywordMasker(TokenTables(tokenizer), KeywordWeighting(CorpusStats("other", 50000), "icf"))


def test_a_word_cut_at_the_segment_start_weighs_the_least(tokenizer):
    """A segment may start inside a word ("##ing"), a piece may follow an [UNK]: the statistics hold whole words
    only, so as an unseen word the fragment took the highest weight of its row and was masked first."""
    stats = CorpusStats("minilm", len(tokenizer), 100, 1000, Counter({"cat": 2, "the": 8}))
    masker = KeywordMasker(TokenTables(tokenizer), KeywordWeighting(stats, "icf"))
    rows = [["##ing", "the", "cat"], ["the", "cat", "##ing"], ["the", "[UNK]", "##ing", "cat"]]
    input_ids, _ = pad_batch([tokenizer.convert_tokens_to_ids(r) for r in rows], tokenizer)
    weights = masker.weights(input_ids, masker.tables.words(input_ids))
    assert weights[0, :3].tolist() == [1 / 8, 1 / 8, 1 / 2]  # was [1, 1/8, 1/2]
    assert weights[1, :2].tolist() == [1 / 8, 1.0]  # "cat ##ing" inside a row is the word "cating": unseen, 1
    assert weights[2, :3].tolist() == [1 / 8, 1 / 8, 1 / 2]  # [UNK] is no word; "##ing" after it is a fragment
