"""The MLM head given to a checkpoint that ships none (e.g. the packaged all-MiniLM-L6-v2).

Pre-training and the DupMAE encoder must start from the same head, or a pre-trained model and the same model
without pre-training are compared from different starting points. The head is deterministic rather than random:
the transform's dense layer = identity, LayerNorm = plain normalisation, biases = 0, decoder tied to the word
embeddings. BERT's head still applies its activation (GELU) between the two, so the logits are
LN(GELU(h)) . E^T: the similarity of each contextual vector, its negative components squashed and renormalised, to
every input embedding; a lexical OT vector from the first step, not exactly h . E^T (documents and queries encoded
in different processes also agree).
"""
from __future__ import annotations

import torch


def init_identity_head(mlm: torch.nn.Module, loading_info: dict) -> list[str]:
    """Set the head parameters the checkpoint lacked (``output_loading_info``'s missing keys outside the base
    model) to the identity head; returns their names, sorted (empty when the checkpoint has its own head)."""
    prefix = mlm.base_model_prefix + "."
    missing = sorted(key for key in loading_info["missing_keys"] if not key.startswith(prefix))
    with torch.no_grad():
        for name, param in mlm.named_parameters():
            if name not in missing:
                continue
            if name.endswith("dense.weight"):
                param.copy_(torch.eye(*param.shape))
            elif name.endswith("LayerNorm.weight"):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
    return missing
