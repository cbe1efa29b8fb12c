"""The contract every pre-training method implements, and the checkpoint format they share.

A method is a ``PretrainModel`` subclass in its own module, registered in ``retromae_ir.pretrain.METHODS``:

* ``encoder`` is the backbone ``BertForMaskedLM``; everything else the subclass registers is a decoder/head.
  Decoders reach the shared embeddings and MLM head THROUGH ``self.encoder`` (never register them again),
  so ``decoders.safetensors`` holds exactly the non-encoder parameters.
* ``encode(batch) -> EncoderOutput`` and ``losses(batch, encoded) -> {name: scalar}`` with ``"loss"`` the
  total; ``forward`` chains them (extensions such as the contrastive loss hook in between).
* ``make_collator()`` returns a callable ``(examples, generator) -> batch dict of tensors``; randomness comes
  only from that generator and the global torch RNG, which the trainer seeds per step (exact resume).
* ``make_examples(segments)`` turns the corpus segments into training examples (default: the segments).
* ``Arguments``: the method's own argument dataclass (its fields become CLI options).
* ``prepare_arguments(method_args, corpus, model_name, max_length)``: called by the command before the model is
  built, to fill in or check what the method derives from the corpus (MASTER: its corpus statistics, its side
  texts); default: nothing.
* ``objective_version``: bumped in the commit that changes what the same options train (its losses, decoding,
  masking, or the shared code they run through); ``code_identity(method_args)`` adds it, and the versions of
  the method's own rules (MASTER: its keyword masking), to the run identity and the chain's record, so neither a
  run nor a chain's finished pre-training is resumed or reused under another objective.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import torch
from torch import nn

from retromae_ir.io import atomic_write
from retromae_ir.pretrain.arguments import MaskingArguments
from retromae_ir.pretrain.backbone import Backbone, load_backbone
from retromae_ir.pretrain.collate import Segment
from retromae_ir.pretrain.masking import IGNORE_INDEX

ENCODER_PREFIX = "encoder."
DECODERS_FILE = "decoders.safetensors"
METADATA_FILE = "retromae_ir.json"

Collator = Callable[[Sequence[Any], torch.Generator], dict]


class CheckpointError(ValueError):
    """A checkpoint's decoder weights do not match the method being trained."""


@dataclass
class NoArguments:
    """A method without options of its own."""


@dataclass
class EncoderOutput:
    """The encoder pass: [CLS] vector, last hidden states, MLM logits over all positions and the MLM loss."""

    cls: torch.Tensor  # [B, d]
    hidden: torch.Tensor  # [B, L, d]
    logits: torch.Tensor  # [B, L, V]
    mlm_loss: torch.Tensor  # scalar


class PretrainModel(nn.Module, ABC):
    """Encoder masked LM + method-specific decoders; see the module docstring for the contract."""

    name: ClassVar[str]
    Arguments: ClassVar[type] = NoArguments
    objective_version: ClassVar[int] = 1
    # method options that shape only freshly built decoders: refused where a continued checkpoint's decoders load
    fresh_decoder_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, backbone: Backbone, masking: MaskingArguments, method_args: Any = None):
        super().__init__()
        self.encoder = backbone.model
        self.tokenizer = backbone.tokenizer
        self.new_head_keys = list(backbone.new_head_keys)
        self.masking = masking
        self.method_args = method_args if method_args is not None else self.Arguments()

    # ---- the method -------------------------------------------------------------------------------------
    @classmethod
    def prepare_arguments(cls, method_args: Any, corpus: str | Path, model_name: str, max_length: int) -> Any:
        """``method_args`` completed from the corpus and the model's tokenizer before the model is built (a new
        object; the given one is left as it is, so the run identity computed from it stays the user's options)."""
        return method_args

    @classmethod
    def code_identity(cls, method_args: Any) -> dict:
        """Versions of this method's code that change what the same options train."""
        return {"objective": cls.objective_version}

    def encode(self, batch: dict) -> EncoderOutput:
        """Masked encoder pass with MLM loss (batch keys from ``EncoderMLMCollator``)."""
        out = self.encoder(input_ids=batch["encoder_input_ids"], attention_mask=batch["attention_mask"],
                           output_hidden_states=True)
        hidden = out.hidden_states[-1]
        return EncoderOutput(cls=hidden[:, 0], hidden=hidden, logits=out.logits,
                             mlm_loss=token_cross_entropy(out.logits, batch["encoder_labels"]))

    @abstractmethod
    def losses(self, batch: dict, encoded: EncoderOutput) -> dict[str, torch.Tensor]:
        """Named scalar losses, ``"loss"`` the total that is back-propagated."""

    def forward(self, batch: dict) -> dict[str, torch.Tensor]:
        return self.losses(batch, self.encode(batch))

    @abstractmethod
    def make_collator(self) -> Collator:
        """``(examples, generator) -> batch``."""

    def make_examples(self, segments: Sequence[Segment]) -> Sequence[Any]:
        return segments

    # ---- checkpoints --------------------------------------------------------------------------------------
    def decoder_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous() for k, v in self.state_dict().items() if not k.startswith(ENCODER_PREFIX)}

    def load_decoders(self, path: str | Path) -> None:
        """Load ``decoders.safetensors``; its keys must be exactly this method's decoder parameters."""
        from safetensors.torch import load_file

        state = load_file(str(path))
        expected = set(self.decoder_state_dict())
        if set(state) != expected:
            raise CheckpointError(f"{path} does not fit method {self.name!r}: missing {sorted(expected - set(state))}, "
                                  f"unexpected {sorted(set(state) - expected)}")
        self.load_state_dict(state, strict=False)

    def save(self, directory: str | Path, metadata: dict) -> None:
        """Write the encoder (``save_pretrained``), tokenizer, decoders and metadata into ``directory``.

        The caller provides a fresh directory (``retromae_ir.io.atomic_dir``), so a crash leaves no partial checkpoint.
        """
        from safetensors.torch import save_file

        directory = Path(directory)
        self.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        save_file(self.decoder_state_dict(), str(directory / DECODERS_FILE))
        with atomic_write(directory / METADATA_FILE) as handle:
            json.dump({"method": self.name, "method_args": _plain(self.method_args), "masking": _plain(self.masking),
                       "new_head_keys": self.new_head_keys, **metadata}, handle, indent=2, default=str)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path | None, masking: MaskingArguments, method_args: Any = None,
                        max_length: int | None = None) -> "PretrainModel":
        """Backbone from a hub name / directory; continue its decoders when it is one of our checkpoints."""
        model = cls(load_backbone(name_or_path, max_length), masking, method_args)
        decoders = Path(str(name_or_path)) / DECODERS_FILE if name_or_path else None
        if decoders is not None and decoders.is_file():
            model.load_decoders(decoders)
        return model

    @classmethod
    def check_start(cls, name_or_path: str | Path, method_args: Any = None) -> None:
        """Refuse an option of :attr:`fresh_decoder_options` away from its default when the run's start is one of
        our checkpoints, whose ``decoders.safetensors`` replace every fresh decoder: the option was accepted,
        overridden by the loaded weights, and keyed in the run identity. (A resume reloads the run's own
        checkpoints, made with the option: not checked.)"""
        decoders = Path(str(name_or_path)) / DECODERS_FILE
        if not decoders.is_file():
            return
        args, defaults = method_args if method_args is not None else cls.Arguments(), cls.Arguments()
        for name in cls.fresh_decoder_options:
            if getattr(args, name) != getattr(defaults, name):
                raise CheckpointError(f"--{name.replace('_', '-')} shapes new decoders, and --model {name_or_path} "
                                      f"continues its own ({DECODERS_FILE}): leave the option out, or start from an "
                                      "encoder without decoders")


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the labelled tokens (label != -100), in fp32; 0 (not NaN) when none are labelled."""
    labelled = labels != IGNORE_INDEX
    if not bool(labelled.any()):
        return logits.sum() * 0.0
    return nn.functional.cross_entropy(logits[labelled].float(), labels[labelled])


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) else value
