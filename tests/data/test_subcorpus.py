"""The judged sub-corpus: judged documents always kept, exact size, corpus order, seeded, clear errors."""
from __future__ import annotations

import json

import pytest

from retromae_ir.data.readers import iter_beir_corpus
from retromae_ir.data.subcorpus import judged_ids, write_judged_subcorpus


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": f"text {i}"}) + "\n" for i in range(20)))
    (tmp_path / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq2\td17\t1\n")
    (tmp_path / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td3\t1\nq3\td9\t0\n")
    return tmp_path


def ids(path):
    return [doc.docid for doc in iter_beir_corpus(path)]


def test_keeps_every_judged_document_in_corpus_order(folder):
    qrels = [folder / "train.tsv", folder / "test.tsv"]
    assert judged_ids(qrels) == {"d3", "d9", "d17"}
    assert write_judged_subcorpus(folder / "corpus.jsonl", qrels, 8, folder / "sub.jsonl") == 8
    kept = ids(folder / "sub.jsonl")
    assert len(kept) == 8 and {"d3", "d9", "d17"} <= set(kept)
    assert kept == sorted(kept, key=lambda d: int(d[1:]))
    first = next(iter_beir_corpus(folder / "sub.jsonl"))
    assert (first.title, first.text) == (f"t{first.docid[1:]}", f"text {first.docid[1:]}")


def test_sample_depends_on_the_seed_only(folder):
    qrels = [folder / "train.tsv"]
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        write_judged_subcorpus(folder / "corpus.jsonl", qrels, 6, folder / f"{name}.jsonl", seed=seed)
    assert ids(folder / "a.jsonl") == ids(folder / "b.jsonl") != ids(folder / "c.jsonl")


def test_size_above_the_corpus_is_an_error_without_output(folder):
    """It was the whole corpus, titled as a 100-document sub-corpus (exit 0); the corpus's own size is fine."""
    with pytest.raises(ValueError, match=r"size 100 is above the 20 documents of .*corpus.jsonl: ask for at most 20, "
                                         r"or use the whole corpus"):
        write_judged_subcorpus(folder / "corpus.jsonl", [folder / "train.tsv"], 100, folder / "all.jsonl")
    assert not (folder / "all.jsonl").exists()
    assert write_judged_subcorpus(folder / "corpus.jsonl", [folder / "train.tsv"], 20, folder / "all.jsonl") == 20


def test_size_below_the_judged_count_is_an_error_without_output(folder):
    with pytest.raises(ValueError, match="size 2 is below the 3 judged documents"):
        write_judged_subcorpus(folder / "corpus.jsonl", [folder / "train.tsv", folder / "test.tsv"], 2,
                               folder / "sub.jsonl")
    assert not (folder / "sub.jsonl").exists()


def test_judged_ids_missing_from_the_corpus_are_named(folder):
    (folder / "extra.tsv").write_text("query-id\tcorpus-id\tscore\nq9\tnope\t1\n")
    with pytest.raises(ValueError, match=r"corpus.jsonl: 1 judged document ids are not in the corpus.*'nope'"):
        write_judged_subcorpus(folder / "corpus.jsonl", [folder / "extra.tsv"], 10, folder / "sub.jsonl")
    assert not (folder / "sub.jsonl").exists()
