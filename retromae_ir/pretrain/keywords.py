"""Keyword-weighted whole-word masking for MASTER's MKP and NPR decoders (MASTER section 4.2).

The paper masks words with a probability from TF-IDF weights, so rare words (keywords) are masked most;
the authors' code samples whole words with weight 1 / corpus frequency until the mask ratio is reached.
Both are offered (``icf``, the default, and ``tfidf``). The weights need corpus statistics, counted once per
corpus and tokenizer and saved as JSON (``corpus_stats.py``: pre-training counts them itself when they are
missing, ``python -m retromae_ir.pretrain.corpus_stats`` ahead of time), then reused by every pre-training run.

A word is what ``masking.word_ids`` groups (a WordPiece token and its ``##`` continuations); its string is
the pieces joined without ``##``, so the counts are the same words the collator masks.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import torch

from retromae_ir.io import atomic_write
from retromae_ir.pretrain.collate import TokenTables, pad_batch
from retromae_ir.pretrain.masking import sample_whole_words

STATS_FORMAT = "retromae_ir.corpus_stats"
WEIGHTINGS = ("icf", "tfidf")
# Bumped when the same statistics and seed select other keywords (a MASTER run's identity carries it, so a run is
# never resumed under another rule). 2: tf-idf weights each occurrence by idf (a word of tf occurrences is drawn
# with weight tf x idf, not tf^2 x idf), and a word fragment (a leading ## piece: cut from the segment before, or
# after an [UNK]) takes its row's lowest weight, not the highest (2026-11-27).
KEYWORD_MASKING_VERSION = 2


class CorpusStatsError(ValueError):
    """A statistics file that is missing, malformed or made with another vocabulary."""


def piece_table(tokenizer) -> list[str]:
    """Each vocabulary id's text without its ``##`` continuation marker (built once, indexed per token)."""
    vocab = tokenizer.get_vocab()
    table = [""] * (max(len(tokenizer), max(vocab.values()) + 1))
    for token, index in vocab.items():
        table[index] = token.removeprefix("##")
    return table


def word_strings(pieces: Sequence[str], words: Sequence[int]) -> list[str]:
    """The string of each word index (0..n-1) of one row, from its pieces and ``word_ids`` row (-1 = none)."""
    joined: list[list[str]] = []
    for piece, word in zip(pieces, words):
        if word < 0:
            continue
        if word == len(joined):
            joined.append([])
        joined[word].append(piece)
    return ["".join(p) for p in joined]


def batch_word_strings(input_ids: torch.Tensor, words: torch.Tensor, table: Sequence[str]) -> list[list[str]]:
    """:func:`word_strings` for every row of a [B, L] batch; ``table`` from :func:`piece_table`."""
    return [word_strings([table[i] for i in ids], row) for ids, row in zip(input_ids.tolist(), words.tolist())]


@dataclass
class CorpusStats:
    """Per-word corpus frequency (cf) and document frequency (df) of a corpus under one tokenizer."""

    tokenizer: str
    vocab_size: int
    num_docs: int = 0
    num_words: int = 0
    cf: Counter = field(default_factory=Counter)
    df: Counter = field(default_factory=Counter)
    # what the counts were made from (corpus_stats.StatsKey.stored()): how pre-training finds them again; not
    # part of equality (the same counts are equal whichever file they came from)
    key: dict | None = field(default=None, compare=False)

    def add_document(self, words: Sequence[str]) -> None:
        self.num_docs += 1
        self.num_words += len(words)
        self.cf.update(words)
        self.df.update(set(words))

    def save(self, path: str | Path) -> None:
        body = {"format": STATS_FORMAT, "version": 1, "tokenizer": self.tokenizer, "vocab_size": self.vocab_size,
                **({"key": self.key} if self.key is not None else {}),
                "num_docs": self.num_docs, "num_words": self.num_words,
                "words": {w: [c, self.df[w]] for w, c in self.cf.most_common()}}
        with atomic_write(path) as handle:
            json.dump(body, handle, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | Path) -> "CorpusStats":
        try:
            body = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CorpusStatsError(f"cannot read corpus statistics {path}: {error}") from error
        if not isinstance(body, dict) or body.get("format") != STATS_FORMAT:
            raise CorpusStatsError(f"{path} is not a corpus statistics file "
                                   "(python -m retromae_ir.pretrain.corpus_stats)")
        try:
            words = body["words"]
            key = body.get("key")
            return cls(str(body["tokenizer"]), int(body["vocab_size"]), int(body["num_docs"]), int(body["num_words"]),
                       Counter({w: int(c) for w, (c, _) in words.items()}),
                       Counter({w: int(d) for w, (_, d) in words.items()}), key if isinstance(key, dict) else None)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CorpusStatsError(f"{path}: malformed corpus statistics ({error!r})") from error


def count_corpus(texts: Iterable[str], tokenizer, name: str, batch_size: int = 256) -> CorpusStats:
    """Count every word of every text (untruncated), grouped into words exactly as the collators do."""
    tables = TokenTables(tokenizer)
    table = piece_table(tokenizer)
    stats = CorpusStats(name, tables.vocab_size)
    batch: list[str] = []

    def flush():
        ids = tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]
        input_ids, _ = pad_batch(ids, tokenizer)
        for row in batch_word_strings(input_ids, tables.words(input_ids), table):
            stats.add_document(row)
        batch.clear()

    for text in texts:
        batch.append(text)
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    return stats


class KeywordWeighting:
    """Masking weight of each word occurrence of a text: ``icf`` = 1 / cf (unseen words count as cf = 1), or
    ``tfidf`` = ln((1 + N) / (1 + df)) + 1 (smoothed idf, always > 0) on each occurrence, so a word's occurrences
    weigh tf x idf together: the TF-IDF weight of the word (each occurrence is a slot of the sampler)."""

    def __init__(self, stats: CorpusStats, scheme: str = "icf"):
        if scheme not in WEIGHTINGS:
            raise ValueError(f"keyword weighting must be one of {WEIGHTINGS}, got {scheme!r}")
        self.stats = stats
        self.scheme = scheme

    def weights(self, words: Sequence[str]) -> list[float]:
        if self.scheme == "icf":
            return [1.0 / max(self.stats.cf.get(w, 0), 1) for w in words]
        n = self.stats.num_docs
        return [math.log((1 + n) / (1 + self.stats.df.get(w, 0))) + 1.0 for w in words]


class KeywordMasker:
    """Selects whole words of a batch for masking, rare words first, until ``ratio`` of the tokens are chosen."""

    def __init__(self, tables: TokenTables, weighting: KeywordWeighting):
        if weighting.stats.vocab_size != tables.vocab_size:
            raise CorpusStatsError(f"corpus statistics were counted with a {weighting.stats.vocab_size}-token "
                                   f"vocabulary ({weighting.stats.tokenizer}); this tokenizer has {tables.vocab_size}")
        self.tables = tables
        self.weighting = weighting
        self.pieces = piece_table(tables.tokenizer)

    def __call__(self, input_ids: torch.Tensor, ratio: float, generator: torch.Generator | None = None) -> torch.Tensor:
        """Bool [B, L] selection (never special tokens or padding)."""
        words = self.tables.words(input_ids)
        return sample_whole_words(words, ratio, generator, weights=self.weights(input_ids, words).to(input_ids.device))

    def weights(self, input_ids: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        """Float64 [B, L]: the weight of word slot j of each row at [row, j] (1 past the row's words). A word that
        starts with a ``##`` piece (cut between two segments, or after an [UNK]) is a fragment the statistics never
        saw as a word: as an unseen word it would weigh the most, so it takes its row's lowest weight."""
        weights = torch.ones(input_ids.shape, dtype=torch.float64)
        previous = torch.nn.functional.pad(words[:, :-1], (1, 0), value=-1)
        fragment = (words >= 0) & (words != previous) & self.tables.continuation.to(input_ids.device)[input_ids]
        for i, row in enumerate(batch_word_strings(input_ids, words, self.pieces)):
            row_weights = torch.tensor(self.weighting.weights(row), dtype=torch.float64)
            fragments = words[i][fragment[i]].cpu()
            if len(fragments):
                row_weights[fragments] = row_weights.min()
            weights[i, :len(row)] = row_weights
        return weights
