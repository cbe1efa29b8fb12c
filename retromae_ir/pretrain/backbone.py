"""Load the encoder every method pre-trains: a BERT-family masked LM plus its tokenizer.

A checkpoint without an MLM head (e.g. all-MiniLM-L6-v2, a plain ``BertModel``) gets the identity head of
:mod:`retromae_ir.mlm_head` (the one the DupMAE encoder gives it too), decoder tied to the word embeddings,
so the output is always a ``BertForMaskedLM`` directory that ``AutoModel``, ``AutoModelForMaskedLM`` and
Pyserini's ``AutoDocumentEncoder`` all load.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from retromae_ir.mlm_head import init_identity_head
from retromae_ir.packaged import default_model

log = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("bert",)


class BackboneError(ValueError):
    """The model cannot be pre-trained here (not BERT-family, unreadable, or too short for the max length)."""


@dataclass
class Backbone:
    """The encoder masked LM, its tokenizer, and whether its MLM head was newly initialised."""

    model: nn.Module  # a BertForMaskedLM
    tokenizer: object
    new_head_keys: list[str] = field(default_factory=list)

    @property
    def bert(self) -> nn.Module:
        return self.model.bert

    @property
    def config(self):
        return self.model.config


def check_config(name_or_path: str, max_length: int | None = None):
    """Read the config and reject non-BERT models and max lengths past the position table, before any weights load."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError) as error:
        raise BackboneError(f"cannot load model {name_or_path!r}: {error}") from error
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise BackboneError(f"{name_or_path!r} is a {config.model_type!r} model; pre-training supports BERT-family "
                            f"encoders ({', '.join(SUPPORTED_MODEL_TYPES)})")
    if max_length is not None and max_length > config.max_position_embeddings:
        raise BackboneError(f"max length {max_length} exceeds {name_or_path!r}'s limit of "
                            f"{config.max_position_embeddings} positions")
    return config


def load_backbone(name_or_path: str | Path | None = None, max_length: int | None = None) -> Backbone:
    """Load a hub name or local directory as a ``BertForMaskedLM`` (+ tokenizer), adding a tied head if missing."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    name = str(name_or_path or default_model())
    check_config(name, max_length)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the missing-head report is logged below in one line instead
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(name, dtype=torch.float32, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    tokenizer = AutoTokenizer.from_pretrained(name)
    model.tie_weights()
    new_head = init_identity_head(model, info)
    if new_head:
        log.info("%s has no MLM head: identity head initialised (%s), decoder tied to the word embeddings",
                 name, ", ".join(new_head))
    return Backbone(model=model, tokenizer=tokenizer, new_head_keys=new_head)
