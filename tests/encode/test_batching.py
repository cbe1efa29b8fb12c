"""Forward-pass batches: longest first, capped by documents and (on a CPU) by tokens; the cap from the cache."""
import numpy as np
import pytest
import torch

from retromae_ir import hardware
from retromae_ir.encode import batching


def batches(lengths, batch_size, max_tokens=None):
    return [rows.tolist() for rows in batching.length_batches(lengths, batch_size, max_tokens)]


def test_batches_go_longest_first_and_keep_ties_in_input_order():
    assert batches([3, 9, 5, 9, 1], 2) == [[1, 3], [2, 0], [4]]


def test_the_token_cap_shrinks_batches_of_long_documents_only():
    # 10 tokens a pass: two 5-token documents fit, one 9-token document goes alone, short ones fill to batch_size
    assert batches([9, 5, 5, 5, 2, 2, 2, 2, 2], 4, 10) == [[0], [1, 2], [3, 4], [5, 6, 7, 8]]


def test_a_document_longer_than_the_cap_still_gets_a_batch():
    assert batches([50, 40], 8, 16) == [[0], [1]]


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(ValueError, match="batch size must be at least 1, got 0"):
        batches([1, 2], 0)


def test_the_cpu_budget_is_half_the_cache_over_the_widest_row():
    assert batching.cpu_token_budget(1536, 32 << 20) == 2730  # MiniLM's FFN, 32 MiB L3: 16 MiB / (1536 * 4)
    assert batching.cpu_token_budget(1536, 32 << 20, element_bytes=2) == 5461  # bf16 activations
    assert batching.cpu_token_budget(1536, 16 << 20) == 1365
    # a VM's sysfs may report the host socket's L3 (480 MiB on a 2-core Xeon VM): counted as at most 32 MiB
    assert batching.cpu_token_budget(1536, 480 << 20) == 2730
    assert batching.cpu_token_budget(1536, None) == 2730  # unknown cache: the 32 MiB it was measured on
    assert batching.cpu_token_budget(3072, 1 << 20) == batching.MIN_TOKENS  # a small cache: the floor


def test_a_gpu_keeps_the_callers_batch_size(monkeypatch):
    monkeypatch.setattr(batching, "last_level_cache_bytes", lambda: 32 << 20)
    assert batching.token_budget(torch.device("cuda"), 1536) is None
    assert batching.token_budget(torch.device("cpu"), 1536) == 2730


def write_cache(folder, index, level_type, level, size):
    entry = folder / f"index{index}"
    entry.mkdir(parents=True)
    (entry / "type").write_text(f"{level_type}\n")
    (entry / "level").write_text(f"{level}\n")
    (entry / "size").write_text(f"{size}\n")


def last_level(folder, monkeypatch):
    monkeypatch.setattr(hardware, "CPU_CACHE", folder)
    hardware.last_level_cache_bytes.cache_clear()
    try:
        return hardware.last_level_cache_bytes()
    finally:
        hardware.last_level_cache_bytes.cache_clear()


def test_the_last_level_cache_is_the_largest_shared_data_or_unified_one(tmp_path, monkeypatch):
    write_cache(tmp_path / "x86", 0, "Data", 1, "48K")
    write_cache(tmp_path / "x86", 1, "Instruction", 3, "64M")  # not data: never the answer
    write_cache(tmp_path / "x86", 2, "Unified", 2, "1024K")
    write_cache(tmp_path / "x86", 3, "Unified", 3, "32768K")
    assert last_level(tmp_path / "x86", monkeypatch) == 32 << 20
    write_cache(tmp_path / "mega", 0, "Unified", 3, "1M")
    write_cache(tmp_path / "mega", 1, "Unified", 4, "12582912")  # plain bytes
    assert last_level(tmp_path / "mega", monkeypatch) == 12 << 20
    write_cache(tmp_path / "l2-only", 0, "Data", 1, "64K")  # a private L2 is not the cache the cap is about
    write_cache(tmp_path / "l2-only", 1, "Unified", 2, "1024K")
    write_cache(tmp_path / "l2-only", 2, "Unified", 3, "")  # an empty size is skipped
    assert last_level(tmp_path / "l2-only", monkeypatch) is None
    assert last_level(tmp_path / "absent", monkeypatch) is None


def test_a_token_cap_leaves_the_vectors_unchanged(tiny_bert_dir, tmp_path, monkeypatch):
    from retromae_ir.encode import EncoderModel

    card = tmp_path / "card.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 8\nquery_k: null\nscale: 100\n"
                    "max_query_length: 16\nmax_passage_length: 32\n")
    model = EncoderModel.from_card(card, device="cpu")
    texts = ["the cat sat on the mat", "protein folding in yeast cells under heat stress", "a b c", "x y"]
    assert model.max_batch_tokens == batching.token_budget(torch.device("cpu"), 64)  # the tiny model's FFN width
    model.bf16 = True
    assert model.max_batch_tokens == batching.token_budget(torch.device("cpu"), 64, element_bytes=2)
    model.bf16 = False
    whole = model.encode_passage(texts, batch_size=4)
    model.batch_tokens = 12  # one or two rows a pass
    seen = []
    monkeypatch.setattr(type(model), "represent", lambda self, ids, mask, k, inner=type(model).represent:
                        seen.append(ids.shape) or inner(self, ids, mask, k))
    capped = model.encode_passage(texts, batch_size=4)
    assert all(rows * length <= 12 or rows == 1 for rows, length in seen) and len(seen) == 3
    np.testing.assert_allclose(capped.dense, whole.dense, atol=1e-5)
    np.testing.assert_allclose(capped.sparse.toarray(), whole.sparse.toarray(), atol=1e-5)
