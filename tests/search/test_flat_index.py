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


def test_a_row_that_is_not_finite_is_refused_with_its_number(tmp_path):
    vectors = np.ones((6, 4), np.float32)
    vectors[4, 2] = np.nan
    with pytest.raises(ValueError, match="row 4 is not finite"):
        with FlatIndexFile(tmp_path / "index", 4, 6) as index:
            index.add(vectors[:3])
            index.add(vectors[3:])


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


def _flat_file(path, vectors):
    with FlatIndexFile(path, vectors.shape[1], len(vectors)) as index:
        index.add(vectors)
    return read_index(path)


def _by_score_then_row(scores, rows):
    order = np.lexsort((rows, -scores), axis=-1)
    return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


@pytest.mark.parametrize("dims, queries", [(24, 5), (24, 64), (768, 5), (768, 64)])
@pytest.mark.parametrize("k", [1, 50, 2100, 2600])  # more than a block and than the rows less a block; than all rows
def test_a_scan_a_block_at_a_time_finds_what_faiss_finds_with_the_same_scores(tmp_path, dims, queries, k):
    """Blocks of 1,024 rows (the smallest) over 2,500 rows, the last block short: the same scores as faiss's search
    of the whole index by the same queries, bit for bit, and the same rows, up to the order of tied scores; k past
    the rows pads as faiss does; the rows' largest norm measured on the way. Duplicated rows make ties across
    blocks."""
    from retromae_ir.flat_index import FlatScan, blas_sized

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((2500, dims)).astype(np.float32)
    vectors[2400:2410] = vectors[10:20]  # the same scores in the first and the last block
    index = _flat_file(tmp_path / "index", vectors)
    scan = FlatScan(tmp_path / "index", dims, 2500, block_bytes=1)
    assert scan.block_rows == 1024 and scan.max_row_norm is None
    probe = rng.standard_normal((queries, dims)).astype(np.float32)
    probe[0] = vectors[15]
    for batch in (probe, blas_sized(probe)):  # faiss pair by pair, and on its BLAS route (768-d, 64 queries)
        found = tuple(part[:queries] for part in scan.search(batch, k))  # not the padding's all-tied zeros
        expected = tuple(part[:queries] for part in index.search(batch, k))
        assert found[0].shape == expected[0].shape == (queries, k)
        for mine, theirs in zip(_by_score_then_row(*found), _by_score_then_row(*expected)):
            np.testing.assert_array_equal(mine, theirs)
        assert set(found[1][0][:2].tolist()) == ({15} if k == 1 else {15, 2405})  # a tie: the lower row at the cut
        if k > 2500:
            assert (found[1][:, 2500:] == -1).all() and (found[0][:, 2500:] == -np.finfo(np.float32).max).all()
    assert scan.max_row_norm == pytest.approx(np.linalg.norm(vectors, axis=1).max(), rel=1e-6)


def test_queries_are_padded_to_faiss_s_blas_size_between_an_eighth_of_it_and_it():
    """faiss takes its BLAS path from 128,000 query floats (167 queries at 768-d); a scan pads 21 to 166 of them."""
    import faiss

    from retromae_ir.flat_index import blas_sized

    assert faiss.cvar.distance_compute_blas_threshold == 128000  # the figures below are this faiss's
    for count, padded in [(1, 1), (20, 20), (21, 167), (64, 167), (166, 167), (167, 167), (500, 500)]:
        queries = np.ones((count, 768), np.float32)
        out = blas_sized(queries)
        assert out.shape == (padded, 768)
        assert (out[:count] == 1).all() and (out[count:] == 0).all()


def test_a_scan_reads_each_block_once(tmp_path, monkeypatch):
    from retromae_ir.flat_index import FlatScan

    vectors = np.random.default_rng(6).standard_normal((4096, 64)).astype(np.float32)
    _flat_file(tmp_path / "index", vectors)
    scan = FlatScan(tmp_path / "index", 64, 4096, block_bytes=1)
    reads, read = [], FlatScan._read

    def counted(self, start, buffer):
        reads.append(start)
        return read(self, start, buffer)

    monkeypatch.setattr(FlatScan, "_read", counted)
    assert scan.search(vectors[:3], 1)[1][:, 0].tolist() == [0, 1, 2]
    assert reads == [0, 1024, 2048, 3072]


def test_a_scan_reads_single_rows_in_any_order_and_refuses_a_file_cut_short(tmp_path):
    """Rows asked in any order, repeated, in runs of neighbours (read in one pread) and alone: the file's bytes."""
    from retromae_ir.flat_index import FlatScan

    vectors = np.random.default_rng(11).standard_normal((300, 12)).astype(np.float32)
    _flat_file(tmp_path / "index", vectors)
    scan = FlatScan(tmp_path / "index", 12, 300)
    ids = np.array([299, 5, 6, 7, 5, 0, 150, 8, 299])
    np.testing.assert_array_equal(scan.read_rows(ids), vectors[ids])
    assert scan.read_rows(np.array([], np.int64)).shape == (0, 12)
    with open(tmp_path / "index", "r+b") as handle:
        handle.truncate(handle.seek(0, 2) - 4)
    with pytest.raises(IndexError, match=r"rows -1\.\.5 asked of .* which has 300"):
        scan.read_rows(np.array([5, -1]))
    with pytest.raises(ValueError, match="shorter than its 300 rows"):
        scan.read_rows(np.array([298, 299]))
    scan.close()
    scan.close()


def test_a_scan_refuses_a_file_that_is_not_the_flat_index_it_is_told(tmp_path):
    from retromae_ir.flat_index import FlatScan

    vectors = np.random.default_rng(7).standard_normal((100, 8)).astype(np.float32)
    _flat_file(tmp_path / "index", vectors)
    with pytest.raises(ValueError, match="not faiss's file of a flat inner-product index of 50 x 16"):
        FlatScan(tmp_path / "index", 16, 50)
    with pytest.raises(ValueError, match="of 99 x 8"):  # too few rows: refused before its 'header' is read
        FlatScan(tmp_path / "index", 8, 99)
    scan = FlatScan(tmp_path / "index", 8, 100)
    with open(tmp_path / "index", "r+b") as handle:  # cut short after it was opened
        handle.truncate(handle.seek(0, 2) - 8)
    with pytest.raises(ValueError, match="shorter than its 100 rows"):
        scan.search(vectors[:2], 5)


def test_a_scan_reads_the_file_it_opened_not_one_renamed_over_it(tmp_path):
    """As the mapped index does: a merge or dense-index renaming a new file over the path meanwhile changes
    neither (a scan reading the new file beside the old mapping would mix two indexes, exit 0)."""
    from retromae_ir.flat_index import FlatScan

    rng = np.random.default_rng(8)
    old, new = (rng.standard_normal((50, 8)).astype(np.float32) for _ in range(2))
    _flat_file(tmp_path / "index", old)
    scan = FlatScan(tmp_path / "index", 8, 50)
    _flat_file(tmp_path / "new", new)
    (tmp_path / "new").replace(tmp_path / "index")
    scores, rows = scan.search(new[:3], 5)
    np.testing.assert_array_equal(scan.read_rows(np.array([3, 1])), old[[3, 1]])
    np.testing.assert_array_equal(rows, np.argsort(-(new[:3] @ old.T), axis=1)[:, :5])
    np.testing.assert_allclose(scores, -np.sort(-(new[:3] @ old.T), axis=1)[:, :5], rtol=1e-6)


def test_the_searcher_scans_a_flat_index_larger_than_its_memory(handful, monkeypatch, caplog):
    """With less memory than the index file, ``HybridIndex`` searches by FlatScan, and the exact hybrid searcher
    returns the same hits, scores and all, in every mode."""
    import logging

    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.manifest import read_manifest
    from retromae_ir.flat_index import FlatScan
    from retromae_ir.search import ExactHybridSearcher

    bf16 = read_manifest(handful[1])["precision"] == "bf16"  # queries in the index's precision
    model = EncoderModel.from_card(handful[0], device="cpu", bf16=bf16)
    texts = [line.split("\t")[1] for line in handful[3].read_text().splitlines()]
    queries = model.encode_query(texts)
    size = (handful[1] / "dense" / "index").stat().st_size
    monkeypatch.setattr("retromae_ir.hardware.memory_available", lambda: size)
    for mode in ("hybrid", "dense"):
        mapped = ExactHybridSearcher(handful[1], model, mode=mode, candidates=3)
        assert mapped.index._scan is None
        monkeypatch.setattr("retromae_ir.hardware.memory_available", lambda: size - 1)
        with caplog.at_level(logging.INFO, logger="retromae_ir.flat_index"):
            scanned = ExactHybridSearcher(handful[1], model, mode=mode, candidates=3)
        assert isinstance(scanned.index._scan, FlatScan)
        assert "larger than the memory there is for it" in caplog.text
        assert scanned.search_encoded(queries, 6) == mapped.search_encoded(queries, 6)
        monkeypatch.setattr("retromae_ir.hardware.memory_available", lambda: size)


def test_over_a_scanned_index_batch_search_reads_the_file_once_for_many_queries(handful, monkeypatch):
    """Queries are encoded ``batch_size`` at a time as always, but searched together (one scan for the six here,
    not three), and the run is the one the mapped index gives, scores and all (the six encoded in one batch score
    differently in the last digits: a batch's composition moves the vectors by rounding)."""
    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.manifest import read_manifest
    from retromae_ir.search import ExactHybridSearcher

    model = EncoderModel.from_card(handful[0], device="cpu", bf16=read_manifest(handful[1])["precision"] == "bf16")
    qids, texts = zip(*(line.split("\t")[:2] for line in handful[3].read_text().splitlines()))
    mapped = ExactHybridSearcher(handful[1], model, candidates=3).batch_search(list(texts), list(qids), 6, 2)
    monkeypatch.setattr("retromae_ir.hardware.memory_available", lambda: 0)
    searcher = ExactHybridSearcher(handful[1], model, candidates=3)
    scans, search = [], searcher.index._scan.search
    monkeypatch.setattr(searcher.index._scan, "search", lambda queries, k: scans.append(len(queries)) or
                        search(queries, k))
    assert searcher.batch_search(list(texts), list(qids), 6, 2) == mapped
    assert scans == [6]


def test_a_flat_index_s_batch_is_padded_to_faiss_s_blas_size_and_its_top_scored_as_brute_force(handful, monkeypatch):
    """64 queries at 384-d, mapped or scanned: padded to 334 (the size faiss scores with BLAS), that padded search's
    scores bit for bit; their top rows then scored again row by row, which gives brute force's scores."""
    from retromae_ir.flat_index import blas_sized
    from retromae_ir.search import HybridIndex
    from retromae_ir.search.dense_top import dense_scores

    queries = np.random.default_rng(9).standard_normal((64, 384)).astype(np.float32)
    mapped = HybridIndex(handful[1], handful[0])
    padded = tuple(part[:64] for part in mapped.faiss_index.search(blas_sized(queries), 4))
    unpadded = mapped.faiss_index.search(queries, 4)
    assert blas_sized(queries).shape == (334, 384)
    assert not np.array_equal(padded[0], unpadded[0])  # the two routes round otherwise
    monkeypatch.setattr("retromae_ir.hardware.memory_available", lambda: 0)
    scanned = HybridIndex(handful[1], handful[0])
    assert scanned.scans_file and not mapped.scans_file
    assert (mapped.queries_per_search, scanned.queries_per_search) == (334, 4096)
    brute = dense_scores(mapped.dense, queries)
    for index in (scanned, mapped):
        for mine, theirs in zip(index.dense_search(queries, 4), padded):
            np.testing.assert_array_equal(mine, theirs)
        for q, (scores, rows) in enumerate(index.dense_top(queries, 4)):
            assert sorted(rows.tolist()) == sorted(np.argsort(-brute[q])[:len(rows)].tolist())
            np.testing.assert_array_equal(scores, brute[q][rows])


@pytest.mark.parametrize("scanned", [False, True])
@pytest.mark.parametrize("k", [1, 50])
def test_a_flat_index_s_dense_top_is_brute_force_s_mapped_or_scanned(tmp_path, scanned, k):
    """HybridIndex.dense_top over 2,500 rows at 768-d with copies in two faiss blocks, 64 queries (padded to 167,
    faiss's BLAS route), rows read through the mapping or by pread: each query's top k, cut by row order (docids
    in row order), and its scores are brute force's to the bit; the largest norm is the rows' own."""
    from retromae_ir.flat_index import FlatScan, flat_view
    from retromae_ir.search.brute_force import top_hits
    from retromae_ir.search.dense_top import dense_scores
    from retromae_ir.search.index import HybridIndex

    rng = np.random.default_rng(12)
    vectors = rng.standard_normal((2500, 768)).astype(np.float32)
    vectors[2400:2450] = vectors[100:150]
    queries = rng.standard_normal((64, 768)).astype(np.float32)
    queries[:20] = vectors[100:120] + 0.01 * rng.standard_normal((20, 768)).astype(np.float32)
    index = object.__new__(HybridIndex)
    index.faiss_index = _flat_file(tmp_path / "index", vectors)
    index._flat, index._norm = flat_view(index.faiss_index), None
    index._scan = FlatScan(tmp_path / "index", 768, 2500) if scanned else None
    docids = [f"d{row:04d}" for row in range(2500)]
    brute = dense_scores(vectors, queries)
    for q, (scores, rows) in enumerate(index.dense_top(queries, k)):
        assert top_hits(scores, docids, k, rows) == top_hits(brute[q], docids, k)
        if q < 20:
            assert {100 + q, 2400 + q} <= set(rows[scores == scores.max()].tolist())
    assert index._max_row_norm() == pytest.approx(np.linalg.norm(vectors, axis=1).max(), rel=1e-6)
