"""EncoderRetriever reuses an index only while the corpus and the checkpoint's weights are the ones it was built
from: a checkpoint directory trained again (same card, same fingerprint) is encoded again, and the chunks the
old weights left for resuming are not reused."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch

from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.search.retriever import EncoderRetriever, dense_index_name

from conftest import CARD, CORPUS


def dense_vectors(index_dir):
    import faiss

    index = faiss.read_index(str(index_dir / "dense" / "index"))
    return index.reconstruct_n(0, index.ntotal)


@pytest.mark.jvm
def test_retrained_checkpoint_is_encoded_again(tmp_path, tiny_bert_dir, monkeypatch):
    from transformers import BertForMaskedLM

    import retromae_ir.encode.corpus as corpus

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {checkpoint}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 32\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1)
    index_dir = retriever.build_index(CORPUS, "handful")
    before, key_before = dense_vectors(index_dir), retriever.run_key(CORPUS)

    calls = []
    original = corpus.encode_shard
    monkeypatch.setattr(corpus, "encode_shard", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1).build_index(
        CORPUS, "handful") == index_dir
    assert calls == []  # same sources: reused

    model = BertForMaskedLM.from_pretrained(checkpoint)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.mul_(2.0)
    model.save_pretrained(checkpoint)  # "trained again" into the same directory
    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.search.index import HybridIndex

    with pytest.raises(IndexMismatchError, match="encoded with other weights .*model.safetensors differ"):
        HybridIndex(index_dir, str(card))  # searching the old index with the new weights' queries is refused
    retrained = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1)
    retrained.build_index(CORPUS, "handful")
    assert calls == [1]
    assert not np.allclose(dense_vectors(index_dir), before)
    # and the evaluation drivers' run files of the old weights are not reused: the run key names the weights
    changed = {name for name in key_before if retrained.run_key(CORPUS)[name] != key_before[name]}
    assert changed and all(name.endswith("_sha256") and name != "corpus_sha256" for name in changed)
    assert EncoderRetriever(str(card), "dense", index_root=tmp_path / "indexes").run_key(CORPUS)["mode"] == "dense"


@pytest.mark.jvm
def test_int8_and_fp32_indexes_are_not_reused_for_each_other(tmp_path, tiny_bert_dir, monkeypatch):
    import json

    import retromae_ir.encode.corpus as corpus

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 32\n")
    calls = []
    original = corpus.encode_shard
    monkeypatch.setattr(corpus, "encode_shard", lambda *a, **k: calls.append(a[0].int8) or original(*a, **k))
    for int8 in (False, True, True, False):
        index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, int8=int8).build_index(
            CORPUS, "handful")
        assert json.loads((index_dir / "manifest.json").read_text())["int8"] is int8
    assert calls == [False, True, False]  # the second int8 build reused the int8 index, no other reuse


@pytest.mark.jvm
def test_an_index_without_lucene_searches_the_same_and_is_not_reused_where_lucene_is_wanted(tmp_path, tiny_bert_dir,
                                                                                            monkeypatch):
    """lucene=False (a host without Java) writes the faiss index and the OT store only; the exact searcher ranks the
    same as over the full index, and a retriever that builds Lucene indexes encodes again rather than reuse it."""
    import json

    import retromae_ir.encode.corpus as corpus

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 32\n")
    calls = []
    original = corpus.encode_shard
    monkeypatch.setattr(corpus, "encode_shard", lambda *a, **k: calls.append(1) or original(*a, **k))
    queries = {"q1": "first query text", "q2": "another query"}

    def build_and_search(lucene: bool, root: str):
        retriever = EncoderRetriever(str(card), index_root=tmp_path / root, threads=1, lucene=lucene, hits=5)
        return retriever.build_index(CORPUS, "handful"), retriever.retrieve(CORPUS, "handful", queries)

    bare, bare_run = build_and_search(False, "bare")
    assert not (bare / "sparse" / "index").exists() and not (bare / "sparse" / "collection").exists()
    assert (bare / "sparse" / "ot").is_dir()
    assert json.loads((bare / "manifest.json").read_text())["lucene"] is False
    full, full_run = build_and_search(True, "full")
    assert (full / "sparse" / "index").is_dir()
    assert bare_run == full_run and all(bare_run.values())
    assert len(calls) == 2
    build_and_search(False, "full")  # a full index serves a retriever that needs no Lucene
    assert len(calls) == 2
    build_and_search(True, "bare")  # the bare one is encoded again with its Lucene index
    assert len(calls) == 3 and (bare / "sparse" / "index").is_dir()


def test_an_index_of_a_weight_file_since_deleted_is_not_current(tmp_path, tiny_bert_dir):
    """The manifest names every weight file the index was built from: one gone (say projection.safetensors) makes
    the checkpoint another model, so the index is encoded again rather than reused."""
    import json

    from retromae_ir.encode.corpus import precision

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes")
    digests = retriever.source_digests(CORPUS)
    manifest = {"fingerprint": retriever.card.fingerprint(), "precision": precision(retriever.model),
                "encoding": ENCODING_VERSION, **digests}
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "manifest.json").write_text(json.dumps(manifest))
    assert retriever.index_is_current(tmp_path / "index", digests)
    unrecorded = {key: value for key, value in manifest.items() if key != "encoding"}  # written before the field
    for older in ({**manifest, "encoding": ENCODING_VERSION - 1}, unrecorded):  # older encoding code: encode again
        (tmp_path / "index" / "manifest.json").write_text(json.dumps(older))
        assert not retriever.index_is_current(tmp_path / "index", digests)
    manifest["projection.safetensors_sha256"] = "0" * 64
    (tmp_path / "index" / "manifest.json").write_text(json.dumps(manifest))
    assert not retriever.index_is_current(tmp_path / "index", digests)


def test_an_index_of_another_sparse_store_format_is_encoded_again(tmp_path, tiny_bert_dir):
    """Every search refuses a sparse store of another format; the drivers took such an index as current and never
    made it again (an exit-2 dead end until the user deleted it)."""
    import json

    from retromae_ir.encode.corpus import precision
    from retromae_ir.search.index import store_manifest_field

    card = tmp_path / "dupmae.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 8\nquery_k: 8\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes")
    digests = retriever.source_digests(CORPUS)
    manifest = {"fingerprint": retriever.card.fingerprint(), "precision": precision(retriever.model),
                "encoding": ENCODING_VERSION, "sparse_store": store_manifest_field(), **digests}
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "manifest.json").write_text(json.dumps(manifest))
    assert retriever.index_is_current(tmp_path / "index", digests)
    older = {**manifest, "sparse_store": {**store_manifest_field(), "version": store_manifest_field()["version"] - 1}}
    (tmp_path / "index" / "manifest.json").write_text(json.dumps(older))
    assert not retriever.index_is_current(tmp_path / "index", digests)


@pytest.mark.parametrize("how", ["dense-index", "by hand"])
def test_an_index_whose_dense_side_is_not_flat_is_refused_by_the_drivers(tmp_path, how):
    """The drivers cache runs under a key that names no faiss index: an index rebuilt as SQfp16 (by `encode
    dense-index`, or written over dense/index by hand, which the manifest does not say) was reused, and its float16
    runs cached and reported as the flat index's, beside flat runs reused. It is refused, naming the way back."""
    import faiss

    from retromae_ir.encode.dense_index import rebuild_dense
    from retromae_ir.encode.manifest import IndexMismatchError

    card = tmp_path / "handful.yaml"
    card.write_text(CARD)
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, hits=5)
    index = retriever.build_index(CORPUS, "handful")
    if how == "dense-index":
        rebuild_dense(index, "SQfp16")
        named = "SQfp16"
    else:
        flat = faiss.read_index(str(index / "dense" / "index"))
        other = faiss.index_factory(flat.d, "SQfp16", faiss.METRIC_INNER_PRODUCT)
        other.add(flat.reconstruct_n(0, flat.ntotal))
        faiss.write_index(other, str(index / "dense" / "index"))
        named = "a faiss index of type b'IxSQ'"
    assert dense_index_name(index) == named  # what eval/nq.py's table says (the manifest said nothing by hand)
    with pytest.raises(IndexMismatchError, match=rf"dense index is {re.escape(named)}, not the flat one .*remove "
                                                 r".*manifest.json and run again"):
        retriever.retrieve(CORPUS, "handful", {"q": "a query"})
    (index / "manifest.json").unlink()  # as the message says: merged again from the chunks, flat
    assert all(retriever.retrieve(CORPUS, "handful", {"q": "a query"}).values())
    assert (index / "dense" / "index").read_bytes()[:4] == b"IxFI"
    (index / "dense" / "index").unlink()  # a reusable manifest without its index: the dataset fails, named
    with pytest.raises(ValueError, match=r"dense/index is missing or unreadable .*the dense index is incomplete"):
        retriever.retrieve(CORPUS, "handful", {"q": "a query"})


def test_a_tokenizer_edited_in_place_is_encoded_again(tmp_path, tiny_bert_dir):
    """Same weights, same card, a tokenizer setting changed in the checkpoint folder: the same text now becomes
    other ids, so the old index is refused for search and encoded again (the digests used to cover weight files
    only, and the old index was searched with the new tokenizer's queries)."""
    import json

    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.search.index import HybridIndex

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {checkpoint}\nkind: cls-dense\ndims: 32\nmax_passage_length: 32\n")
    index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False).build_index(
        CORPUS, "handful")
    before = dense_vectors(index_dir)
    config = checkpoint / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    assert settings.get("do_lower_case", True)
    config.write_text(json.dumps({**settings, "do_lower_case": False}))
    with pytest.raises(IndexMismatchError, match="tokenizer_config.json differ"):
        HybridIndex(index_dir, str(card))
    EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False).build_index(
        CORPUS, "handful")
    assert not np.allclose(dense_vectors(index_dir), before)  # cased ids: other vectors


def test_unknown_weights_are_not_taken_for_other_weights(tmp_path, tiny_bert_dir, monkeypatch):
    """A hub name whose files are not in this host's cache has no digests ({}): that is not a change of weights,
    so an index built elsewhere is still searched; known, different digests are refused."""
    from retromae_ir.encode.cards import EncoderCard, load_card
    from retromae_ir.encode.manifest import IndexMismatchError, check_card

    card_file = tmp_path / "tiny.yaml"
    card_file.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    card = load_card(str(card_file))
    manifest = {"fingerprint": card.fingerprint(), "card": card.to_dict(), "weights": card.checkpoint_digests(),
                "encoding": ENCODING_VERSION}
    check_card(manifest, card, "idx")
    monkeypatch.setattr(EncoderCard, "checkpoint_digests", lambda self: {})
    check_card(manifest, card, "idx")
    monkeypatch.setattr(EncoderCard, "checkpoint_digests", lambda self: {"model.safetensors": "0" * 64})
    with pytest.raises(IndexMismatchError, match="other weights"):
        check_card(manifest, card, "idx")


def test_an_index_replaced_while_it_was_opened_is_an_error_not_a_search(tmp_path, tiny_bert_dir, monkeypatch):
    """Another process replaces the index folder (same name, other corpus) between the check under the lock and the
    opening: the search refuses instead of searching the other corpus's index."""
    import retromae_ir.search.exact_hybrid as exact

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1)
    queries = {"q1": "cells", "q2": "the sun"}
    assert retriever.retrieve(CORPUS, "handful", queries)["q1"]
    real_init = exact.ExactHybridSearcher.__init__

    def replaced_meanwhile(self, index_dir, *args, **kwargs):
        manifest = index_dir / "manifest.json"
        manifest.write_text(manifest.read_text().replace("}", ', "by": "another process"}', 1))
        real_init(self, index_dir, *args, **kwargs)

    monkeypatch.setattr(exact.ExactHybridSearcher, "__init__", replaced_meanwhile)
    with pytest.raises(RuntimeError, match="was replaced by another process while this one opened it"):
        retriever.retrieve(CORPUS, "handful", queries)


def test_weights_that_change_while_the_model_loads_are_refused(tmp_path, tiny_bert_dir, monkeypatch):
    """The index is checked against the checkpoint's files when opened, the model loaded later: a hub name whose
    loading downloads a newer revision (simulated: the folder trained again during from_card) would encode the
    queries with other weights than the documents'. The searcher checks again once the model is loaded."""
    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.search.exact_hybrid import ExactHybridSearcher

    from checkpoints import train_again_in_place

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {checkpoint}\nkind: cls-dense\ndims: 32\n")
    index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False,
                                 bf16=False).build_index(CORPUS, "handful")
    assert ExactHybridSearcher(index_dir, str(card), mode="dense", device="cpu").model  # unchanged: loads
    searcher = ExactHybridSearcher(index_dir, str(card), mode="dense", device="cpu")  # opened: files match
    loaded = EncoderModel.from_card.__func__

    def newer_revision_on_load(cls, *args, **kwargs):
        train_again_in_place(checkpoint)
        return loaded(cls, *args, **kwargs)

    monkeypatch.setattr(EncoderModel, "from_card", classmethod(newer_revision_on_load))
    with pytest.raises(IndexMismatchError, match="other weights"):
        searcher.batch_search(["cells"], ["q1"], k=2)


def test_queries_are_encoded_in_the_precision_of_the_index(tmp_path, tiny_bert_dir):
    """An index encoded under bf16 autocast is searched with bf16 queries when the searcher loads the card itself
    (it used to load fp32 whatever the documents were)."""
    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.corpus import encode_shard, merge
    from retromae_ir.search.exact_hybrid import ExactHybridSearcher

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    for bf16 in (True, False):
        model = EncoderModel.from_card(str(card), device="cpu", bf16=bf16)
        out = tmp_path / f"index-{bf16}"
        encode_shard(model, ["a", "b"], ["cells divide", "the sun"], out)
        merge(out, model.card, model.vocab)
        assert ExactHybridSearcher(out, str(card), mode="dense", device="cpu").model.bf16 is bf16


def test_a_model_given_in_another_precision_than_the_index_is_refused(tmp_path, tiny_bert_dir):
    """A loaded model handed to the searcher (or the OT-weight sweep) encodes the queries as it runs: bf16 queries
    over fp32 documents gave figures for a mix nobody chose. The searcher loading the card itself follows the
    index."""
    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.evaluate.sparse_weight import sweep_sparse_weight
    from retromae_ir.search.exact_hybrid import ExactHybridSearcher

    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 32\n")
    index_dir = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False,
                                 bf16=False).build_index(CORPUS, "handful")
    bf16 = EncoderModel.from_card(str(card), device="cpu", bf16=True)
    with pytest.raises(IndexMismatchError, match="was encoded in fp32, and the model given runs in bf16"):
        ExactHybridSearcher(index_dir, bf16)
    with pytest.raises(IndexMismatchError, match="was encoded in fp32"):
        sweep_sparse_weight(index_dir, bf16, {"q": "a query"}, {"q": {"d": 1}})
    assert ExactHybridSearcher(index_dir, str(card)).model.bf16 is False
    fp32 = EncoderModel.from_card(str(card), device="cpu", bf16=False)
    ExactHybridSearcher(index_dir, fp32)
    # a manifest written before its "precision" field says bf16 by its flag (it was read as fp32)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    del manifest["precision"]
    (index_dir / "manifest.json").write_text(json.dumps({**manifest, "bf16": True}))
    with pytest.raises(IndexMismatchError, match="was encoded in bf16, and the model given runs in fp32"):
        ExactHybridSearcher(index_dir, fp32)
    assert ExactHybridSearcher(index_dir, str(card)).model.bf16 is True


def test_weights_trained_again_while_loaded_are_not_recorded_as_the_encoders(tmp_path, tiny_bert_dir):
    """A checkpoint folder trained again while a suite holds the old model in memory: the old weights' vectors are
    recorded with the old weights' digests (taken at load), so they are not encoded as the folder's index (refused
    before encoding) and pre-encoded queries name the weights that made them."""
    from transformers import BertForMaskedLM

    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.encode.queries import encode_queries
    from retromae_ir.io import checkpoint_file_digests

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {checkpoint}\nkind: cls-dense\ndims: 32\n")
    loaded = checkpoint_file_digests(checkpoint)
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False)
    model = retriever.model  # the old weights, in memory

    retrained = BertForMaskedLM.from_pretrained(checkpoint)
    with torch.no_grad():
        retrained.bert.embeddings.word_embeddings.weight.mul_(2.0)
    retrained.save_pretrained(checkpoint)
    assert checkpoint_file_digests(checkpoint)["model.safetensors"] != loaded["model.safetensors"]

    with pytest.raises(IndexMismatchError, match="changed since this model was loaded from it"):
        retriever.build_index(CORPUS, "handful")
    assert not (tmp_path / "indexes" / "tiny" / "handful" / "manifest.json").exists()
    assert retriever.run_key(CORPUS)["model.safetensors_sha256"] == loaded["model.safetensors"]
    queries = json.loads(encode_queries(model, {"q1": "cells"}, tmp_path / "queries").read_text())
    assert queries["weights"]["model.safetensors"] == loaded["model.safetensors"]


def test_an_index_is_searched_with_the_model_held_when_both_are_the_old_weights(tmp_path, tiny_bert_dir):
    """Index and held model made from the same (old) files, the folder trained again since: the held model's
    queries match the index (searched); the card, which now means the new files, is refused."""
    from transformers import BertForMaskedLM

    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.search.exact_hybrid import ExactHybridSearcher

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "tiny.yaml"
    card.write_text(f"checkpoint: {checkpoint}\nkind: cls-dense\ndims: 32\n")
    retriever = EncoderRetriever(str(card), index_root=tmp_path / "indexes", threads=1, lucene=False)
    index_dir = retriever.build_index(CORPUS, "handful")
    retrained = BertForMaskedLM.from_pretrained(checkpoint)
    with torch.no_grad():
        retrained.bert.embeddings.word_embeddings.weight.mul_(2.0)
    retrained.save_pretrained(checkpoint)
    assert ExactHybridSearcher(index_dir, retriever.model, mode="dense").search("cells", k=3)
    with pytest.raises(IndexMismatchError, match="encoded with other weights .*model.safetensors differ"):
        ExactHybridSearcher(index_dir, str(card), mode="dense")
