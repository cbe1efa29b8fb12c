"""The Lucene indexer's run is checked against the documents written: it exits 0 when a thread's exception drops
the rest of a collection file."""
import json
import logging
import re

import pytest

from retromae_ir.data.readers import DataFormatError, MAX_ID_BYTES, load_beir_corpus
from retromae_ir.lucene_indexer import IndexingError, build_lucene_index, check_counters

ARGUMENTS = ["--collection", "JsonCollection", "--generator", "DefaultLuceneDocumentGenerator", "--threads", "1"]


def collection(folder, docs):
    folder.mkdir()
    (folder / "docs.jsonl").write_text("".join(json.dumps({"id": i, "contents": c}) + "\n" for i, c in docs))
    return folder


def test_an_id_over_lucenes_term_limit_drops_the_collection_and_is_an_error(tmp_path, caplog):
    """Measured with Pyserini 2.4: exit 0, 'indexed: 0', the index empty, for 4 documents of which one had a
    40,000-byte id."""
    docs = [("d1", "hello world"), ("d2", ""), ("x" * 40000, "big id"), ("d4", "after")]
    with pytest.raises(IndexingError, match=r"4 documents written, 0 indexed and 1 empty .*: .*immense term"):
        build_lucene_index([*ARGUMENTS, "--input", str(collection(tmp_path / "bad", docs)), "--index",
                            str(tmp_path / "bad-index")], 4, "bad")
    good = collection(tmp_path / "good", [docs[0], docs[1], docs[3]])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="retromae_ir.lucene_indexer"):
        build_lucene_index([*ARGUMENTS, "--input", str(good), "--index", str(tmp_path / "good-index")], 3, "good")
    # the command and the indexer's own lines reach the job's log (its output was dropped on success)
    logged = [record.getMessage() for record in caplog.records]
    assert logged[0].startswith("indexing 3 documents of good: python -m pyserini.index.lucene --collection")
    assert any(re.search(r"^lucene: .*AbstractIndexer.* - indexed:\s+2$", line) for line in logged), logged[-8:]


def test_counters_missing_or_short_are_errors():
    log = "\n".join(f"2026-11-27 INFO [main] index.AbstractIndexer (AbstractIndexer.java:29{i}) - {name}: {value}"
                    for i, (name, value) in enumerate([("indexed", "1,000"), ("unindexable", "0"), ("empty", "2"),
                                                       ("skipped", "0"), ("errors", "0")]))
    check_counters(log, 1002, "c")
    for separator in (".", "\u202f", "\u00a0"):  # the indexer's locale formats the counts (German, French, ...)
        check_counters(log.replace("1,000", f"1{separator}000"), 1002, "c")
    with pytest.raises(IndexingError, match="1003 documents written, 1000 indexed and 2 empty"):
        check_counters(log, 1003, "c")
    with pytest.raises(IndexingError, match="the indexer's final counters are not in its output"):
        check_counters("Indexing Complete!", 3, "c")


def test_readers_refuse_an_id_lucene_cannot_index(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "text": "a"}) + "\n" + json.dumps({"_id": "é" * 20000, "text": "b"})
                      + "\n")
    with pytest.raises(DataFormatError, match=rf"corpus.jsonl:2: id 'é+'... is 40000 bytes, over Lucene's "
                                              rf"{MAX_ID_BYTES}-byte term limit"):
        load_beir_corpus(corpus)
