"""The last transformer layer computed for the first position only, for [CLS]-pooled dense encoders.

A [CLS] vector reads one row of the last layer's output. That row still needs the keys and values of every position,
but its query, attention output, output projection and feed-forward network are one row's work instead of L rows':
with MiniLM's six layers and 256-token passages that is about 14% of the encoder's FLOPs. The result equals the full
layer's first row to rounding (the same weights, other matrix shapes). Inference only:
:meth:`EncoderModel.from_card` applies it to [CLS]-pooled dense cards; training (``from_checkpoint``) keeps the full
layer, and the state-dict keys are the layer's own either way.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


# layers whose forward is exactly post-LayerNorm self-attention + FFN over these submodules (checked against the
# full layer: BERT/MiniLM, RoBERTa, XLM-R, ELECTRA, ERNIE). Look-alikes that do more inside the attention
# (RoBERTa-PreLayerNorm's LayerNorm, XLM-R-XL's, ESM's rotary embeddings) would be trimmed into other vectors.
BERT_LAYERS = ("BertLayer", "RobertaLayer", "XLMRobertaLayer", "ElectraLayer", "ErnieLayer")
ATTENTIONS = ("eager", "sdpa")  # the mask formats handled: an additive float mask or sdpa's boolean one


def is_bert_layer(layer: torch.nn.Module) -> bool:
    """Whether ``layer`` is one of transformers' ``BERT_LAYERS``, laid out as they are (self-attention
    ``attention.self.{query,key,value}`` + ``attention.output``, ``intermediate``, ``output``) without
    cross-attention."""
    attention = getattr(layer, "attention", None)
    own = getattr(attention, "self", None)
    return (type(layer).__name__ in BERT_LAYERS and own is not None
            and set(dict(attention.named_children())) == {"self", "output"}
            and set(dict(own.named_children())) <= {"query", "key", "value", "dropout"}
            and hasattr(own, "scaling") and hasattr(own, "attention_head_size")
            and hasattr(layer, "intermediate") and hasattr(layer, "output")
            and not getattr(layer, "add_cross_attention", False) and not getattr(own, "is_causal", False))


class FirstTokenLayer(torch.nn.Module):
    """One of ``BERT_LAYERS`` (its own submodules, so the same state-dict keys) whose output is ``[B, 1, H]``: the
    first position's row of the full layer's ``[B, L, H]``."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        if not is_bert_layer(layer):
            raise TypeError(f"{type(layer).__name__} is not a BERT-style encoder layer")
        self.attention, self.intermediate, self.output = layer.attention, layer.intermediate, layer.output

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args, **kwargs):
        own = self.attention.self
        batch, length, _ = hidden_states.shape
        first = hidden_states[:, :1]

        def heads(states: torch.Tensor, rows: int) -> torch.Tensor:
            return states.view(batch, rows, -1, own.attention_head_size).transpose(1, 2)

        query = heads(own.query(first), 1)
        key, value = heads(own.key(hidden_states), length), heads(own.value(hidden_states), length)
        if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[-2] > 1:
            attention_mask = attention_mask[:, :, :1]  # the first query's row of a [B, 1, L, L] mask
        elif attention_mask is not None and attention_mask.dim() != 4:
            raise ValueError(f"FirstTokenLayer takes a [B, 1, L or 1, L] mask ({' or '.join(ATTENTIONS)} attention),"
                             f" not one of shape {tuple(attention_mask.shape)}")
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=own.scaling)
        attended = self.attention.output(attended.transpose(1, 2).reshape(batch, 1, -1), first)
        return self.output(self.intermediate(attended), attended)


def first_token_only(encoder: torch.nn.Module, config) -> bool:
    """Replace ``encoder.layer[-1]`` (a transformers ``BertEncoder``-like module) by its :class:`FirstTokenLayer`,
    in place; False (nothing replaced) when the layers are not ``BERT_LAYERS`` or the model's attention
    implementation (``config``'s) is not one of ``ATTENTIONS``."""
    layers = getattr(encoder, "layer", None)
    if not isinstance(layers, torch.nn.ModuleList) or not layers or not is_bert_layer(layers[-1]):
        return False
    if getattr(config, "_attn_implementation", None) not in ATTENTIONS:
        return False
    layers[-1] = FirstTokenLayer(layers[-1])
    return True
