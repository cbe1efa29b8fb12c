"""The fused AVX2 OT max-pool kernel (retromae_ir/encode/ot_kernel.c) against a float64 reference and the tiled
oneDNN route it replaces, and the rules that choose it."""
import copy
import logging
import threading
import time

import pytest
import torch

from retromae_ir import c_library, kernel_threads
from retromae_ir.encode import fused_max_pool as fused
from retromae_ir.encode.packed_linear import PackedLinear
from retromae_ir.encode.representation import CPU_ROWS, max_pool_logits


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    """A cache of this module's own, where the first test builds the kernel and the others load it."""
    return tmp_path_factory.mktemp("kernel-cache")


@pytest.fixture
def runs_here(monkeypatch, kernel_cache):
    """The kernel built afresh into a temporary cache and chosen on any CPU that can run it (an AVX-512 CPU too,
    where the encoders would not choose it), or the test skipped where it cannot run."""
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(kernel_cache))
    monkeypatch.delenv(fused.SWITCH_ENV, raising=False)
    kernel = fused.kernel
    kernel.cache_clear()
    if kernel() is None:
        pytest.skip("the fused kernel cannot run here (no AVX2, not x86-64 or no C compiler)")
    monkeypatch.setattr(fused, "CHOSEN_ON", c_library.AVX2_CAPABILITIES)
    yield kernel_cache
    kernel.cache_clear()  # a test may have put a spy in its place


def decoder(vocab: int, depth: int, bias: bool = True, seed: int = 0) -> PackedLinear:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, depth, generator=generator) * 0.1
    return PackedLinear(weight, torch.randn(vocab, generator=generator) if bias else None)


def reference(rows: torch.Tensor, layer: PackedLinear, counts: list[int]) -> torch.Tensor:
    """float64 logits, max per document; -inf for a document without rows."""
    logits = rows.double() @ layer.weight.double().T + (0 if layer.bias is None else layer.bias.double())
    out, start = torch.full((len(counts), layer.out_features), float("-inf"), dtype=torch.float64), 0
    for document, count in enumerate(counts):
        if count:
            out[document] = logits[start:start + count].amax(0)
        start += count
    return out


def owners(counts: list[int]) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))


# rows not a multiple of the kernel's 6, vocabularies not a multiple of its 16, documents without rows (first, in
# the middle, last), one document, a batch of no rows at all
@pytest.mark.parametrize("counts, vocab, depth", [([5, 0, 13, 1, 0], 1000, 40), ([6], 16, 8), ([0, 0], 33, 384),
                                                  ([0, 7, 250, 3], 30522, 384)])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_the_float64_reference(runs_here, counts, vocab, depth, bias):
    torch.manual_seed(1)
    layer = decoder(vocab, depth, bias)
    rows = torch.randn(sum(counts), depth)
    pooled = fused.fused_max_pool(rows, layer, owners(counts), len(counts))
    expected = reference(rows, layer, counts)
    assert pooled.shape == (len(counts), vocab) and pooled.dtype == torch.float32 and pooled.is_contiguous()
    empty = torch.tensor(counts) == 0
    assert torch.isneginf(pooled[empty]).all() and torch.isfinite(pooled[~empty]).all()
    torch.testing.assert_close(pooled[~empty].double(), expected[~empty], atol=2e-5, rtol=1e-5)


def test_the_same_on_one_thread_and_on_several(runs_here):
    torch.manual_seed(2)
    layer, counts = decoder(2000, 64), [30, 1, 17]
    rows = torch.randn(sum(counts), 64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fused.fused_max_pool(rows, layer, owners(counts), len(counts))
        torch.set_num_threads(3)  # three ranges of panels, whatever the cores
        several = fused.fused_max_pool(rows, layer, owners(counts), len(counts))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, several)


def test_max_pool_logits_takes_it_for_a_packed_decoder_and_gives_the_tiled_values(runs_here, monkeypatch, mlm_head):
    """Encoding's packed decoder without a tiling asked for runs on the kernel; the tiled route (rows given) agrees
    to rounding and in every document's top 20."""
    head, hidden, mask = mlm_head
    library, calls = fused.kernel(), []
    kernel_call = library.ot_max_pool
    monkeypatch.setattr(library, "ot_max_pool", lambda *args: calls.append(args) or kernel_call(*args))
    with torch.inference_mode():
        pooled = max_pool_logits(head, hidden, mask)
        ran = len(calls)
        tiled = max_pool_logits(head, hidden, mask, rows=CPU_ROWS)
    assert ran > 0 and len(calls) == ran  # the rows given kept the second call off the kernel
    torch.testing.assert_close(pooled, tiled, atol=1e-5, rtol=1e-5)
    assert torch.equal(pooled.topk(20).indices.sort().values, tiled.topk(20).indices.sort().values)


def test_not_for_training_other_precisions_or_rows_that_are_not_finite(runs_here):
    layer, counts = decoder(100, 8), [3]
    rows = torch.randn(3, 8)
    linear = torch.nn.Linear(8, 100)  # training's decoder: its graph-less passes must round as its graph pass
    with torch.no_grad():
        assert fused.fused_max_pool(rows, linear, owners(counts), 1) is None
    with torch.inference_mode():  # eager encoding's
        assert fused.fused_max_pool(rows, linear, owners(counts), 1) is not None
    assert fused.fused_max_pool(rows.double(), layer, owners(counts), 1) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):  # fp32 rows under autocast: the tiles would run bf16
        assert fused.fused_max_pool(rows, layer, owners(counts), 1) is None
    broken = decoder(100, 8)
    broken.weight[7, 3] = float("inf")
    assert fused.fused_max_pool(rows, broken, owners(counts), 1) is None
    rows[1, 2] = float("nan")  # the tiled route's amax keeps the NaN; the kernel's max would drop it
    assert fused.fused_max_pool(rows, layer, owners(counts), 1) is None


def test_rows_that_are_not_contiguous(runs_here):
    layer, counts = decoder(300, 24), [4, 6]
    wide = torch.randn(24, 30)
    rows = wide[:, 3:13].T  # [10, 24], strided
    assert not rows.is_contiguous()
    pooled = fused.fused_max_pool(rows, layer, owners(counts), 2)
    torch.testing.assert_close(pooled.double(), reference(rows, layer, counts), atol=2e-5, rtol=1e-5)


def test_chosen_on_avx2_only(runs_here, monkeypatch):
    layer, rows = decoder(50, 8), torch.randn(4, 8)
    monkeypatch.setattr(fused, "CHOSEN_ON", ("AVX2",))
    for capability, chosen in [("AVX2", True), ("AVX512", False), ("DEFAULT", False)]:
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert (fused.fused_max_pool(rows, layer, owners([4]), 1) is not None) == chosen, capability


def test_off_by_the_switch_without_a_cpu_for_it_or_without_a_compiler(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path))
    caplog.set_level(logging.INFO, logger=fused.__name__)
    cases = [({fused.SWITCH_ENV: "0"}, "DEFAULT", f"{fused.SWITCH_ENV}=0"),
             ({}, "DEFAULT", "PyTorch's CPU capability here is DEFAULT, without AVX2"),
             ({"CC": "false"}, "AVX2", "it could not be built or loaded (false could not build")]
    for env, capability, reason in cases:
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        monkeypatch.setattr(c_library.platform, "machine", lambda: "x86_64")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        fused.kernel.cache_clear()
        caplog.clear()
        assert fused.kernel() is None
        assert f"runs on oneDNN's tiles: the fused kernel is off because {reason}" in caplog.text
        for name in env:
            monkeypatch.delenv(name)
    assert not list(tmp_path.rglob("*.so"))  # the failed build left nothing behind
    fused.kernel.cache_clear()


def test_another_architecture_never_builds_it(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path))
    monkeypatch.setattr(c_library.platform, "machine", lambda: "aarch64")
    caplog.set_level(logging.INFO, logger=fused.__name__)
    fused.kernel.cache_clear()
    try:
        assert fused.kernel() is None and "this is a aarch64 machine, not x86-64" in caplog.text
    finally:
        fused.kernel.cache_clear()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.fixture(scope="module")
def mlm_head(mlm, batch):
    """conftest's tiny BERT head with its decoder packed as encoding packs it, over its real hidden states."""
    head = copy.deepcopy(mlm.cls)
    head.predictions.decoder = PackedLinear.of(head.predictions.decoder)
    return (head, *batch)


def _pool_in_child(rows, layer, owner, queue):
    torch.set_num_threads(2)
    queue.put(fused.fused_max_pool(rows, layer, owner, 2).tolist())  # a tensor would go by a shared file


def test_a_forked_child_runs_it_on_threads_of_its_own(runs_here):
    """The parent's worker threads are not in a forked child: the child must not wait on them. (Tensors small
    enough for PyTorch's own operations to run on one thread: its OpenMP pool does not survive a fork either.)"""
    import multiprocessing

    layer, owner = decoder(500, 16), owners([9, 4])
    rows = torch.randn(13, 16)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        parent = fused.fused_max_pool(rows, layer, owner, 2)
        both = threading.Barrier(3)
        started = [kernel_threads.pool(2).submit(both.wait) for _ in range(2)]
        both.wait()  # both workers of the parent's pool run at once: the pool has started two threads
        for future in started:
            future.result()
        time.sleep(0.5)  # and both are idle again, counted as such by the pool the child inherits
    finally:
        torch.set_num_threads(threads)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pool_in_child, args=(rows, layer, owner, queue))
    child.start()
    child.join(60)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung and child.exitcode == 0
    assert torch.equal(torch.tensor(queue.get(timeout=10)), parent)


@pytest.mark.parametrize("width, owner, documents, message", [
    (9, [0, 0, 1], 2, "rows of width 9 for a decoder of 8 inputs"),
    (8, [0, 1], 2, r"owner has shape \(2,\), not one document for each of the 3 rows"),
    (8, [0, 1, 2], 2, "owner names documents 0-2, outside 0-1"),
    (8, [-1, 0, 0], 2, "owner names documents -1-0, outside 0-1")])
def test_shapes_the_kernel_would_read_or_write_past_are_refused(runs_here, width, owner, documents, message):
    with pytest.raises(ValueError, match=message):
        fused.fused_max_pool(torch.randn(3, width), decoder(40, 8), torch.tensor(owner), documents)


def test_a_weight_changed_in_place_is_packed_again(runs_here):
    """Fine-tuning mines with the model it trains: panels of the weight before an optimizer step would give the
    old model's vectors."""
    linear, owner = torch.nn.Linear(16, 200), owners([5])
    rows = torch.randn(5, 16)
    with torch.inference_mode():
        before = fused.fused_max_pool(rows, linear, owner, 1)
    with torch.no_grad():
        linear.weight.mul_(-2.0)  # in place, as an optimizer step
    with torch.inference_mode():
        after = fused.fused_max_pool(rows, linear, owner, 1)
    torch.testing.assert_close(after, (rows @ linear.weight.T + linear.bias).amax(0, keepdim=True))
    assert not torch.allclose(before, after)
