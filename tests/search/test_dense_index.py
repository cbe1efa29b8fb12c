"""`encode dense-index`: the flat dense index rebuilt as a faiss.index_factory index, recorded in the manifest."""
from __future__ import annotations

import json
import logging
import shutil

import faiss
import numpy as np
import pytest

from retromae_ir.encode.__main__ import main
from retromae_ir.encode.dense_index import rebuild_dense
from retromae_ir.encode.manifest import IndexMismatchError, read_manifest, verify_files
from retromae_ir.search import BruteForceScorer, ExactHybridSearcher, HybridIndex


@pytest.fixture
def index_copy(handful, tmp_path):
    copy = tmp_path / "index"
    shutil.copytree(handful[1], copy, ignore=shutil.ignore_patterns(".work"))
    return copy


def test_sqfp16_by_the_cli_is_recorded_verified_and_searched_at_float16(handful, index_copy, caplog):
    from retromae_ir.encode import EncoderModel

    caplog.set_level(logging.INFO)  # the level the command sets up (in a process of its own)
    flat = HybridIndex(index_copy, handful[0]).dense.copy()
    assert main(["dense-index", "--index", str(index_copy), "--factory", "SQfp16"]) == 0
    manifest = read_manifest(index_copy)
    assert manifest["dense_index"] == "SQfp16" and "dense_index_trained_on" not in manifest  # nothing drawn
    assert verify_files(index_copy) == len(manifest["files"])  # the dense files' new checksums
    assert "flat dense index (6 x 384, memory-mapped) as SQfp16" in (index_copy / "dense-index.log").read_text()
    index = HybridIndex(index_copy, handful[0])
    assert isinstance(faiss.downcast_index(index.faiss_index), faiss.IndexScalarQuantizer)
    assert index.docids.take(np.arange(len(index))) == (handful[1] / "dense" / "docid").read_text().split()
    np.testing.assert_allclose(index.dense, flat, rtol=2 ** -10, atol=2 ** -24)
    assert np.array_equal(index.dense, index.dense.astype(np.float16))
    model = EncoderModel.from_card(handful[0], device="cpu", bf16=read_manifest(handful[1])["precision"] == "bf16")
    queries = model.encode_query([line.split("\t")[1] for line in handful[3].read_text().splitlines()])
    searched = ExactHybridSearcher(index_copy, model, candidates=1000).search_encoded(queries, 6)
    reference = BruteForceScorer(index).search(queries.dense, queries.sparse, 6)
    assert [[d for d, _ in hits] for hits in searched] == [[d for d, _ in hits] for hits in reference]


def test_an_ivf_index_is_trained_on_a_seeded_sample_and_keeps_its_nprobe(handful, index_copy):
    manifest = rebuild_dense(index_copy, "IVF2,Flat", train_size=4, nprobe=2, seed=3)
    assert [manifest[f"dense_index{field}"] for field in ("", "_trained_on", "_seed", "_nprobe")] == \
        ["IVF2,Flat", 4, 3, 2]
    ivf = faiss.extract_index_ivf(faiss.read_index(str(index_copy / "dense" / "index")))
    assert (ivf.nlist, ivf.nprobe, ivf.ntotal) == (2, 2, len(HybridIndex(handful[1], handful[0])))
    assert json.loads((index_copy / "manifest.json").read_text()) == manifest


@pytest.mark.parametrize("factory, nprobe, error, message", [
    ("Flat", None, ValueError, "flat already"),
    ("bogus", None, ValueError, r"faiss.index_factory\(\d+, 'bogus'\) fails: .*could not parse index string bogus"),
    ("SQfp16", 4, ValueError, "--nprobe is for an IVF index, not SQfp16"),
    ("L2norm,Flat", None, ValueError, "transforms the vectors before indexing them"),
])
def test_a_factory_it_cannot_build_is_refused_before_anything_changes(index_copy, factory, nprobe, error, message):
    before = {path: path.read_bytes() for path in index_copy.rglob("*") if path.is_file()}
    with pytest.raises(error, match=message):
        rebuild_dense(index_copy, factory, nprobe=nprobe)
    assert {path: path.read_bytes() for path in index_copy.rglob("*") if path.is_file()} == before


def test_a_flat_index_replaced_by_an_l2_one_is_not_rebuilt(index_copy):
    """An IndexFlatL2 written over dense/index by hand passed as flat and was rebuilt as inner product."""
    flat = faiss.read_index(str(index_copy / "dense" / "index"))
    l2 = faiss.IndexFlatL2(flat.d)
    l2.add(flat.reconstruct_n(0, flat.ntotal))
    faiss.write_index(l2, str(index_copy / "dense" / "index"))
    with pytest.raises(IndexMismatchError, match="is not the flat inner-product index merge writes"):
        rebuild_dense(index_copy, "SQfp16")


def test_a_rebuilt_index_is_not_rebuilt_again(index_copy):
    rebuild_dense(index_copy, "SQfp16")
    with pytest.raises(IndexMismatchError, match="already SQfp16: rebuild it from the flat one .*merge"):
        rebuild_dense(index_copy, "SQ8")


@pytest.mark.parametrize("factory", ["SQfp16", "Flat", "HNSW4,Flat", "PQ2x4"])
def test_the_storage_is_reserved_once_and_never_copied_while_blocks_are_added(factory):
    """faiss grows an index's codes by doubling with a copy (twice the index at the last doubling): reserved for
    every row first, the storage stays where it was through every add."""
    from retromae_ir.encode.dense_index import reserve_codes

    vectors = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    index = faiss.index_factory(8, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    storage = faiss.downcast_index(index.storage) if factory.startswith("HNSW") else faiss.downcast_index(index)
    reserve_codes(index, len(vectors))
    places = set()
    for start in range(0, 300, 7):
        index.add(vectors[start:start + 7])
        places.add(int(storage.codes.data()))
    assert len(places) == 1 and index.ntotal == 300
    assert storage.codes.size() == 300 * storage.code_size
    fresh = faiss.index_factory(8, factory, faiss.METRIC_INNER_PRODUCT)
    fresh.train(vectors)
    fresh.add(vectors)
    assert [found.tolist() for found in index.search(vectors[:3], 4)] == \
        [found.tolist() for found in fresh.search(vectors[:3], 4)]


def test_a_rebuild_that_fails_leaves_the_flat_index_and_its_manifest(index_copy, monkeypatch):
    """The manifest was unlinked before the new index was written: a full disk then left an intact flat index
    that every search refused (no manifest). Now it goes last, just before the new folder replaces the old."""
    before = {path: path.read_bytes() for path in index_copy.rglob("*") if path.is_file()}

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(faiss, "write_index", disk_full)
    with pytest.raises(OSError, match="No space left"):
        rebuild_dense(index_copy, "SQfp16")
    assert {path: path.read_bytes() for path in index_copy.rglob("*") if path.is_file()} == before


def test_the_rebuild_reserves_the_storage_before_its_first_add(index_copy, monkeypatch):
    import retromae_ir.encode.dense_index as dense_index

    reserved = []
    real = dense_index.reserve_codes
    monkeypatch.setattr(dense_index, "reserve_codes",
                        lambda index, rows: reserved.append((index.ntotal, rows)) or real(index, rows))
    rebuild_dense(index_copy, "SQfp16")
    assert reserved == [(0, 6)]
