"""Retrieval-oriented pre-training: RetroMAE, DupMAE and MASTER over one shared base (see base.py).

``METHODS`` maps a method name to ``"module:Class"``; modules import lazily so one method's dependencies
never load for another.
"""
from __future__ import annotations

import importlib

METHODS: dict[str, str] = {
    "retromae": "retromae_ir.pretrain.retromae:RetroMAE",
    "dupmae": "retromae_ir.pretrain.dupmae:DupMAE",
    "master": "retromae_ir.pretrain.master:MASTER",
}


def get_method(name: str):
    """The ``PretrainModel`` subclass registered as ``name``."""
    if name not in METHODS:
        raise ValueError(f"unknown pre-training method {name!r}; choose from {', '.join(sorted(METHODS))}")
    module, cls = METHODS[name].split(":")
    return getattr(importlib.import_module(module), cls)
