"""Pre-training corpus: the three formats, in-order segmentation of long documents, the tokenised cache."""
from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from retromae_ir.data.readers import DataFormatError
from retromae_ir.pretrain.data import CorpusError, iter_documents, load_segments


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def test_three_formats(tmp_path):
    (tmp_path / "beir.jsonl").write_text(json.dumps({"_id": "a", "title": "T", "text": "body"}) + "\n")
    (tmp_path / "text.jsonl").write_text(json.dumps({"id": 7, "text": "one"}) + "\n" + json.dumps({"text": "two"}) + "\n")
    (tmp_path / "plain.txt").write_text("first line\n\nsecond line\n")
    assert list(iter_documents(tmp_path / "beir.jsonl")) == [("a", "T body")]
    assert list(iter_documents(tmp_path / "text.jsonl")) == [("7", "one"), ("2", "two")]
    assert list(iter_documents(tmp_path / "plain.txt")) == [("1", "first line"), ("3", "second line")]


def test_a_tsv_collection_and_a_titled_jsonl_read_as_encoding_reads_them(tmp_path):
    """collection.tsv was read as plain text ('0<TAB>passage', the pid in every segment, keyed by line number), and
    an {"id", "title", "text"} JSONL lost its title."""
    (tmp_path / "collection.tsv").write_text("0\tThe presence of communication\n7\tManhattan Project\n")
    (tmp_path / "titled.jsonl").write_text(json.dumps({"id": "d1", "title": "Cells", "text": "divide"}) + "\n")
    assert list(iter_documents(tmp_path / "collection.tsv")) == [("0", "The presence of communication"),
                                                                  ("7", "Manhattan Project")]
    assert list(iter_documents(tmp_path / "titled.jsonl")) == [("d1", "Cells divide")]


def test_jsonl_without_text_is_refused(tmp_path):
    (tmp_path / "bad.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(CorpusError, match="neither"):
        list(iter_documents(tmp_path / "bad.jsonl"))
    (tmp_path / "mixed.jsonl").write_text(json.dumps({"text": "x"}) + "\n" + json.dumps({"body": "y"}) + "\n")
    with pytest.raises(DataFormatError, match="mixed.jsonl:2"):
        list(iter_documents(tmp_path / "mixed.jsonl"))


def test_a_json_lines_file_whose_first_line_is_not_json_is_refused(tmp_path):
    """The format was guessed from line 1 alone: a torn or mis-escaped first record read the whole file as plain
    text, every record a document of braces and keys keyed by its line number."""
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"_id": "d1", "text": "cut off\n' + json.dumps({"_id": "d2", "text": "fine"}) + "\n")
    with pytest.raises(CorpusError, match=r"corpus.jsonl:1: expected a JSON object \(the file is named as JSON"):
        list(iter_documents(bad))
    (tmp_path / "notes.txt").write_text('{"a": 1} is how a record looks\nsecond\n')  # plain text stays plain
    assert [docid for docid, _ in iter_documents(tmp_path / "notes.txt")] == ["1", "2"]


@pytest.mark.parametrize("value", ["null", "4.0", "true", "[1]"])
def test_an_id_that_is_not_text_or_a_whole_number_is_refused(tmp_path, value):
    """``str()`` made null the id "None" and 4.0 "4.0"."""
    path = tmp_path / "text.jsonl"
    path.write_text(f'{{"id": {value}, "text": "one"}}\n')
    with pytest.raises(DataFormatError, match=r"text.jsonl:1: an id is a string or a whole number, got"):
        list(iter_documents(path))


def test_a_corpus_edited_while_it_is_tokenised_is_not_cached(tmp_path, tokenizer, monkeypatch):
    """The cache's key was hashed before the tokeniser read the file: the edited corpus's segments were cached under
    the old one's key, and a run on the old corpus loaded them."""
    from retromae_ir.io import InputChangedError
    from retromae_ir.pretrain import data

    corpus = tmp_path / "c.txt"
    corpus.write_text("first words here\nsecond line\n")
    tokenize = data.tokenize_corpus

    def tokenize_then_edit(*args, **kwargs):
        segments = tokenize(*args, **kwargs)
        corpus.write_text("completely different words here\n")
        return segments

    monkeypatch.setattr(data, "tokenize_corpus", tokenize_then_edit)
    with pytest.raises(InputChangedError, match=r"c.txt changed while it was tokenised"):
        load_segments(corpus, tokenizer, 12, cache=tmp_path / "cache.npz")
    assert not (tmp_path / "cache.npz").exists()


def test_long_documents_become_ordered_segments(tmp_path, tokenizer):
    text = " ".join(f"word{i}" for i in range(40))
    (tmp_path / "c.txt").write_text(text + "\nshort\n")
    segments = load_segments(tmp_path / "c.txt", tokenizer, max_length=12)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    long_doc = [s for s in segments if s.docid == "1"]
    assert [s.index for s in long_doc] == list(range(len(long_doc)))
    assert all(len(s.input_ids) <= 10 for s in segments)
    assert [i for s in long_doc for i in s.input_ids] == ids  # nothing lost, order kept
    assert segments[-1].docid == "2" and segments[-1].index == 0


def test_cache_round_trip_and_rebuild(tmp_path, tokenizer):
    (tmp_path / "c.txt").write_text("alpha beta gamma delta\nepsilon zeta\n")
    cache = tmp_path / "cache.npz"
    first = list(load_segments(tmp_path / "c.txt", tokenizer, 16, cache))
    assert cache.is_file()
    assert list(load_segments(tmp_path / "c.txt", tokenizer, 16, cache)) == first
    shorter = list(load_segments(tmp_path / "c.txt", tokenizer, 4, cache))  # other max length: rebuilt, not reused
    assert len(shorter) > len(first) and list(load_segments(tmp_path / "c.txt", tokenizer, 4, cache)) == shorter


def test_a_same_size_edit_with_its_old_mtime_is_tokenised_again(tmp_path, tokenizer):
    """The cache is keyed by the corpus's bytes: an edit of the same length, its mtime restored (cp -p, rsync -t),
    is another corpus."""
    import os

    corpus, cache = tmp_path / "c.txt", tmp_path / "cache.npz"
    corpus.write_text("alpha beta gamma delta\n")
    stat = corpus.stat()
    first = list(load_segments(corpus, tokenizer, 16, cache))
    corpus.write_text("alpha beta gamma omega\n")
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = list(load_segments(corpus, tokenizer, 16, cache))
    assert again != first and list(again[0].input_ids) == tokenizer("alpha beta gamma omega",
                                                              add_special_tokens=False)["input_ids"]


def test_the_same_bytes_read_as_another_format_are_tokenised_again(tmp_path, tokenizer):
    """An MS MARCO collection copied to .txt is read as plain lines (pid and tab in the text, line numbers as ids):
    its cache is not the .tsv's, though the bytes are the same."""
    cache = tmp_path / "cache.npz"
    (tmp_path / "c.tsv").write_text("7\talpha beta\n9\tgamma delta\n")
    (tmp_path / "c.txt").write_bytes((tmp_path / "c.tsv").read_bytes())
    as_tsv = list(load_segments(tmp_path / "c.tsv", tokenizer, 16, cache))
    as_plain = list(load_segments(tmp_path / "c.txt", tokenizer, 16, cache))
    assert [s.docid for s in as_tsv] == ["7", "9"] and [s.docid for s in as_plain] == ["1", "2"]


def test_a_run_on_the_same_bytes_read_otherwise_is_another_run(tmp_path):
    """The run identity hashes the corpus's bytes; a collection read as MS MARCO (.tsv) and the same bytes read as
    plain lines (.txt), or read as plain lines by a run started before the .tsv reader, must not resume each other."""
    from retromae_ir.pretrain.__main__ import corpus_reader
    from retromae_ir.training.trainer import run_identity

    (tmp_path / "c.tsv").write_text("7\talpha beta\n9\tgamma delta\n")
    (tmp_path / "c.txt").write_bytes((tmp_path / "c.tsv").read_bytes())
    (tmp_path / "c.jsonl").write_text('{"_id": "7", "text": "alpha beta"}\n')
    assert corpus_reader(str(tmp_path / "c.tsv")) == {"corpus_reader": 4}
    assert corpus_reader(str(tmp_path / "c.txt")) is None and corpus_reader(str(tmp_path / "c.jsonl")) is None
    identities = [run_identity({"corpus": str(tmp_path / name)}, corpus_reader(str(tmp_path / name)))
                  for name in ("c.tsv", "c.txt")]
    assert identities[0]["corpus"] == identities[1]["corpus"] and identities[0] != identities[1]


def test_each_document_id_is_held_once_at_its_own_length(tmp_path, tokenizer, monkeypatch):
    """Segments kept their ids in one fixed-width column: every segment at the longest id's width (4 bytes a
    character), so one 2,000-character URL id made a 10M-segment corpus 80 GB. Ids are held once a document,
    and the table and its cache give back each segment's id across chunk boundaries."""
    from retromae_ir.pretrain import data

    monkeypatch.setattr(data, "TOKENIZE_CHUNK", 2)  # three chunks: ids shifted across them
    long_id = "https://example.org/" + "x" * 5000
    docs = [("a", "one two three four five six"), (long_id, "seven eight nine ten"), ("c", ""), ("d", "eleven")]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs))
    cache = tmp_path / "cache.npz"
    table = load_segments(tmp_path / "c.jsonl", tokenizer, 5, cache)  # 3 tokens a segment
    expected = [("a", 0), ("a", 1), (long_id, 0), (long_id, 1), ("d", 0)]
    assert [(s.docid, s.index) for s in table] == expected
    assert table.documents.data == "".join(f"{docid}\n" for docid, _ in docs).encode()  # each id once
    assert table.doc_of.tolist() == [0, 0, 1, 1, 3]
    assert [(s.docid, s.index) for s in load_segments(tmp_path / "c.jsonl", tokenizer, 5, cache)] == expected


def test_a_second_process_waits_for_the_tokenised_cache_and_reads_it(tmp_path, tokenizer, monkeypatch):
    """Under torchrun every rank tokenised the whole corpus and wrote the same cache; the first holds the cache's
    lock while it tokenises, and the others wait, then read what it wrote."""
    import threading
    import time

    from retromae_ir.io import output_lock
    from retromae_ir.pretrain import data

    monkeypatch.setattr(data, "CACHE_POLL_S", 0.05)
    corpus, cache = tmp_path / "c.txt", tmp_path / "cache.npz"
    corpus.write_text("alpha beta gamma delta\nepsilon zeta\n")
    table = data.tokenize_corpus(corpus, tokenizer, 16)
    key, _ = data._cache_key(corpus, tokenizer, 16)
    monkeypatch.setattr(data, "tokenize_corpus", lambda *args: pytest.fail("tokenised again"))
    found = []
    with output_lock(cache):  # the first process, tokenising
        waiter = threading.Thread(target=lambda: found.append(load_segments(corpus, tokenizer, 16, cache)))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and not found  # waiting on the lock
        data._write_cache(cache, key, table)
    waiter.join(timeout=30)
    assert [list(segments) for segments in found] == [list(table)]


def test_a_built_cache_is_read_without_its_lock(tmp_path, tokenizer, monkeypatch):
    """A complete cache (renamed into place) is read at once, without the lock: every rank reads together, and a
    cache in a folder this process cannot write (where no lock file can be made) still serves."""
    from retromae_ir.io import output_lock
    from retromae_ir.pretrain import data

    corpus, cache = tmp_path / "c.txt", tmp_path / "cache.npz"
    corpus.write_text("alpha beta gamma delta\nepsilon zeta\n")
    first = list(load_segments(corpus, tokenizer, 16, cache))
    monkeypatch.setattr(data, "tokenize_corpus", lambda *args: pytest.fail("tokenised again"))
    with output_lock(cache):  # another process holds it (building another key, say): no wait for a valid cache
        assert list(load_segments(corpus, tokenizer, 16, cache)) == first
