"""The flat index file written a chunk at a time, and indexes read memory-mapped."""
from __future__ import annotations

import faiss
import numpy as np
import pytest

from retromae_ir.flat_index import FLAT_IP, FlatIndexFile, read_index


def _chunks():
    vectors = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    return vectors, [vectors[start:start + 4] for start in range(0, 10, 4)]


def test_each_chunk_is_on_disk_before_the_next_is_read(tmp_path):
    """Nothing holds the index in memory: the file grows by a chunk's bytes as each chunk is added, and the whole
    file is what faiss writes for the same index."""
    vectors, chunks = _chunks()
    sizes = []
    with FlatIndexFile(tmp_path / "index", 6, 10) as index:
        for chunk in chunks:
            index.add(chunk)
            index._out.flush()
            sizes.append((tmp_path / "index").stat().st_size)
    assert np.diff(sizes).tolist() == [4 * 6 * 4, 2 * 6 * 4]
    reference = faiss.IndexFlatIP(6)
    reference.add(vectors)
    faiss.write_index(reference, str(tmp_path / "reference"))
    assert (tmp_path / "index").read_bytes() == (tmp_path / "reference").read_bytes()
    assert sizes[-1] == (tmp_path / "reference").stat().st_size
    assert (tmp_path / "index").read_bytes()[:4] == FLAT_IP  # what the drivers read to tell a flat index


@pytest.mark.parametrize("rows, message", [(11, "10 rows, the index was opened for 11"),
                                           (9, "more than the 9 rows")])
def test_another_count_of_rows_is_refused(tmp_path, rows, message):
    _, chunks = _chunks()
    with pytest.raises(ValueError, match=message):
        with FlatIndexFile(tmp_path / "index", 6, rows) as index:
            for chunk in chunks:
                index.add(chunk)


def test_vectors_of_another_width_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"vectors of shape \(2, 5\) for a 6-d index"):
        with FlatIndexFile(tmp_path / "index", 6, 2) as index:
            index.add(np.zeros((2, 5), np.float32))


def _mapped_files(address: int) -> list[str]:
    """The files mapped at ``address`` in this process (/proc/self/maps)."""
    found = []
    for line in open("/proc/self/maps"):
        fields = line.split()
        start, end = (int(value, 16) for value in fields[0].split("-"))
        if start <= address < end and len(fields) > 5:
            found.append(fields[5])
    return found


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping at ``address`` (/proc/self/smaps)."""
    inside = False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if "-" in fields[0] and ":" not in fields[0]:
            start, end = (int(value, 16) for value in fields[0].split("-"))
            inside = start <= address < end
        elif inside and fields[0] == "VmFlags:":
            return fields[1:]
    return []


@pytest.mark.parametrize("factory", ["Flat", "SQfp16", "IVF2,Flat"])
def test_an_index_is_read_with_its_vectors_mapped_and_searches_as_read_into_memory(tmp_path, factory):
    vectors = np.random.default_rng(2).standard_normal((64, 8)).astype(np.float32)
    built = faiss.index_factory(8, factory, faiss.METRIC_INNER_PRODUCT)
    built.train(vectors)
    built.add(vectors)
    faiss.write_index(built, str(tmp_path / "index"))
    mapped = read_index(tmp_path / "index")
    copied = faiss.read_index(str(tmp_path / "index"))
    assert [found.tolist() for found in mapped.search(vectors[:5], 7)] == \
        [found.tolist() for found in copied.search(vectors[:5], 7)]
    if factory != "IVF2,Flat":
        codes = faiss.downcast_index(mapped).codes
        assert _mapped_files(int(codes.data())) == [str(tmp_path / "index")]
        assert str(tmp_path / "index") not in _mapped_files(int(faiss.downcast_index(copied).codes.data()))
        assert "rr" not in _vm_flags(int(codes.data()))  # faiss maps for random access: read-ahead is put back


def test_an_index_with_a_transform_before_it_is_refused(tmp_path, handful):
    """``L2norm,Flat`` passed every check (inner product, the card's dimensions) and rescored candidates by their
    normalised reconstructions: cosine, not Eq. 12's inner product, with exit 0."""
    import shutil

    from retromae_ir.encode.manifest import IndexMismatchError
    from retromae_ir.search import HybridIndex

    vectors = np.random.default_rng(3).standard_normal((6, 384)).astype(np.float32)
    index = faiss.index_factory(384, "L2norm,Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    faiss.write_index(index, str(tmp_path / "transformed"))
    with pytest.raises(ValueError, match="applies a transform before its index"):
        read_index(tmp_path / "transformed")
    copy = tmp_path / "index"
    shutil.copytree(handful[1], copy, ignore=shutil.ignore_patterns(".work"))
    shutil.copyfile(tmp_path / "transformed", copy / "dense" / "index")
    with pytest.raises(IndexMismatchError, match="applies a transform before its index"):
        HybridIndex(copy, handful[0])


def test_the_searcher_reads_the_dense_vectors_from_the_mapped_index_file(handful):
    """``HybridIndex.dense`` is a view of the index file's pages, not of a copy in memory."""
    from retromae_ir.search import HybridIndex

    index = HybridIndex(handful[1], handful[0])
    assert _mapped_files(index.dense.__array_interface__["data"][0]) == [str(handful[1] / "dense" / "index")]
    assert index.dense.shape == (index.faiss_index.ntotal, index.faiss_index.d)
