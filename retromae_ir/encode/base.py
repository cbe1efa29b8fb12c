"""EncoderModel: one checkpoint + card -> query/passage representations (Tevatron-style encode_query/encode_passage).

Subclasses (``dense.py``, ``dupmae.py``) only say how a padded batch becomes (dense, sparse) tensors;
batching, length sorting, bf16 autocast, top-k and the conversion to numpy/scipy live here once.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse
import torch
from tqdm import tqdm

from retromae_ir.cli import COMPILE_BACKENDS
from retromae_ir.encode.batching import length_batches, token_budget
from retromae_ir.encode.cards import CardError, EncoderCard, load_card
from retromae_ir.encode.representation import check_lucene_terms, dense_representation
from retromae_ir.hardware import bf16_is_fast
from retromae_ir.io import InputChangedError
from retromae_ir.truncation import check_max_length

logger = logging.getLogger(__name__)
PROJECTION_FILE = "projection.safetensors"


@dataclasses.dataclass
class Encoded:
    """A batch of representations: dense [B, d'] float32 and (DupMAE) sparse CSR [B, V] float32 >= 0."""

    dense: np.ndarray
    sparse: scipy.sparse.csr_matrix | None = None

    def __len__(self) -> int:
        return self.dense.shape[0]

    @staticmethod
    def concat(parts: list[Encoded]) -> Encoded:
        """The rows of ``parts`` one after another."""
        if len(parts) == 1:
            return parts[0]
        sparse = [part.sparse for part in parts]
        return Encoded(np.concatenate([part.dense for part in parts]),
                       None if sparse[0] is None else scipy.sparse.vstack(sparse, format="csr"))


def load_projection(checkpoint: str, hidden_size: int, dims: int) -> torch.nn.Linear | None:
    """W_cls from ``projection.safetensors`` (weight [d', d], optional bias) of a local or hub checkpoint; None means
    identity (d' = d)."""
    from retromae_ir.encode.declared import UnknownFile, checkpoint_file

    try:
        found = checkpoint_file(checkpoint, PROJECTION_FILE)
    except UnknownFile as error:  # published checkpoints have none, and transformers never caches one
        logger.warning("%s; no projection (W_cls) used", error)
        found = None
    path = Path(found) if found else None
    if path is None:
        if dims != hidden_size:
            raise CardError(f"card asks for dims={dims} but {checkpoint} has hidden size {hidden_size} and no "
                            f"{PROJECTION_FILE}: set dims: {hidden_size} or use a fine-tuned checkpoint with W_cls")
        return None
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    weight = tensors["weight"]
    if tuple(weight.shape) != (dims, hidden_size):
        raise CardError(f"{path}: weight has shape {tuple(weight.shape)}, the card needs ({dims}, {hidden_size})")
    layer = torch.nn.Linear(hidden_size, dims, bias="bias" in tensors)
    layer.load_state_dict(tensors)
    return layer


class CompiledBackbone(torch.nn.Module):
    """A compiled stand-in for the transformer, called like it; ``config`` is the original's."""

    @property
    def config(self):
        raise NotImplementedError


class FrozenCompiled(CompiledBackbone):
    """``torch.compile(module, dynamic=True)`` whose compilations run with inductor's ``freezing`` on.

    Freezing turns the weights into constants, which lets inductor pre-pack each linear layer's weight; with a
    symbolic batch (dynamic shapes) it packs them for oneDNN rather than MKL, which is what doubles fp32 GEMM
    speed on AMD's AVX-512 EPYC. ``torch.compile(options={"freezing": True})`` does not switch it on (torch 2.13:
    the linear layers stay ``addmm`` over unfrozen weights, measured), so the config is patched around each call,
    where dynamo compiles (and recompiles), instead of process-wide."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.compiled = torch.compile(module, dynamic=True)

    @property
    def config(self):
        """The compiled module's (which keeps its weights: inductor reads them when it compiles a new shape)."""
        return self.compiled._orig_mod.config

    def forward(self, *args, **kwargs):
        from torch._inductor import config

        with config.patch(freezing=True):
            return self.compiled(*args, **kwargs)


class EncoderModel(torch.nn.Module):
    """Base class: subclasses implement ``from_checkpoint`` and ``represent``."""

    def __init__(self, card: EncoderCard, tokenizer, projection: torch.nn.Module | None):
        super().__init__()
        self.card = card
        tokenizer.padding_side = "right"  # the [CLS] row is read at position 0: a left-padding tokenizer's
        self.tokenizer = tokenizer         # config put a pad there for every shorter text of a batch
        check_max_length(tokenizer, card.max_query_length, f"card {card.name!r}: max_query_length")
        check_max_length(tokenizer, card.max_passage_length, f"card {card.name!r}: max_passage_length")
        self.projection = projection
        self.bf16 = False
        self.int8 = False
        self.compiled: str | None = None  # the compile backend (COMPILE_BACKENDS) the transformer runs under
        self.batch_tokens: int | None | str = "auto"  # the token cap per forward pass: see max_batch_tokens
        self.first_token_last_layer = False  # the last layer computed for the first position only (first_token.py)
        self.loaded_digests: dict[str, str] | None = None  # the checkpoint's file digests as loaded (from_card)
        self.register_buffer("special_ids", torch.tensor(sorted(set(tokenizer.all_special_ids))), persistent=False)

    @classmethod
    def from_card(cls, card: EncoderCard | str, device: str | None = None, bf16: bool | None = False) -> "EncoderModel":
        """The right subclass for the card's kind, loaded, in eval mode, on ``device``; ``bf16=None`` picks bf16
        autocast where the hardware runs it natively (see :mod:`retromae_ir.hardware`) and fp32 otherwise."""
        from retromae_ir.encode import MODEL_CLASSES

        card = load_card(card)
        # a local folder's files as they are read now (it may be trained again in place later); a hub name's after
        # the load, which may fetch a newer revision than the cache held (a revision's snapshot never changes)
        local = Path(card.checkpoint_path()).is_dir()
        digests = card.checkpoint_digests() if local else None
        try:
            model = MODEL_CLASSES[card.kind].from_checkpoint(card)
        except OSError as error:  # transformers' message names neither the card nor what it tried to load
            raise CardError(f"card {card.name!r}: cannot load checkpoint {card.checkpoint!r}: {error}") from error
        if local and card.checkpoint_digests() != digests:  # trained again in place meanwhile: which was loaded?
            raise InputChangedError(f"card {card.name!r}: checkpoint {card.checkpoint_path()} changed while it was "
                                    "loaded; run again once it is settled")
        model.loaded_digests = digests if local else card.checkpoint_digests()
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = model.to(device).eval()
        model.bf16 = bf16 if bf16 is not None else bf16_is_fast(model.device)
        model._trim_for_inference()
        return model

    def checkpoint_digests(self) -> dict[str, str]:
        """The digests of the checkpoint files these weights were loaded from (taken at load, so a checkpoint
        trained again in place while this model is in memory is not recorded as what encoded its vectors); a model
        not loaded by :meth:`from_card` (one in training) has its card's current ones."""
        return self.card.checkpoint_digests() if self.loaded_digests is None else self.loaded_digests

    def quantize_int8(self) -> "EncoderModel":
        """Dynamic int8 quantisation of every ``nn.Linear`` (int8 weights, activations quantised per batch), in
        place: the reduced-precision path of CPUs without native bf16 (AVX2). Speed and retrieval quality
        against fp32 are measured in docs/encoders.md."""
        if self.device.type != "cpu":
            raise ValueError(f"int8 dynamic quantisation runs on the CPU only, not {self.device}; use bf16 there")
        if self.compiled:
            raise ValueError(f"int8 and --compile {self.compiled} do not combine: int8's quantised linear layers "
                             f"are neither inductor's nor OpenVINO's; choose one")
        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():  # torch 2.13 marks eager-mode quantisation deprecated (moving to torchao)
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            quantize_dynamic(self, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
        self.int8 = True
        self.bf16 = False  # int8 replaces bf16: the quantised kernels take fp32 activations, not autocast's bf16
        return self

    def compile_backbone(self, backend: str = "inductor", properties: dict | None = None) -> "EncoderModel":
        """Replace the transformer, in place, by a compiled one (``COMPILE_BACKENDS``), and let a subclass pack
        what runs outside it (:meth:`_pack_outside_backbone`). Inference only: both copy the weights, so training
        them afterwards would not change the outputs.

        * ``inductor`` (:class:`FrozenCompiled`): ``torch.compile``, dynamic shapes, the weights frozen into the
          graph, so that on a CPU the linear layers run as oneDNN kernels over pre-packed weights instead of MKL's
          (on AMD's AVX-512 EPYC twice the GFLOP/s). The first batch pays the compilation (10-15 s for MiniLM; a
          C++ compiler is needed on a CPU; 8-11 s measured). Any device.
        * ``openvino`` (:class:`~retromae_ir.encode.openvino_backbone.OpenVINOBackbone`): OpenVINO's CPU plugin,
          a few seconds of conversion here; CPU only. Faster than inductor for the dense pass (docs/encoders.md).
        * ``kernels`` (:class:`~retromae_ir.encode.kernel_backbone.KernelBackbone`): BERT's layers on our own
          AVX2 kernels, no padding; fp32, x86-64 CPUs with AVX2 only, BERT-architecture checkpoints only.

        ``properties``: more of OpenVINO's CPU plugin properties (``{"PERF_COUNT": True}``); openvino only.
        """
        if backend not in COMPILE_BACKENDS:
            raise ValueError(f"unknown compile backend {backend!r}: choose one of {', '.join(COMPILE_BACKENDS)}")
        if self.int8:
            raise ValueError(f"int8 and --compile {backend} do not combine: int8's quantised linear layers are "
                             f"neither inductor's nor OpenVINO's; choose one")
        if properties and backend != "openvino":
            raise ValueError(f"properties are OpenVINO's; --compile {backend} takes none")
        if backend in ("openvino", "kernels") and self.device.type != "cpu":
            raise ValueError(f"--compile {backend} runs on the CPU, not {self.device}; use --compile inductor there")
        if backend == "kernels" and self.bf16:
            raise ValueError("--compile kernels runs fp32 only: use --dtype fp32 with it, or bf16 with --compile "
                             "openvino or inductor")
        owner, name = self._backbone()
        setattr(owner, name, self._compiled(backend, getattr(owner, name), properties))
        self._pack_outside_backbone()
        self.compiled = backend
        return self

    def _compiled(self, backend: str, transformer: torch.nn.Module, properties: dict | None) -> CompiledBackbone:
        if backend == "openvino":
            from retromae_ir.encode.openvino_backbone import OpenVINOBackbone

            return OpenVINOBackbone(transformer, torch.get_num_threads(), self.bf16, properties)
        if backend == "kernels":
            from retromae_ir.encode.kernel_backbone import KernelBackbone

            return KernelBackbone(transformer)
        return FrozenCompiled(transformer)

    def compile_frozen(self) -> "EncoderModel":
        """:meth:`compile_backbone` with inductor (``--compile``)."""
        return self.compile_backbone("inductor")

    def _trim_for_inference(self) -> None:
        """Drop work whose result the representation never reads (nothing here); training never calls this."""

    def _pack_outside_backbone(self) -> None:
        """Pre-pack layers that run outside the compiled transformer (none here)."""

    def _backbone(self) -> tuple[torch.nn.Module, str]:
        """(owner, attribute name) of the transformer encoder, the module :meth:`compile_backbone` replaces."""
        raise NotImplementedError

    @classmethod
    def from_checkpoint(cls, card: EncoderCard) -> "EncoderModel":
        raise NotImplementedError

    def represent(self, input_ids, attention_mask, k: int | None):
        """(dense [B, d'], sparse [B, V] with at most k non-zeros per row, or None) as float tensors. On a CUDA GPU
        the OT side takes the fast padded route in inference mode only (as :meth:`encode` runs): call it under
        ``torch.inference_mode()``, not ``no_grad``, to encode (``representation.padded_head_is_faster``)."""
        raise NotImplementedError

    def _dense(self, pooled: torch.Tensor) -> torch.Tensor:
        return dense_representation(pooled, self.projection, self.card.normalize)

    @functools.cached_property
    def vocab(self) -> list[str]:
        """Token strings by id: the sparse side's terms (the exact searcher reads them by id)."""
        return vocab_of(self.tokenizer)

    @functools.cached_property
    def lucene_terms(self) -> list[str]:
        """:attr:`vocab` checked as the terms of Lucene's pretokenized impacts (``check_lucene_terms``): what the
        impact index, the pre-encoded sparse queries and the Pyserini encoders write."""
        return check_lucene_terms(self.vocab, f"card {self.card.name}'s tokenizer")

    @property
    def device(self) -> torch.device:
        return self.special_ids.device

    @property
    def backbone_config(self):
        """The transformer's ``config``, whether or not :meth:`compile_backbone` has replaced it."""
        owner, name = self._backbone()
        backbone = getattr(owner, name)
        return backbone.config

    @property
    def max_batch_tokens(self) -> int | None:
        """Tokens per forward pass (None: the caller's batch size alone decides): ``batch_tokens`` when set to a
        number or None, else ("auto") sized on a CPU by the transformer's widest activation, its FFN
        (:func:`retromae_ir.encode.batching.token_budget`)."""
        if self.batch_tokens != "auto":
            return self.batch_tokens
        config = self.backbone_config
        width = getattr(config, "intermediate_size", None) or 4 * config.hidden_size  # BERT's 4x when unnamed
        return token_budget(self.device, width, element_bytes=2 if self.bf16 else 4)

    def encode_query(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> Encoded:
        return self.encode(texts, self.card.max_query_length, self.card.query_k, batch_size, progress)

    def encode_passage(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> Encoded:
        return self.encode(texts, self.card.max_passage_length, self.card.k, batch_size, progress)

    @torch.inference_mode()
    def encode(self, texts: list[str], max_length: int, k: int | None, batch_size: int = 64,
               progress: bool = False) -> Encoded:
        """Encode in batches of similar length (less padding) and, on a CPU, of at most :attr:`max_batch_tokens`
        tokens (:mod:`retromae_ir.encode.batching`), returning rows in the input order."""
        if not texts:
            raise ValueError("nothing to encode: the list of texts is empty")
        ids = self.tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
        dense, sparse = [None] * len(texts), []
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16
                    else contextlib.nullcontext())
        batches = list(length_batches([len(row) for row in ids], batch_size, self.max_batch_tokens))
        for rows in tqdm(batches, disable=not progress, desc="encode", unit="batch"):
            batch = self.tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt").to(self.device)
            with autocast:
                d, s = self.represent(batch["input_ids"], batch["attention_mask"], k)
            d = d.float().cpu().numpy()
            _check_finite(d, s, rows, texts, self.bf16)
            for j, i in enumerate(rows):
                dense[i] = d[j]
            if s is not None:
                sparse.append((rows, _to_csr(s)))
        out = Encoded(np.stack(dense).astype(np.float32, copy=False))
        if sparse:
            rows = np.concatenate([r for r, _ in sparse])
            stacked = scipy.sparse.vstack([m for _, m in sparse], format="csr")
            out.sparse = stacked[np.argsort(rows, kind="stable")]
        return out


def _check_finite(dense: np.ndarray, sparse: torch.Tensor | None, rows: list[int], texts: list[str],
                  bf16: bool) -> None:
    """Refuse a NaN or infinite weight: faiss never returns a NaN score, so the text would silently drop out of
    every search (or a query come back with no hit)."""
    bad = ~np.isfinite(dense).all(axis=1)
    if sparse is not None:
        bad |= ~torch.isfinite(sparse.float()).all(dim=1).cpu().numpy()
    if bad.any():
        j = int(np.argmax(bad))
        text = texts[rows[j]]
        fp32 = "encode in fp32 (--dtype fp32; eval/sts.py without --bf16, the chain with --no-bf16)"
        raise ValueError(f"text {rows[j]} of {len(texts)} ({text[:60]!r}{'...' if len(text) > 60 else ''}) and "
                         f"{int(bad.sum()) - 1} other(s) of its batch encoded to non-finite weights (NaN or inf)"
                         f"{': bf16 may overflow here, ' + fp32 if bf16 else ''}; the checkpoint may have "
                         f"diverged")


def vocab_of(tokenizer) -> list[str]:
    return tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))


def _to_csr(weights: torch.Tensor) -> scipy.sparse.csr_matrix:
    weights = weights.float()
    rows, cols = torch.nonzero(weights, as_tuple=True)
    values = weights[rows, cols].cpu().numpy().astype(np.float32)
    return scipy.sparse.csr_matrix((values, (rows.cpu().numpy(), cols.cpu().numpy())), shape=tuple(weights.shape))

