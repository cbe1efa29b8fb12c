"""The packed, vocabulary-tiled OT max-pool (#12 item 2) against the naive [chunk, L, V] computation it replaces:
same values, same gradients, on a tiny random BERT MLM with padded batches and a text of special tokens only."""
import pytest
import torch

from retromae_ir.encode.packed_linear import PackedLinear
from retromae_ir.encode.representation import (activation, max_pool_logits, max_pool_logits_naive, row_tiles,
                                               split_lm_head)

# the mlm and batch fixtures: tests/encode/conftest.py


@pytest.mark.parametrize("packed", [False, True], ids=["F.linear", "PackedLinear"])
@pytest.mark.parametrize("rows, vocab_tile", [(None, 4096), (1024, 4096), (7, 1000), (1, 30522), (5, 100000)])
def test_equals_the_naive_max_pool(mlm, batch, rows, vocab_tile, packed):
    """1000 does not divide V = 30522; 7 rows cut documents across row tiles (tiles of one document and of
    several); 1 row is one token a tile; ``packed``: the decoder pre-packed for oneDNN, as --compile runs it."""
    import copy

    hidden, mask = batch
    head = mlm.cls
    if packed:
        if not PackedLinear.available(hidden.device):
            pytest.skip("this torch has no oneDNN weight packing")
        head = copy.deepcopy(mlm.cls)
        head.predictions.decoder = PackedLinear.of(head.predictions.decoder)
    assert split_lm_head(head) is not None  # the tiled path, not the whole-head fallback
    with torch.no_grad():
        reference = max_pool_logits_naive(mlm.cls, hidden, mask)
        pooled = max_pool_logits(head, hidden, mask, rows=rows, vocab_tile=vocab_tile)
    assert pooled.shape == reference.shape == (len(hidden), mlm.config.vocab_size)
    assert torch.isneginf(pooled[1]).all() and torch.isfinite(pooled[[0, 2, 3]]).all()
    torch.testing.assert_close(pooled, reference, atol=1e-5, rtol=1e-5)


def test_row_tiles_are_full_height_and_name_each_documents_rows():
    # rows 0-2 document 0, 3-6 document 1, 7-8 document 2, 9-18 document 3, 19 document 4; ranges of 5
    assert row_tiles([3, 4, 2, 10, 1], 5) == [(0, 5, ((0, 0, 3), (1, 3, 5))),
                                              (5, 10, ((1, 5, 7), (2, 7, 9), (3, 9, 10))),
                                              (10, 15, ((3, 10, 15),)), (15, 20, ((3, 15, 19), (4, 19, 20)))]
    assert row_tiles([1, 2, 0, 2, 7], 5) == [(0, 5, ((0, 0, 1), (1, 1, 3), (3, 3, 5))), (5, 10, ((4, 5, 10),)),
                                             (10, 12, ((4, 10, 12),))]  # a document without rows has no segment
    assert row_tiles([], 4) == row_tiles([0, 0], 4) == [(0, 0, ())]  # no rows: one empty range


@pytest.mark.parametrize("loop", [0, 1000])
def test_both_reductions_of_a_tile_give_the_maxima(mlm, batch, monkeypatch, loop):
    """SEGMENT_LOOP 0: every tile by index_reduce_; 1000: every document's part by its own amax."""
    from retromae_ir.encode import representation

    monkeypatch.setattr(representation, "SEGMENT_LOOP", loop)
    hidden, mask = batch
    with torch.no_grad():
        reference = max_pool_logits_naive(mlm.cls, hidden, mask)
        pooled = max_pool_logits(mlm.cls, hidden.repeat(8, 1, 1), mask.repeat(8, 1), rows=50, vocab_tile=1000)
    torch.testing.assert_close(pooled, reference.repeat(8, 1), atol=1e-5, rtol=1e-5)


def test_a_batch_without_any_ordinary_token_pools_to_minus_infinity(mlm, batch):
    hidden, mask = batch
    pooled = max_pool_logits(mlm.cls, hidden, torch.zeros_like(mask))
    assert pooled.shape == (len(hidden), mlm.config.vocab_size) and torch.isneginf(pooled).all()
    assert (activation("log1p_relu")(pooled) == 0).all()


def test_gradients_equal_the_naive_ones(mlm, batch):
    """Fine-tuning backpropagates through the same function: gradients to the hidden states and to every head
    parameter (the decoder weight is the tied word embedding) match the naive computation's."""
    hidden, mask = batch
    torch.manual_seed(3)
    upstream = torch.randn(len(hidden), mlm.config.vocab_size)
    params = [p for p in mlm.cls.parameters() if p.requires_grad]
    grads = []
    for pool in (max_pool_logits_naive, lambda *a: max_pool_logits(*a, rows=7, vocab_tile=1000)):
        leaf = hidden.clone().requires_grad_(True)
        loss = (activation("log1p_relu")(pool(mlm.cls, leaf, mask)) * upstream).sum()
        grads.append(torch.autograd.grad(loss, [leaf, *params]))
    assert grads[0][0][1].abs().sum() == 0  # the text without ordinary tokens gets no gradient
    assert grads[1][0].abs().sum() > 0
    for new, old in zip(*grads[::-1]):  # float32 summation order: tolerance relative to the gradient's scale
        torch.testing.assert_close(new, old, atol=1e-5 * max(1.0, old.abs().max().item()), rtol=1e-4)


def test_int8_and_other_heads_take_the_whole_head_path(mlm, batch):
    """An int8-quantised decoder (no plain nn.Linear) and a head that is not BERT's run whole on packed rows.
    Dynamic int8 scales activations per input tensor, and packed rows are not padded ones: close, not equal."""
    import copy
    import warnings

    from torch.ao.quantization import quantize_dynamic

    hidden, mask = batch
    with torch.no_grad():
        with warnings.catch_warnings():  # torch marks eager-mode quantisation deprecated
            warnings.simplefilter("ignore")
            quantized = quantize_dynamic(copy.deepcopy(mlm.cls), {torch.nn.Linear}, dtype=torch.qint8)
        assert split_lm_head(quantized) is None
        pooled = max_pool_logits(quantized, hidden, mask, rows=3, vocab_tile=4096)
        reference = max_pool_logits_naive(quantized, hidden, mask)
        assert torch.isneginf(pooled[1]).all() and torch.isneginf(reference[1]).all()
        finite = pooled[[0, 2, 3]]
        assert (finite - reference[[0, 2, 3]]).abs().max() < 0.05 * finite.abs().max()
        other = torch.nn.Sequential(torch.nn.Linear(hidden.shape[-1], 50), torch.nn.Tanh())
        assert split_lm_head(other) is None
        pooled = max_pool_logits(other, hidden, mask, rows=2)
        torch.testing.assert_close(pooled, max_pool_logits_naive(other, hidden, mask), atol=1e-6, rtol=1e-6)
        assert torch.isneginf(pooled[1]).all()


def test_bf16_autocast_keeps_the_dtype_and_stays_close(mlm, batch):
    hidden, mask = batch
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        reference = max_pool_logits_naive(mlm.cls, hidden, mask)
        pooled = max_pool_logits(mlm.cls, hidden, mask, rows=7, vocab_tile=1000)
    assert pooled.dtype == reference.dtype == torch.bfloat16
    assert torch.isneginf(pooled[1]).all()
    torch.testing.assert_close(pooled.float(), reference.float(), atol=0.05, rtol=0.02)


def test_bad_tile_sizes_are_refused(mlm, batch):
    hidden, mask = batch
    for sizes in ({"vocab_tile": 0}, {"rows": 0}, {"rows": -3}):
        with pytest.raises(ValueError, match="positive"):
            max_pool_logits(mlm.cls, hidden, mask, **sizes)


def test_an_accelerator_in_inference_mode_takes_the_padded_route():
    """The route is chosen by device and mode: the packed, tiled one on a CPU (and any device it was not measured
    on) and in training, graph-less passes (``no_grad``: the gradient cache's first, calibration) included; the
    padded per-chunk head on a CUDA GPU in inference mode, i.e. encoding (a stand-in with a CUDA device here)."""
    from types import SimpleNamespace

    from retromae_ir.encode.representation import padded_head_is_faster

    on_cuda = SimpleNamespace(device=torch.device("cuda"))
    on_cpu, unmeasured = torch.zeros(2, 3), torch.zeros(2, 3, device="meta")
    with torch.inference_mode():
        assert padded_head_is_faster(on_cuda)
        assert not padded_head_is_faster(on_cpu) and not padded_head_is_faster(unmeasured)
    with torch.no_grad():  # training's graph-less passes (the gradient cache's first): the graph pass's route
        assert not padded_head_is_faster(on_cuda)
    with torch.enable_grad():
        assert not padded_head_is_faster(on_cuda)


def test_the_padded_route_gives_the_tiled_values(mlm, batch, monkeypatch):
    """Where the padded route is taken (forced here on the CPU) it is the naive max-pool, equal to the tiled one;
    an explicit ``rows`` still asks for the tiled route."""
    import retromae_ir.encode.representation as representation

    hidden, mask = batch
    with torch.no_grad():
        tiled = max_pool_logits(mlm.cls, hidden, mask)
        monkeypatch.setattr(representation, "padded_head_is_faster", lambda hidden: True)
        calls = []
        monkeypatch.setattr(representation, "max_pool_logits_naive",
                            lambda *a, **k: calls.append(1) or max_pool_logits_naive(*a, **k))
        padded = max_pool_logits(mlm.cls, hidden, mask)
        assert calls == [1]
        max_pool_logits(mlm.cls, hidden, mask, rows=8)
        assert calls == [1]
    torch.testing.assert_close(padded, tiled, rtol=1e-5, atol=1e-5)


def _gradients(mlm, hidden, mask, pool, k=None):
    """Gradients of a fixed random loss on the top-k OT vector w.r.t. the hidden states and every head parameter."""
    from retromae_ir.encode.representation import top_k

    torch.manual_seed(3)
    upstream = torch.randn(hidden.shape[0], mlm.config.vocab_size)
    params = [p for p in mlm.cls.parameters() if p.requires_grad]
    leaf = hidden.clone().requires_grad_(True)
    loss = (top_k(activation("log1p_relu")(pool(mlm.cls, leaf, mask)).float(), k) * upstream).sum()
    return torch.autograd.grad(loss, [leaf, *params])


@pytest.mark.parametrize("k, elements", [(5, 1 << 24), (5, 1), (5, "two documents"), (None, 64)])
def test_top_k_gradients_equal_the_naive_ones(mlm, batch, monkeypatch, k, elements):
    """After Eq. 11's top-k only k entries a document get a gradient: the backward recomputes just those, in
    chunks of documents (``elements`` 1: one document a chunk; two documents a chunk, so a chunk starts mid-batch;
    with every entry and a tiny budget, many chunks)."""
    from retromae_ir.encode import representation

    hidden, mask = batch
    if elements == "two documents":
        elements = 2 * k * int(mask.sum(1).max())
    monkeypatch.setattr(representation._TiledMaxPool, "ELEMENTS", elements)
    reference = _gradients(mlm, hidden, mask, max_pool_logits_naive, k)
    tiled = _gradients(mlm, hidden, mask, lambda *a: max_pool_logits(*a, rows=7, vocab_tile=1000), k)
    assert tiled[0][1].abs().sum() == 0 and tiled[0][[0, 2, 3]].abs().sum() > 0
    for new, old in zip(tiled, reference):
        torch.testing.assert_close(new, old, atol=1e-5 * max(1.0, old.abs().max().item()), rtol=1e-4)


def test_bf16_autocast_gradients_stay_close(mlm, batch):
    """Under bf16 autocast the gradients keep their dtypes and point where the fp32 ones do, as closely as the naive
    path's bf16 gradients (bf16 rounding moves top-k choices and argmax ties, so directions are compared)."""
    hidden, mask = batch
    exact = _gradients(mlm, hidden, mask, max_pool_logits_naive)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = _gradients(mlm, hidden, mask, max_pool_logits_naive)
        tiled = _gradients(mlm, hidden, mask, lambda *a: max_pool_logits(*a, rows=7, vocab_tile=1000))
    for new, old, truth in zip(tiled, reference, exact):
        assert new.dtype == old.dtype
        cosine = torch.nn.functional.cosine_similarity
        new_cos = cosine(new.flatten().double(), truth.flatten().double(), dim=0)
        old_cos = cosine(old.flatten().double(), truth.flatten().double(), dim=0)
        assert new_cos > 0.99 and new_cos >= old_cos - 0.01


def test_ties_share_the_gradient_and_a_head_without_bias_works(mlm, batch):
    """Two identical positions in a document tie on every vocabulary entry: the gradient is split between them as
    the naive path splits it. The decoder without a bias takes the same path (no bias gradient to return)."""
    import copy

    hidden, mask = batch
    hidden = hidden.clone()
    hidden[0, 2] = hidden[0, 1]
    assert mask[0, 1] and mask[0, 2]
    head = copy.deepcopy(mlm.cls)
    head.predictions.decoder.bias = None
    assert split_lm_head(head) is not None
    for model in (mlm.cls, head):
        grads = []
        for pool in (max_pool_logits_naive, lambda *a: max_pool_logits(*a, rows=7, vocab_tile=1000)):
            leaf = hidden.clone().requires_grad_(True)
            pooled = pool(model, leaf, mask)
            (torch.where(torch.isfinite(pooled), pooled, 0) * torch.linspace(0, 1, pooled.shape[1])).sum().backward()
            grads.append(leaf.grad)
        torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(grads[1][0, 1], grads[1][0, 2])  # the tie is shared


def test_another_head_back_propagates_through_its_running_max(mlm, batch):
    hidden, mask = batch
    head = torch.nn.Sequential(torch.nn.Linear(hidden.shape[-1], 50), torch.nn.Tanh())
    grads = []
    for pool in (max_pool_logits_naive, lambda *a: max_pool_logits(*a, rows=2)):
        leaf = hidden.clone().requires_grad_(True)
        pooled = pool(head, leaf, mask)
        torch.where(torch.isfinite(pooled), pooled, 0).sum().backward()
        grads.append(leaf.grad)
    assert grads[1].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-5)
