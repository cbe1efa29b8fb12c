"""The transformer run by OpenVINO's CPU plugin (``encode --compile openvino``): a well-kept inference library
whose fused attention and linear kernels run MiniLM's dense pass at 0.77-0.78 of the fp32 matmul ceiling on AMD's
AVX-512 EPYC, against 0.65-0.71 for inductor (``--compile``), each alone in its process; measured in
docs/encoders.md.

Only the transformer is converted (``convert_model`` from the PyTorch module, dynamic batch and length); what
follows it (pooling, W_cls, DupMAE's OT head over the ordinary tokens) stays in PyTorch, as under inductor.
"""
from __future__ import annotations

import warnings

import torch
from transformers.modeling_outputs import BaseModelOutput

from retromae_ir.encode.base import CompiledBackbone


def check_bf16_support(bf16: bool, capabilities: list[str] | None = None) -> None:
    """Refuse bf16 where the CPU plugin lacks it (``capabilities``: its ``OPTIMIZATION_CAPABILITIES``, asked of it
    when None): there it takes the bf16 hint silently and runs fp32, and an index recorded as bf16 would hold fp32
    vectors (mixed with bf16 ones when resumed eagerly, searched with bf16 queries)."""
    if not bf16:
        return
    if capabilities is None:
        import openvino as ov

        capabilities = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    if "BF16" not in capabilities:
        raise ValueError(f"--dtype bf16 with --compile openvino needs a CPU that runs bf16 (OpenVINO's CPU plugin "
                         f"offers {', '.join(capabilities)} here, and would run fp32 under a bf16 record); use "
                         f"--dtype fp32 (or auto) with --compile openvino, or bf16 without it")


def cpu_request(graph, threads: int, bf16: bool = False, properties: dict | None = None):
    """An inference request of ``graph`` compiled for OpenVINO's CPU plugin as ``--compile openvino`` runs it: one
    stream of ``threads`` threads, fp32 (bf16 with ``bf16``, refused where the CPU lacks it) arithmetic, plus any
    other ``properties``."""
    import openvino as ov

    check_bf16_support(bf16)
    config = {"INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32", "INFERENCE_NUM_THREADS": threads,
              "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, **(properties or {})}
    return ov.Core().compile_model(graph, "CPU", config).create_infer_request()


class _LastHiddenState(torch.nn.Module):
    """The transformer as a graph of tensors in, one tensor out (what ``convert_model`` traces)."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.transformer = module

    def forward(self, input_ids, attention_mask):
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class OpenVINOBackbone(CompiledBackbone):
    """``module`` converted to OpenVINO and compiled for the CPU, called like it (``input_ids``,
    ``attention_mask`` -> ``.last_hidden_state``). ``threads``: OpenVINO's inference threads (torch's count);
    ``bf16``: its inference precision (bf16 where the encoder runs bf16 autocast, else fp32, so the vectors are
    fp32's to rounding); ``properties``: more of the CPU plugin's (``{"PERF_COUNT": True}`` for per-node times in
    ``request.profiling_info``, as ``benchmarks/profile_encode.py`` reads them). Inference only: the weights are
    copied into the compiled graph."""

    def __init__(self, module: torch.nn.Module, threads: int, bf16: bool = False, properties: dict | None = None):
        super().__init__()
        try:
            import openvino as ov
        except ImportError as error:
            raise ImportError("--compile openvino needs the openvino package (pip install openvino)") from error
        check_bf16_support(bf16)  # before the seconds of conversion
        self._config = module.config  # only that: the weights live in the compiled graph, not twice in memory
        example = (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
        shape = ov.PartialShape([-1, -1])
        with warnings.catch_warnings():  # the trace's notes on mask branches that do not apply to a padded batch,
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # and torch's and transformers' deprecations
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            graph = ov.convert_model(_LastHiddenState(module).eval(), example_input=example,
                                     input=[("input_ids", shape, ov.Type.i64), ("attention_mask", shape, ov.Type.i64)])
        self.request = cpu_request(graph, threads, bf16, properties)

    @property
    def config(self):
        return self._config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_) -> BaseModelOutput:
        if input_ids.device.type != "cpu":
            raise ValueError(f"OpenVINO runs on the CPU; the batch is on {input_ids.device}")
        out = self.request.infer({"input_ids": input_ids.to(torch.int64).numpy(),
                                  "attention_mask": attention_mask.to(torch.int64).numpy()})  # outputs copied out
        return BaseModelOutput(last_hidden_state=torch.from_numpy(out[0]))
