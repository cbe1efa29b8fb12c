"""A checkpoint folder trained again in place: same path and config, other weights (what resume and cache keys
must notice)."""
from __future__ import annotations

from pathlib import Path

import torch


def train_again_in_place(folder: Path) -> None:
    """Double the word embeddings of the BERT checkpoint in ``folder`` and save it over itself."""
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(folder)
    with torch.no_grad():
        model.base_model.embeddings.word_embeddings.weight.mul_(2.0)
    model.save_pretrained(folder)
