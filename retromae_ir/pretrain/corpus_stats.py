"""Word statistics for MASTER's keyword masking: counted once per corpus and tokenizer, found again by a key.

Pre-training (``python -m retromae_ir.pretrain --method master``) calls :func:`ensure_corpus_stats` when MKP or
NPR is on and no ``--master-corpus-stats`` is given: it reuses the statistics of this corpus and tokenizer if they
were counted before, else counts them (a progress bar) and keeps them for the next run. The file is found by its
key, a digest of the corpus's bytes and of the tokenizer (vocabulary, added tokens, normaliser, pre-tokeniser):
a changed corpus or tokenizer gets fresh statistics, never stale ones. Where the file goes:

* beside the corpus, ``<corpus name>.corpus_stats.<key>.json``, when the corpus's folder is writable;
* else under the cache, ``$RETROMAE_IR_CACHE/corpus_stats/`` (default ``~/.cache/retromae_ir/corpus_stats/``).

Both places are looked in before counting. The file is written atomically under ``retromae_ir.io``'s output lock;
a second process that wants the same statistics waits for the first and reads its file.

The command ``python -m retromae_ir.pretrain.corpus_stats --corpus corpus.jsonl [--model M]`` counts them ahead
of time (e.g. for a big corpus, on another machine or before a multi-GPU job); without ``--output`` it writes
exactly the file pre-training looks for. With ``--output FILE`` the file is given to pre-training as
``--master-corpus-stats FILE``.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from retromae_ir.cli import add_debug_flag, check_at_least_one, command
from retromae_ir.io import check_read_unchanged, claim_output, claim_output_waiting, command_errors
from retromae_ir.io import cache_dir as io_cache_dir
from retromae_ir.packaged import default_model
from retromae_ir.pretrain.data import CorpusError, iter_documents, reader_version
from retromae_ir.pretrain.keywords import CorpusStats, CorpusStatsError, count_corpus

LOG = logging.getLogger(__name__)

KEY_VERSION = 1  # bump when the counting changes: every cached file then misses and is counted afresh
CACHE_SUBDIR = "corpus_stats"
LOCK_POLL_S = 2.0  # how often a process waiting for another's counting retries the lock
# the parts of a fast tokenizer's serialisation that decide how a text splits into pieces (not its padding or
# truncation settings, which change with every call, nor its post-processor: the counts add no special tokens)
TOKENIZER_PARTS = ("added_tokens", "normalizer", "pre_tokenizer", "model")


def cache_dir() -> Path:
    """``$RETROMAE_IR_CACHE/corpus_stats`` (default ``~/.cache/retromae_ir/corpus_stats``)."""
    return io_cache_dir(CACHE_SUBDIR)


@dataclass(frozen=True)
class StatsKey:
    """What a statistics file was counted from: the corpus's bytes and the tokenizer, each as a sha256."""

    corpus_sha256: str
    tokenizer_sha256: str
    reader: int | None = None  # pretrain.data.reader_version: set only for formats read otherwise since counted

    @classmethod
    def of(cls, corpus: str | Path, corpus_sha256: str, tokenizer) -> "StatsKey":
        return cls(corpus_sha256, tokenizer_fingerprint(tokenizer), reader_version(corpus))

    @property
    def digest(self) -> str:
        """16 hex digits over both digests (and the key version): the file-name key."""
        text = json.dumps({"version": KEY_VERSION, **self.as_dict()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_dict(self) -> dict:
        reader = {} if self.reader is None else {"reader": self.reader}  # keys of BEIR and plain text unchanged
        return {"corpus_sha256": self.corpus_sha256, "tokenizer_sha256": self.tokenizer_sha256, **reader}

    def stored(self) -> dict:
        """The ``key`` entry written into the statistics file."""
        return {"digest": self.digest, "version": KEY_VERSION, **self.as_dict()}


def corpus_fingerprint(corpus: str | Path) -> tuple[str, int | None]:
    """sha256 of the corpus file's bytes, and its line count (None for a gzipped file): one read of the file."""
    corpus = Path(corpus)
    if not corpus.is_file():
        raise CorpusError(f"corpus file not found: {corpus}")
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    with open(corpus, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            lines += block.count(b"\n")
            last = block[-1:]
    gzipped = corpus.suffix == ".gz"
    return digest.hexdigest(), None if gzipped else lines + (last != b"\n")


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of what decides how the tokenizer splits text: for a fast tokenizer its vocabulary, added tokens,
    normaliser and pre-tokeniser (so a cased and an uncased tokenizer over one vocabulary differ), else its class,
    vocabulary and casing options. The tokenizer's name or path plays no part: one tokenizer under two paths
    shares its statistics."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec = {part: spec.get(part) for part in TOKENIZER_PARTS}
    else:
        spec = {"class": type(tokenizer).__name__, "vocab": sorted(tokenizer.get_vocab().items()),
                **{k: str(getattr(tokenizer, k, None)) for k in ("do_lower_case", "strip_accents",
                                                                  "tokenize_chinese_chars")}}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def stats_filename(corpus: str | Path, key: StatsKey) -> str:
    return f"{Path(corpus).name}.{CACHE_SUBDIR}.{key.digest}.json"


def stats_locations(corpus: str | Path, key: StatsKey) -> list[Path]:
    """Where the statistics of ``corpus`` under ``key`` may be, in the order they are looked for: beside the
    corpus, then under the cache."""
    name = stats_filename(corpus, key)
    return [Path(corpus).resolve().parent / name, cache_dir() / name]


def directory_writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def read_matching(path: Path, key: StatsKey) -> CorpusStats | None:
    """The statistics in ``path`` when they were counted under ``key``; None when the file is absent, unreadable
    or from other inputs (a warning says which)."""
    if not path.is_file():
        return None
    try:
        stats = CorpusStats.load(path)
    except CorpusStatsError as error:
        LOG.warning("ignoring %s: %s", path, error)
        return None
    if stats.key != key.stored():
        LOG.warning("ignoring %s: it was counted from other inputs (stored key %s, wanted %s)", path,
                    (stats.key or {}).get("digest", "none"), key.digest)
        return None
    return stats


def count_statistics(corpus: str | Path, tokenizer, name: str, key: StatsKey, lines: int | None = None,
                     batch_size: int = 256) -> CorpusStats:
    """Count ``corpus`` (a progress bar over its documents) and record ``key`` in the result."""
    documents = tqdm(iter_documents(corpus), total=lines, desc=f"corpus statistics {Path(corpus).name}", unit="doc")
    with contextlib.closing(documents):
        stats = count_corpus((text for _, text in documents), tokenizer, name, batch_size)
    check_read_unchanged(corpus, key.corpus_sha256, "its statistics were counted")  # else kept under the old key
    stats.key = key.stored()
    return stats


def _write(target: Path, corpus: Path, tokenizer, name: str, key: StatsKey, lines: int | None,
           batch_size: int) -> Path:
    """Under the lock on ``target``: reuse what a process we waited for wrote there, else count and write."""
    with claim_output_waiting(target, LOCK_POLL_S):
        if read_matching(target, key) is not None:
            LOG.info("corpus statistics of %s: reusing %s (written while this process waited)", corpus, target)
            return target
        LOG.info("corpus statistics of %s under this tokenizer (key %s) not found: counting them into %s", corpus,
                 key.digest, target)
        started = time.monotonic()
        stats = count_statistics(corpus, tokenizer, name, key, lines, batch_size)
        stats.save(target)
    LOG.info("corpus statistics of %s: %d documents, %d words, %d distinct, counted in %.1f s, written to %s",
             corpus, stats.num_docs, stats.num_words, len(stats.cf), time.monotonic() - started, target)
    return target


def check_stats_file(path: str | Path, corpus: str | Path, tokenizer) -> None:
    """A given statistics file (``--master-corpus-stats``) is the user's choice (say the full corpus's statistics for
    a run on a sample), so it is used, but never silently: one counted from another corpus or under another
    tokenizer is named in a warning with both keys, one without a key (counted elsewhere) as unchecked."""
    stats = CorpusStats.load(Path(path))
    key = StatsKey.of(corpus, corpus_fingerprint(corpus)[0], tokenizer)
    if not stats.key:
        LOG.warning("%s records no key: whether it was counted from %s under this tokenizer cannot be checked",
                    path, corpus)
    elif stats.key != key.stored():
        LOG.warning("%s was counted from another corpus or tokenizer (key %s; %s under this tokenizer gives %s): "
                    "its keyword statistics are used as given; omit --master-corpus-stats to count this corpus's",
                    path, stats.key.get("digest"), corpus, key.digest)


def ensure_corpus_stats(corpus: str | Path, tokenizer, name: str, batch_size: int = 256) -> Path:
    """The statistics file of ``corpus`` under ``tokenizer``: found (beside the corpus or in the cache) when one
    was counted from the same corpus bytes and tokenizer, else counted now and written beside the corpus when its
    folder is writable, else into the cache. Logs where the file was read or written."""
    corpus = Path(corpus)
    corpus_sha, lines = corpus_fingerprint(corpus)
    key = StatsKey.of(corpus, corpus_sha, tokenizer)
    locations = stats_locations(corpus, key)
    for path in locations:
        if read_matching(path, key) is not None:
            LOG.info("corpus statistics of %s: reusing %s (key %s)", corpus, path, key.digest)
            return path
    beside, cached = locations
    if directory_writable(beside.parent):
        try:
            return _write(beside, corpus, tokenizer, name, key, lines, batch_size)
        except PermissionError as error:  # the folder looked writable but is not: fall back to the cache
            LOG.warning("cannot write beside the corpus (%s); using the cache %s", error, cached.parent)
    else:
        LOG.info("%s is read-only: corpus statistics go to the cache %s", beside.parent, cached.parent)
    return _write(cached, corpus, tokenizer, name, key, lines, batch_size)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m retromae_ir.pretrain.corpus_stats",
                                description="Count the word statistics MASTER's keyword masking needs, once per "
                                            "corpus and tokenizer (pre-training also counts them itself when "
                                            "they are missing).")
    p.add_argument("--corpus", required=True, type=Path,
                   help="the pre-training corpus: BEIR corpus.jsonl, {text} JSONL or plain text")
    p.add_argument("--model", default=None,
                   help="tokenizer: hub name or directory (default: packaged all-MiniLM-L6-v2)")
    p.add_argument("--output", default=None, type=Path,
                   help="statistics JSON to write (default: where pre-training looks for them: beside the corpus, "
                        "or under $RETROMAE_IR_CACHE/corpus_stats when the corpus's folder is read-only)")
    p.add_argument("--batch-size", type=int, default=256, help="texts tokenised at once")
    return add_debug_flag(p)


@command
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_at_least_one(args, "batch_size")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from transformers import AutoTokenizer

    name = args.model or default_model()
    tokenizer = AutoTokenizer.from_pretrained(name)
    with command_errors(ValueError):  # CorpusError / DataFormatError name the file and line
        if args.output is None:
            ensure_corpus_stats(args.corpus, tokenizer, name, args.batch_size)
            return 0
        corpus_sha, lines = corpus_fingerprint(args.corpus)
        key = StatsKey.of(args.corpus, corpus_sha, tokenizer)
        with claim_output(args.output):
            stats = count_statistics(args.corpus, tokenizer, name, key, lines, args.batch_size)
            stats.save(args.output)
    LOG.info("%s: %d documents, %d words, %d distinct -> %s", args.corpus, stats.num_docs, stats.num_words,
             len(stats.cf), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
