"""A BERT transformer run on kernels of our own (``encode --compile kernels``): AVX2 products with their bias,
GELU, residual add and LayerNorm fused in (``bert_kernels.c``), and self-attention over each document's own tokens.

Why: issue #12 asks for a dense pass at 90% of the fp32 matmul ceiling. On the 2-core AVX2 EPYC, OpenVINO's graph
ran MiniLM's dense pass at 0.61-0.75 of it and inductor's at 0.60-0.72: their attention over 32-wide heads ran at
0.42-0.49 of the ceiling, and LayerNorm, GELU, adds and copies between the products took the rest, while a
hand-written 6 x 16 AVX2 product (DupMAE's fused OT head) ran at 1.00-1.10 of it. Here the batch's tokens are packed
without padding, every product is one such register block with its element-wise work done on the block in
registers, and attention computes each (document, head) pair's scores, softmax and weighted sum on 6-row blocks
that stay in the L1 cache. Only the embeddings (a gather and a LayerNorm) run in PyTorch. Measured there in the
fair order: the dense pass 0.73 of the ceiling, DupMAE 0.83, each the fastest fp32 route (openvino 0.72, 0.76);
the products at the ceiling alone, attention at 0.43-0.62 (docs/encoders.md, runs/compile-kernels/).

What it takes: transformers' BERT (``model_type`` "bert": MiniLM, BERT, RetroMAE's checkpoints) with absolute
positions, exact GELU, widths that are multiples of 16, in fp32, on an x86-64 CPU with AVX2 and FMA; anything else
is refused when the backbone is built, naming what differs. A [CLS]-pooled card's last layer trimmed to its first
position (:mod:`first_token`) stays trimmed. Inference only: the weights are copied into the kernels' layout.
Vectors equal eager's to rounding (tests/encode/test_kernel_backbone.py; measured in docs/encoders.md).
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import BaseModelOutput

from retromae_ir.c_library import avx2_missing, build_library, kernel_source, library_name, panels_of
from retromae_ir.encode.base import CompiledBackbone
from retromae_ir.encode.first_token import FirstTokenLayer, is_bert_layer
from retromae_ir.io import cache_dir

SOURCE = Path(__file__).with_name("bert_kernels.c")
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp")


@functools.cache
def kernels() -> ctypes.CDLL:
    """The compiled kernels (built into ``$RETROMAE_IR_CACHE/kernels`` on first use); ValueError saying why where
    they cannot run here (a user's choice of backend to change: the command exits 2 with that line)."""
    reason = avx2_missing()
    if reason is not None:
        raise ValueError(f"--compile kernels needs an x86-64 CPU with AVX2 and FMA: {reason}; use --compile "
                         f"openvino or inductor")
    source = kernel_source(SOURCE)
    try:
        path = build_library(source, cache_dir("kernels") / library_name("bert_kernels", source, FLAGS), FLAGS)
        library = ctypes.CDLL(str(path))
    except (OSError, ValueError) as error:
        raise ValueError(f"--compile kernels could not build or load its C kernels ({error}); use --compile "
                         f"openvino or inductor") from error
    pointer, size, number = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    library.bert_linear.argtypes = [pointer, size, size, size, pointer, size, pointer, ctypes.c_int,
                                    pointer, size, pointer, pointer, number, pointer, size, size, ctypes.c_int]
    library.bert_linear.restype = ctypes.c_int
    library.bert_attention.argtypes = [pointer, size, pointer, pointer, size, pointer, size, size, size,
                                       ctypes.c_int, pointer, size, ctypes.c_int]
    library.bert_attention.restype = ctypes.c_int
    library.bert_kernels_mr.restype = library.bert_kernels_nr.restype = ctypes.c_int
    return library


def check_supported(module: torch.nn.Module) -> None:
    """Refuse, naming what differs, a transformer these kernels would compute something else for."""
    config = module.config
    problems = []
    if config.model_type != "bert":
        problems.append(f"model_type {config.model_type!r} (BERT's only: other families place positions or "
                        f"normalise otherwise)")
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type {config.position_embedding_type!r}")
    if config.hidden_act != "gelu":
        problems.append(f"hidden_act {config.hidden_act!r} (exact GELU only)")
    heads = config.num_attention_heads
    for name, width in (("hidden_size", config.hidden_size), ("intermediate_size", config.intermediate_size),
                        ("head size", config.hidden_size // heads)):
        if width % 16:
            problems.append(f"{name} {width}, not a multiple of 16")
    layers = getattr(getattr(module, "encoder", None), "layer", None)
    if layers is None or not all(is_bert_layer(layer) or (isinstance(layer, FirstTokenLayer) and i == len(layers) - 1)
                                 for i, layer in enumerate(layers)):
        problems.append("layers that are not transformers' BertLayer")
    if problems:
        raise ValueError(f"--compile kernels runs BERT encoders only; this one has {'; '.join(problems)}: use "
                         f"--compile openvino or inductor")


def _pointer(tensor: torch.Tensor | None) -> int | None:
    return None if tensor is None else tensor.data_ptr()


class PackedProduct:
    """One linear layer (or several side by side, their weights' outputs stacked) in the kernels' panels."""

    def __init__(self, *linears: torch.nn.Linear, scales: tuple[float, ...] | None = None):
        """``scales``: a factor for each layer's outputs, folded into its weight and bias (attention's
        1 / sqrt(head size) into the queries)."""
        scales = scales or (1.0,) * len(linears)
        weight = torch.cat([linear.weight.detach().float() * scale for linear, scale in zip(linears, scales)])
        self.outputs, self.depth = weight.shape
        if self.outputs % kernels().bert_kernels_nr():
            raise ValueError(f"{self.outputs} outputs: the kernels take a multiple of {kernels().bert_kernels_nr()}")
        self.panels = panels_of(weight, kernels().bert_kernels_nr())
        self.bias = torch.cat([(linear.bias.detach().float() if linear.bias is not None
                                else torch.zeros(linear.out_features)) * scale
                               for linear, scale in zip(linears, scales)]).contiguous()

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, gelu: bool = False,
                 residual_norm: torch.nn.LayerNorm | None = None) -> torch.Tensor:
        """``x`` W^T + b into ``out`` (a new tensor when None), then GELU, or + ``out``'s old rows (the residual,
        read before they are written) and ``residual_norm``."""
        rows = self._check(x)
        if out is None:
            out = torch.empty(rows, self.outputs)
        elif out.shape != (rows, self.outputs) or out.dtype != torch.float32 or out.stride(1) != 1:
            raise ValueError(f"out must be fp32 [{rows}, {self.outputs}] with unit column stride, not "
                             f"{out.dtype} {list(out.shape)} of strides {out.stride()}")
        norm = residual_norm
        if norm is not None and tuple(norm.normalized_shape) != (self.outputs,):
            raise ValueError(f"a LayerNorm over {tuple(norm.normalized_shape)} after {self.outputs} outputs")
        self._run(x, out, out.stride(0), 0, gelu, out if norm is not None else None,
                  *((norm.weight, norm.bias, norm.eps) if norm is not None else (None, None, 0.0)))
        return out

    def heads(self, x: torch.Tensor, head_size: int) -> torch.Tensor:
        """``x`` W^T + b head-major: [outputs / head_size, rows, head_size] (the queries', keys' and values'
        heads, each head's rows one after another, as attention reads them)."""
        rows = self._check(x)
        if head_size % kernels().bert_kernels_nr() or self.outputs % head_size:
            raise ValueError(f"heads of {head_size} over {self.outputs} outputs: the kernels take heads of a multiple "
                             f"of {kernels().bert_kernels_nr()} that divide the outputs")
        out = torch.empty(self.outputs // head_size, rows, head_size)
        self._run(x, out, 0, head_size, False, None, None, None, 0.0)
        return out

    def _check(self, x: torch.Tensor) -> int:
        """The rows' count, after refusing what the kernel would misread: it reads fp32 rows on the CPU, each
        ``depth`` values one after another."""
        if (x.dim() != 2 or x.shape[1] != self.depth or x.stride(1) != 1 or x.stride(0) < self.depth
                or x.dtype != torch.float32 or x.device.type != "cpu"):
            raise ValueError(f"the kernel takes fp32 CPU rows of {self.depth} contiguous values, not {x.dtype} "
                             f"{list(x.shape)} of strides {x.stride()} on {x.device}")
        return x.shape[0]

    def _run(self, x, out, ldo, head_size, gelu, residual, gamma, beta, eps) -> None:
        failed = kernels().bert_linear(
            x.data_ptr(), x.stride(0), x.shape[0], self.depth, self.panels.data_ptr(), self.panels.shape[0],
            self.bias.data_ptr(), int(gelu), _pointer(residual), ldo, _pointer(gamma), _pointer(beta), eps,
            out.data_ptr(), ldo, head_size, torch.get_num_threads())
        if failed:
            raise MemoryError("a linear layer's kernel could not allocate its row buffer")


class KernelLayer:
    """One BertLayer on the kernels: every row, or (``first_only``: a :class:`FirstTokenLayer`) the keys and values
    of every row and the rest for each document's first."""

    def __init__(self, layer: torch.nn.Module):
        own = layer.attention.self
        self.first_only = isinstance(layer, FirstTokenLayer)
        self.heads, self.head_size = own.num_attention_heads, own.attention_head_size
        if self.first_only:
            self.query, self.key_value = PackedProduct(own.query, scales=(own.scaling,)), PackedProduct(own.key,
                                                                                                        own.value)
        else:
            self.query_key_value = PackedProduct(own.query, own.key, own.value, scales=(own.scaling, 1.0, 1.0))
        self.attention_output, self.attention_norm = PackedProduct(layer.attention.output.dense), \
            _norm(layer.attention.output.LayerNorm)
        self.intermediate = PackedProduct(layer.intermediate.dense)
        self.output, self.output_norm = PackedProduct(layer.output.dense), _norm(layer.output.LayerNorm)

    def __call__(self, hidden: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """``hidden`` [tokens, H] (documents one after another, ``starts`` their first rows and the end) -> the
        layer's output: [tokens, H], or [documents, H] (each document's first row) when ``first_only``; ``hidden``
        may be overwritten."""
        if self.first_only:
            keys, values = self.key_value.heads(hidden, self.head_size).split(self.heads)
            hidden = hidden[starts[:-1]].contiguous()
            queries = self.query.heads(hidden, self.head_size)
        else:
            queries, keys, values = self.query_key_value.heads(hidden, self.head_size).split(self.heads)
        context = self._attend(queries, keys, values, starts)
        hidden = self.attention_output(context, out=hidden, residual_norm=self.attention_norm)
        return self.output(self.intermediate(hidden, gelu=True), out=hidden, residual_norm=self.output_norm)

    def _attend(self, queries, keys, values, starts) -> torch.Tensor:
        """Head-major ``queries`` [heads, rows, head size] (each document's, or its first token's) and ``keys``,
        ``values`` -> the context, row-major [rows, heads x head size]."""
        rows = queries.shape[1]
        context = torch.empty(rows, self.heads * self.head_size)
        failed = kernels().bert_attention(
            queries.data_ptr(), rows, keys.data_ptr(), values.data_ptr(), keys.shape[1], starts.data_ptr(),
            len(starts) - 1, self.heads, self.head_size, int(self.first_only), context.data_ptr(),
            context.stride(0), torch.get_num_threads())
        if failed:
            raise MemoryError("the attention kernel could not allocate its scratch memory")
        return context


def _norm(norm: torch.nn.LayerNorm) -> torch.nn.LayerNorm:
    """A copy of ``norm`` with contiguous fp32 parameters (the kernel reads them by pointer)."""
    copy = torch.nn.LayerNorm(norm.normalized_shape, eps=norm.eps)
    with torch.no_grad():
        copy.weight.copy_(norm.weight)
        copy.bias.copy_(norm.bias)
    return copy.requires_grad_(False)


class KernelBackbone(CompiledBackbone):
    """``module`` (transformers' BertModel) on our kernels, called like it (``input_ids``, a right-padded
    ``attention_mask`` -> ``.last_hidden_state``, zero at padding; ``[B, 1, H]`` when its last layer is a
    :class:`FirstTokenLayer`)."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        check_supported(module)
        kernels()  # refuse here, not at the first batch, where they cannot run
        self._config = module.config
        self.embeddings = module.embeddings
        self.layers = [KernelLayer(layer) for layer in module.encoder.layer]

    @property
    def config(self):
        return self._config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **others) -> BaseModelOutput:
        given = sorted(name for name, value in others.items() if value is not None)
        if given:  # segment ids, positions, embeddings: the kernels would run as if they were not given
            raise ValueError(f"--compile kernels takes input_ids and attention_mask only, not {', '.join(given)}")
        if input_ids.device.type != "cpu":
            raise ValueError(f"--compile kernels runs on the CPU; the batch is on {input_ids.device}")
        if torch.is_autocast_enabled("cpu"):
            raise ValueError("--compile kernels runs fp32 only, not under bf16 autocast")
        lengths = attention_mask.sum(1)
        positions = torch.arange(input_ids.shape[1])
        if not torch.equal(attention_mask.bool(), positions < lengths[:, None]) or not bool((lengths > 0).all()):
            raise ValueError("--compile kernels takes right-padded batches of non-empty texts (each attention "
                             "mask row ones, then zeros)")
        present = attention_mask.bool()
        hidden = self._embed(input_ids[present], positions.expand_as(input_ids)[present])
        starts = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(torch.int64)
        for layer in self.layers:
            hidden = layer(hidden, starts)
        if self.layers[-1].first_only:
            return BaseModelOutput(last_hidden_state=hidden[:, None])
        padded = hidden.new_zeros(*input_ids.shape, hidden.shape[1])
        padded[present] = hidden
        return BaseModelOutput(last_hidden_state=padded)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """BERT's embeddings of packed tokens (all of segment 0, as the encoders call it)."""
        embeddings = self.embeddings
        summed = (embeddings.word_embeddings(ids) + embeddings.position_embeddings(positions)
                  + embeddings.token_type_embeddings.weight[0])
        norm = embeddings.LayerNorm
        return F.layer_norm(summed, norm.normalized_shape, norm.weight, norm.bias, norm.eps).contiguous()
