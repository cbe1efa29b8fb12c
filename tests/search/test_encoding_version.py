"""The encoding code's version (``representation.ENCODING_VERSION``): vectors made by other encoding code are never
reused or searched with this code's queries, and the packaged MiniLM's vectors are pinned under the version, so a
change of the vectors that forgets to bump it fails here."""
from __future__ import annotations

import json

import numpy as np
import pytest

from retromae_ir.encode import EncoderModel
from retromae_ir.encode.manifest import IndexMismatchError, check_queries
from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.search.retriever import EncoderRetriever

from conftest import CORPUS

TEXTS = ["Vitamin D deficiency is associated with an increased risk of tuberculosis.", "The cat sat on the mat."]
QUERY = "does vitamin D prevent tuberculosis?"
# ENCODING_VERSION -> card -> side -> the first 6 dense numbers of each text, and its 5 largest OT weights
PINNED = {1: {
    "dupmae-minilm": {
        "passages": {"dense": [[0.005803, 0.021513, -0.014341, -0.01599, 0.037205, 0.037377],
                               [0.130237, -0.015773, -0.036717, 0.057986, -0.059792, 0.033054]],
                     "sparse_top": [[["vitamin", 2.39088], ["d", 2.2057], ["tuberculosis", 2.19338],
                                     ["deficiency", 2.14196], ["associated", 2.12562]],
                                    [["cat", 2.28249], ["sat", 2.26464], ["mat", 2.24598], ["sitting", 2.06067],
                                     ["cats", 2.0495]]],
                     "nnz": [384, 384]},
        "query": {"dense": [[-0.017182, 0.032955, -0.008886, -0.03949, 0.032626, 0.032949]],
                  "sparse_top": [[["vitamin", 2.38756], ["d", 2.21632], ["tuberculosis", 2.19588],
                                  ["prevent", 2.19067], ["allow", 2.08163]]],
                  "nnz": [64]}},
    "minilm-cls": {
        "passages": {"dense": [[0.001424, 0.229699, -0.141994, -0.351206, -0.02488, 0.286309],
                               [0.487211, -0.008805, -0.163671, 0.208769, -0.387027, 0.23352]]},
        "query": {"dense": [[0.023564, 0.066977, -0.193326, -0.488626, 0.063427, 0.441339]]}},
}}


@pytest.mark.parametrize("card", ["dupmae-minilm", "minilm-cls"])
def test_the_packaged_minilm_vectors_are_those_pinned_under_this_encoding_version(card, minilm_path):
    assert ENCODING_VERSION in PINNED, "bump ENCODING_VERSION together with the values pinned for it"
    model = EncoderModel.from_card(card, device="cpu", bf16=False)
    changed = "vectors changed: if on purpose, bump representation.ENCODING_VERSION and pin the new values here"
    for side, encoded in (("passages", model.encode_passage(TEXTS)), ("query", model.encode_query([QUERY]))):
        pinned = PINNED[ENCODING_VERSION][card][side]
        np.testing.assert_allclose(encoded.dense[:, :6], pinned["dense"], atol=2e-5, err_msg=changed)
        if "sparse_top" not in pinned:
            assert encoded.sparse is None
            continue
        for row, top, nnz in zip(encoded.sparse, pinned["sparse_top"], pinned["nnz"]):
            order = np.argsort(-row.data)[:len(top)]
            assert [model.vocab[row.indices[i]] for i in order] == [term for term, _ in top], changed
            np.testing.assert_allclose(row.data[order], [weight for _, weight in top], atol=2e-4, err_msg=changed)
            assert row.nnz == nnz, changed


def _set_encoding(manifest_path, version):
    data = json.loads(manifest_path.read_text())
    if version is None:
        data.pop("encoding")  # written before the version was recorded
    else:
        data["encoding"] = version
    manifest_path.write_text(json.dumps(data))


@pytest.mark.parametrize("other", [ENCODING_VERSION + 1, None])  # None: before the version was recorded
def test_an_index_of_other_encoding_code_is_refused_for_search_and_encoded_again(other, tmp_path, tiny_bert_dir,
                                                                                 monkeypatch):
    """An index whose manifest records other encoding code (or none) is not searched with this code's queries and
    not reused by the evaluation drivers: they encode it again, and their run files are keyed by the version."""
    import retromae_ir.encode.corpus as corpus
    from retromae_ir.search.index import HybridIndex

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1)
    index_dir = retriever.build_index(CORPUS, "handful")
    assert json.loads((index_dir / "manifest.json").read_text())["encoding"] == ENCODING_VERSION
    assert retriever.run_key(CORPUS)["encoding"] == ENCODING_VERSION
    HybridIndex(index_dir, str(card))  # this code's own index opens
    _set_encoding(index_dir / "manifest.json", other)
    made = "before retromae_ir recorded it" if other is None else f"by retromae_ir's encoding version {other}"
    with pytest.raises(IndexMismatchError, match=f"encoded {made}; this code encodes version {ENCODING_VERSION}"):
        HybridIndex(index_dir, str(card))

    calls = []
    original = corpus.encode_shard
    monkeypatch.setattr(corpus, "encode_shard", lambda *a, **k: calls.append(1) or original(*a, **k))
    EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1).build_index(CORPUS, "handful")
    assert calls == [1]
    assert json.loads((index_dir / "manifest.json").read_text())["encoding"] == ENCODING_VERSION
    HybridIndex(index_dir, str(card))


def test_chunks_of_other_encoding_code_are_not_merged(tmp_path, tiny_bert_dir):
    """Chunks left for resuming by older encoding code are not found for a merge (nor resumed: their sources differ)."""
    from retromae_ir.encode.corpus import SOURCES, encode_shard, find_work, read_corpus

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    model = EncoderModel.from_card(str(card), device="cpu")
    docids, texts = read_corpus(CORPUS)
    work = encode_shard(model, docids, texts, tmp_path / "out").parent
    assert find_work(tmp_path / "out", model.card, 1, False) == work
    _set_encoding(work / SOURCES, ENCODING_VERSION - 1)
    with pytest.raises(IndexMismatchError, match="no encoded shards"):
        find_work(tmp_path / "out", model.card, 1, False)


def test_pre_encoded_queries_of_other_encoding_code_than_the_index_are_refused(tmp_path, tiny_bert_dir):
    from retromae_ir.encode.queries import encode_queries

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, bf16=False,
                                 device="cpu").build_index(CORPUS, "handful")  # fp32, as the queries below
    model = EncoderModel.from_card(str(card), device="cpu")
    queries = tmp_path / "queries"
    encode_queries(model, {"q1": "a cat", "q2": "proteins"}, queries)
    check_queries(queries, index_dir)
    _set_encoding(queries / "manifest.json", None)
    with pytest.raises(IndexMismatchError, match=r"other versions of retromae_ir's encoding code \(0 and 1"):
        check_queries(queries, index_dir)
