"""DupMAE's OT max-pool at inference on an AVX2 CPU: one hand-written kernel (``ot_kernel.c``) that computes the
decoder's products and keeps each document's running max in its epilogue, never writing logits.

Why a kernel of our own: issue #12 asks for a DupMAE pass at 85% of the fp32 matmul ceiling, and no library route
for the head comes near it on an AVX2 CPU: oneDNN's pre-packed product on 256-row x 4,096-entry tiles, then an
``amax`` per document, ran at 0.82-0.93 of the ceiling where this kernel ran at 1.00-1.10 (1.13-1.28x; a DupMAE
pass about 10% faster; 2-core AVX2 EPYC, ``benchmarks/ot_kernel.py``, runs/ot-kernel/). It is a 6 x 16 register
block over the whole depth (384), vocabulary panels outermost so that a panel's weights stay in the L1 cache while
every row streams past, the panels split between threads (ctypes releases the GIL).

Where it runs: :func:`retromae_ir.encode.representation.max_pool_logits` asks :func:`fused_max_pool` first when
no tiling is asked for, and it takes encoding's decoder: a :class:`~retromae_ir.encode.packed_linear.PackedLinear`
(``--compile``) or an ``nn.Linear`` in inference mode (eager encoding; training's graph-less passes run under
``no_grad`` and keep the tiles, rounding as its graph pass does), fp32 rows, all finite, on a CPU whose PyTorch
capability is AVX2 exactly (:data:`CHOSEN_ON`). On an AVX-512 CPU oneDNN's AVX-512 kernels ran the head near the
ceiling already (0.95 on AMD's AVX-512 EPYC) and this kernel was not measured there, so the tiles stay. Without a
C compiler, on another architecture, or with ``RETROMAE_IR_OT_KERNEL=0``, the tiles run too; the reason is logged
once. The pooled logits equal the tiles' up to the products' summation order (tests/encode/test_fused_max_pool.py;
equal to the bit in runs/ot-kernel/).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import weakref
from pathlib import Path

import torch

from retromae_ir.c_library import avx2_missing, build_library, kernel_source, library_name, panels_of
from retromae_ir.encode.packed_linear import PackedLinear
from retromae_ir.io import cache_dir
from retromae_ir.kernel_threads import run_split

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("ot_kernel.c")
FLAGS = ("-O3", "-mavx2", "-mfma")
CACHE_PART = "kernels"
SWITCH_ENV = "RETROMAE_IR_OT_KERNEL"  # "0": never this kernel
CHOSEN_ON = ("AVX2",)  # where it replaces the tiled route (measured faster there; not measured on AVX-512)


@functools.cache
def kernel() -> ctypes.CDLL | None:
    """The compiled kernel (built into ``$RETROMAE_IR_CACHE/kernels`` on first use), or None where it cannot run
    here; why not is logged once."""
    reason = _unusable_here()
    if reason is None:
        source = kernel_source(SOURCE)
        try:
            path = build_library(source, cache_dir(CACHE_PART) / library_name("ot_kernel", source, FLAGS), FLAGS)
            library = ctypes.CDLL(str(path))
        except (OSError, ValueError) as error:  # FileNotFoundError (no compiler) is an OSError
            reason = f"it could not be built or loaded ({error})"
        else:
            _declare(library)
            logger.info("DupMAE's OT head runs on the fused AVX2 kernel %s", path)
            return library
    logger.info("DupMAE's OT head runs on oneDNN's tiles: the fused kernel is off because %s", reason)
    return None


def chosen_here() -> bool:
    """Whether DupMAE's OT head runs on this kernel in this process (for encoding's decoder, in fp32)."""
    return torch.backends.cpu.get_cpu_capability() in CHOSEN_ON and kernel() is not None


def _unusable_here() -> str | None:
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return f"{SWITCH_ENV}=0"
    return avx2_missing()


def _declare(library: ctypes.CDLL) -> None:
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    library.ot_max_pool.argtypes = [pointer, size, size, pointer, size, size, pointer, pointer, size]
    library.ot_max_pool.restype = None
    library.ot_kernel_mr.restype = library.ot_kernel_nr.restype = ctypes.c_int


def fused_max_pool(transformed: torch.Tensor, decoder, owner: torch.Tensor, documents: int) -> torch.Tensor | None:
    """[documents, V]: max over each document's rows of ``decoder(transformed)`` (``owner``: the document of each
    row, documents in order; a document without rows gets -inf), or None where this kernel does not apply (see the
    module's docstring), and the caller's tiled route runs instead."""
    encoding = isinstance(decoder, PackedLinear) or (type(decoder) is torch.nn.Linear
                                                     and torch.is_inference_mode_enabled())
    fp32 = transformed.dtype == decoder.weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    if not (encoding and fp32 and transformed.device.type == "cpu" and chosen_here()):
        return None
    rows, depth = transformed.shape
    owner = owner.to(torch.int64).contiguous()
    _check_shapes(rows, depth, decoder, owner, documents)  # the kernel trusts them: an error here, not a stray write
    library = kernel()
    mr, nr = library.ot_kernel_mr(), library.ot_kernel_nr()
    panels, weight_finite = _weight_panels(decoder, nr)
    # a NaN or an infinity: the tiled route's amax keeps a NaN, where the kernel's max could drop it
    if not (weight_finite and bool(torch.isfinite(transformed).all())):
        return None
    packed_rows = panels_of(transformed, mr)
    stride = panels.shape[0] * nr
    out = torch.full((documents, stride), float("-inf"))
    args = (packed_rows.data_ptr(), rows, depth, panels.data_ptr())
    tail = (owner.data_ptr(), out.data_ptr(), stride)
    run_split(lambda begin, end: library.ot_max_pool(*args, begin, end, *tail), panels.shape[0],
              torch.get_num_threads())
    pooled = out[:, :decoder.out_features]
    return pooled + decoder.bias if decoder.bias is not None else pooled.contiguous()


def _check_shapes(rows: int, depth: int, decoder, owner: torch.Tensor, documents: int) -> None:
    if depth != decoder.in_features:
        raise ValueError(f"rows of width {depth} for a decoder of {decoder.in_features} inputs")
    if owner.shape != (rows,):
        raise ValueError(f"owner has shape {tuple(owner.shape)}, not one document for each of the {rows} rows")
    if rows and not (0 <= int(owner.min()) and int(owner.max()) < documents):
        raise ValueError(f"owner names documents {int(owner.min())}-{int(owner.max())}, outside 0-{documents - 1}")


_PANELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weight_panels(decoder, width: int) -> tuple[torch.Tensor, bool]:
    """The decoder's weight in the kernel's panels, and whether every weight is finite. Kept with the decoder while
    its weight is the same tensor at the same version: an optimizer step between two encodings (fine-tuning's
    mining, an evaluation mid-training) changes the weight in place, and panels of the old weight would give the
    old model's vectors without a word. (A write through ``.data`` bumps no version; nothing here writes so.) A
    weight without a version counter (made in inference mode) is packed again every call."""
    weight = decoder.weight
    try:
        version = weight._version
    except RuntimeError:  # an inference tensor has no version counter
        return panels_of(weight.detach(), width), bool(torch.isfinite(weight).all())
    held = _PANELS.get(decoder)
    if held is None or held[0] is not weight or held[1:3] != (version, width):  # held[0]: the tensor, kept alive
        panels = panels_of(weight.detach(), width)
        held = _PANELS[decoder] = (weight, version, width, panels, bool(torch.isfinite(weight).all()))
    return held[3], held[4]
