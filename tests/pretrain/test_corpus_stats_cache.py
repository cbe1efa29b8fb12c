"""MASTER's corpus statistics counted on first use (issue 13, item 4): one pre-training command, no separate step;
reused by the next run; a changed corpus or tokenizer gets fresh statistics; a read-only corpus folder sends them
to the cache; the explicit command writes the file pre-training finds; a second process waits for the first."""
from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from pretrain_helpers import write_corpus
from retromae_ir.io import output_lock
from retromae_ir.pretrain import corpus_stats
from retromae_ir.pretrain.corpus_stats import StatsKey, ensure_corpus_stats, stats_locations
from retromae_ir.pretrain.keywords import CorpusStats, count_corpus

LOGGER = "retromae_ir.pretrain.corpus_stats"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A private statistics cache for each test (never ~/.cache)."""
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "corpus_stats"


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "data").mkdir()
    return write_corpus(tmp_path / "data" / "corpus.jsonl", docs=8, length=20)


@pytest.fixture
def no_counting(monkeypatch):
    """Make any counting fail: what runs under it must reuse statistics."""
    def refuse(*args, **kwargs):
        raise AssertionError("corpus statistics were counted again")

    monkeypatch.setattr(corpus_stats, "count_corpus", refuse)


def stats_files(folder):
    return sorted(folder.glob("*.corpus_stats.*.json"))


def pretrain(tiny_bert_dir, corpus, output):
    from retromae_ir.pretrain.__main__ import main

    main(["--method", "master", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(output),
          "--max-length", "16", "--batch-size", "4", "--max-steps", "1", "--logging-steps", "10",
          "--master-tasks", "mkp,cmp,npr"])
    return json.loads((output / "retromae_ir.json").read_text())


def test_master_in_one_command_reuses_then_recounts_a_changed_corpus(tmp_path, tiny_bert_dir, corpus, cache,
                                                                     caplog, monkeypatch):
    monkeypatch.setattr("retromae_ir.training.trainer.plot_loss_curves", lambda *a, **k: None)  # seconds a plot
    caplog.set_level(logging.INFO, logger=LOGGER)
    meta = pretrain(tiny_bert_dir, corpus, tmp_path / "run1")  # no corpus_stats command before it
    [first] = stats_files(corpus.parent)
    assert meta["method_args"]["master_corpus_stats"] == str(first)
    assert "mkp" in (tmp_path / "run1" / "loss.csv").read_text().splitlines()[0].split(",")
    assert f"written to {first}" in caplog.text and not (cache.exists() and stats_files(cache))
    stats = CorpusStats.load(first)
    assert stats.num_docs == 8 and stats.key["digest"] in first.name

    # the second run reads them: not counted again (counting would raise), file untouched, the log says so
    mtime = first.stat().st_mtime_ns
    caplog.clear()
    with monkeypatch.context() as patch:
        patch.setattr(corpus_stats, "count_corpus", lambda *a, **k: pytest.fail("counted again"))
        meta = pretrain(tiny_bert_dir, corpus, tmp_path / "run2")
    assert meta["method_args"]["master_corpus_stats"] == str(first)
    assert first.stat().st_mtime_ns == mtime and f"reusing {first}" in caplog.text

    # a changed corpus (same path) gets its own, fresh statistics
    with open(corpus, "a") as handle:
        handle.write(json.dumps({"_id": "new", "title": "", "text": "zebrafish zebrafish"}) + "\n")
    caplog.clear()
    meta = pretrain(tiny_bert_dir, corpus, tmp_path / "run3")
    second = {*stats_files(corpus.parent)} - {first}
    assert len(second) == 1 and meta["method_args"]["master_corpus_stats"] == str(*second)
    fresh = CorpusStats.load(*second)
    assert fresh.num_docs == 9 and fresh.cf["zebrafish"] == 2 and "zebrafish" not in CorpusStats.load(first).cf
    assert "counting them into" in caplog.text


def test_a_changed_tokenizer_gets_fresh_statistics(tiny_bert_dir, tokenizer, corpus):
    from transformers import AutoTokenizer

    cased = AutoTokenizer.from_pretrained(tiny_bert_dir, do_lower_case=False)  # same vocabulary, other normaliser
    extended = AutoTokenizer.from_pretrained(tiny_bert_dir)
    extended.add_tokens(["zebrafish"])  # vocabulary changed
    paths = [ensure_corpus_stats(corpus, t, "tiny") for t in (tokenizer, cased, extended)]
    assert len(set(paths)) == 3 and len(stats_files(corpus.parent)) == 3
    keys = [CorpusStats.load(p).key for p in paths]
    assert len({k["tokenizer_sha256"] for k in keys}) == 3 and len({k["corpus_sha256"] for k in keys}) == 1
    # the same tokenizer loaded again (another object, used with truncation in between) finds its file
    again = AutoTokenizer.from_pretrained(tiny_bert_dir)
    again(["protein cell"], truncation=True, max_length=3, padding="max_length")
    assert ensure_corpus_stats(corpus, again, "tiny") == paths[0]


def test_read_only_corpus_folder_uses_the_cache(tokenizer, corpus, cache, monkeypatch, no_counting):
    monkeypatch.setattr(corpus_stats, "directory_writable", lambda folder: folder != corpus.parent)
    with monkeypatch.context() as patch:
        patch.setattr(corpus_stats, "count_corpus", count_corpus)
        path = ensure_corpus_stats(corpus, tokenizer, "tiny")
    assert path.parent == cache and not stats_files(corpus.parent)
    assert ensure_corpus_stats(corpus, tokenizer, "tiny") == path  # reused from the cache
    monkeypatch.setattr(corpus_stats, "directory_writable", lambda folder: True)
    assert ensure_corpus_stats(corpus, tokenizer, "tiny") == path  # found in the cache before counting beside


def test_a_damaged_or_foreign_file_is_counted_afresh(tokenizer, corpus, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = ensure_corpus_stats(corpus, tokenizer, "tiny")
    good = path.read_text()
    path.write_text("{not json")
    assert ensure_corpus_stats(corpus, tokenizer, "tiny") == path and path.read_text() == good
    foreign = CorpusStats.load(path)
    foreign.key = {**foreign.key, "corpus_sha256": "0" * 64}  # a file renamed onto this key
    foreign.save(path)
    caplog.clear()
    assert ensure_corpus_stats(corpus, tokenizer, "tiny") == path and path.read_text() == good
    assert "counted from other inputs" in caplog.text


def test_the_command_writes_what_pretraining_finds(tiny_bert_dir, tokenizer, corpus, monkeypatch):
    assert corpus_stats.main(["--corpus", str(corpus), "--model", str(tiny_bert_dir)]) == 0
    [written] = stats_files(corpus.parent)
    monkeypatch.setattr(corpus_stats, "count_corpus", lambda *a, **k: pytest.fail("counted again"))
    assert ensure_corpus_stats(corpus, tokenizer, "tiny") == written


def test_a_second_process_waits_for_the_first(tokenizer, corpus, monkeypatch, no_counting):
    """While another writer holds the lock on the statistics file, a run waits, then reads what it wrote."""
    monkeypatch.setattr(corpus_stats, "LOCK_POLL_S", 0.05)
    sha, _ = corpus_stats.corpus_fingerprint(corpus)
    key = StatsKey(sha, corpus_stats.tokenizer_fingerprint(tokenizer))
    target = stats_locations(corpus, key)[0]
    found = []
    with output_lock(target):
        waiter = threading.Thread(target=lambda: found.append(ensure_corpus_stats(corpus, tokenizer, "tiny")))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and not found  # waiting on the lock
        stats = count_corpus((text for _, text in corpus_stats.iter_documents(corpus)), tokenizer, "tiny")
        stats.key = key.stored()
        stats.save(target)
    waiter.join(timeout=30)
    assert found == [target]


def test_a_given_statistics_file_of_another_corpus_is_never_used_silently(tmp_path, tokenizer, corpus, caplog):
    """--master-corpus-stats counted (with its key) from another corpus is named in a warning with both keys, a
    keyless one as unchecked; the corpus's own passes without a word."""
    from retromae_ir.pretrain.corpus_stats import check_stats_file

    caplog.set_level(logging.WARNING, logger=LOGGER)
    own = ensure_corpus_stats(corpus, tokenizer, "tiny")
    check_stats_file(own, corpus, tokenizer)
    assert not caplog.text
    other = write_corpus(tmp_path / "other.jsonl", docs=5, length=20)
    check_stats_file(own, other, tokenizer)
    assert "was counted from another corpus or tokenizer" in caplog.text and own.name in caplog.text
    keyless = tmp_path / "keyless.json"
    count_corpus(["cells divide", "stars burn"], tokenizer, "tiny").save(keyless)
    check_stats_file(keyless, corpus, tokenizer)
    assert "records no key" in caplog.text


def test_only_corpora_read_otherwise_since_counted_get_a_new_key(tokenizer, tmp_path):
    """Pre-training reads a .tsv and a titled {"text"} JSONL otherwise since 2026-11-25: their old counts must miss;
    a BEIR or plain-text corpus reads as before, so its key (and a MASTER run's --resume) is unchanged."""
    beir, text = tmp_path / "corpus.jsonl", tmp_path / "texts.jsonl"
    beir.write_text(json.dumps({"_id": "a", "title": "T", "text": "body"}) + "\n")
    text.write_text(json.dumps({"id": "a", "title": "T", "text": "body"}) + "\n")
    sha = corpus_stats.corpus_fingerprint(beir)[0]
    assert StatsKey.of(beir, sha, tokenizer) == StatsKey(sha, corpus_stats.tokenizer_fingerprint(tokenizer))
    assert "reader" not in StatsKey.of(beir, sha, tokenizer).stored()
    assert StatsKey.of(text, sha, tokenizer).stored()["reader"] == 4
    assert StatsKey.of(text, sha, tokenizer).digest != StatsKey.of(beir, sha, tokenizer).digest


def test_a_corpus_replaced_while_it_is_counted_keeps_no_statistics(tokenizer, corpus, cache, monkeypatch):
    """The key was hashed before the count read the file: the other corpus's statistics were kept under this one's
    key, and a later run on this corpus reused them."""
    from retromae_ir.io import InputChangedError

    count = corpus_stats.count_corpus

    def count_then_replace(*args, **kwargs):
        stats = count(*args, **kwargs)
        write_corpus(corpus.with_name("other.jsonl"), docs=3, length=5).replace(corpus)
        return stats

    monkeypatch.setattr(corpus_stats, "count_corpus", count_then_replace)
    with pytest.raises(InputChangedError, match=r"corpus.jsonl changed while its statistics were counted"):
        ensure_corpus_stats(corpus, tokenizer, "tiny")
    assert not stats_files(corpus.parent) and not stats_files(cache)
