"""A linear layer with its weight pre-packed for oneDNN, for inference on a CPU outside a compiled graph."""
from __future__ import annotations

import torch


class PackedLinear(torch.nn.Module):
    """An inference copy of an ``nn.Linear`` with its weight pre-packed for oneDNN: the kernel inductor's freezing
    gives compiled linear layers, for a layer run outside the compiled graph (DupMAE's 30,522-way decoder, fed
    the ordinary tokens' packed rows). 2.8x ``F.linear``'s GFLOP/s at [137, 384] x [384, 30522] on AMD's AVX-512
    EPYC (468 against 166, fp32, 2 threads, ``benchmarks/gemm_routes.py``). The packed copy does not follow later
    changes to the original weight. Inputs in another precision (bf16 autocast) take ``F.linear`` in that
    precision, as eager does.

    The weight is packed on first use, whole for :meth:`forward` and per slice of outputs for
    :meth:`column_tiles` (what the OT max-pool runs), so a layer used one way holds one packed copy."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight.detach(), persistent=False)  # shared, not copied
        self.register_buffer("bias", None if bias is None else bias.detach().clone(), persistent=False)
        self._packed: torch.Tensor | None = None
        self._tiles: dict[int, list[PackedLinear]] = {}
        self._casts: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor | None]] = {}

    @classmethod
    def of(cls, linear: torch.nn.Linear) -> "PackedLinear":
        return cls(linear.weight, linear.bias)

    @staticmethod
    def available(device: torch.device) -> bool:
        return device.type == "cpu" and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                                                         "_reorder_linear_weight")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.weight.dtype:  # bf16 autocast: aten's bf16 linear, as eager runs it (oneDNN's own)
            return torch.nn.functional.linear(x, *self._cast(x.dtype))
        if self._packed is None:
            with torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, None)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")

    def column_tiles(self, size: int) -> list["PackedLinear"]:
        """The layer as consecutive layers of ``size`` outputs each (the last one may be narrower), each packed
        on its own; built once per ``size``."""
        if size not in self._tiles:
            slices = output_slices(self.weight, self.bias, size)
            self._tiles[size] = [PackedLinear(weight, bias) for weight, bias in slices]
        return self._tiles[size]

    def _cast(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias in ``dtype``, cast once (a cast per call of a 30,522-row weight cost more than the
        product it feeds)."""
        if dtype not in self._casts:
            self._casts[dtype] = (self.weight.to(dtype), None if self.bias is None else self.bias.to(dtype))
        return self._casts[dtype]


def output_slices(weight: torch.Tensor, bias: torch.Tensor | None, size: int) -> list[tuple]:
    """(weight, bias) of a linear layer's consecutive slices of ``size`` outputs (the last may be narrower)."""
    weights = weight.split(size)
    return list(zip(weights, [None] * len(weights) if bias is None else bias.split(size)))
