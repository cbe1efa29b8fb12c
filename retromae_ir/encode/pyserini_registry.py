"""Our encoders as Pyserini encoder classes, registered in Pyserini's encoder maps by name.

Encoder names: ``retromae_ir:<card>`` (dense vectors, numpy) and ``retromae_ir-sparse:<card>`` (DupMAE OT
vectors, ``{token: int}`` quantised with the card's scale), where <card> is a card name or path. The start-up
hook (retromae_ir/pyserini_env.py) calls ``register_encoders`` right after ``pyserini.encode`` is imported and
``register_impact_encoder`` after ``pyserini.search.lucene._impact_searcher``, so ``python -m pyserini.encode``,
``pyserini.search.faiss``, ``pyserini.search.hybrid`` and ``pyserini.search.lucene --impact`` accept these names
without edits to Pyserini. Pyserini matches names by substring in dict order, so ours go first.
"""
from __future__ import annotations

import functools
import sys

from pyserini.encode import DocumentEncoder, QueryEncoder

from retromae_ir.data.readers import joined
from retromae_ir.encode.representation import impact_dicts

DENSE_PREFIX = "retromae_ir:"
SPARSE_PREFIX = "retromae_ir-sparse:"


def card_of(encoder_name: str) -> str:
    """The card name or path inside an encoder name such as ``retromae_ir:dupmae-minilm``."""
    for prefix in (SPARSE_PREFIX, DENSE_PREFIX):
        if encoder_name.startswith(prefix):
            return encoder_name[len(prefix):]
    raise ValueError(f"{encoder_name!r} is not a retromae_ir encoder name ({DENSE_PREFIX}CARD or {SPARSE_PREFIX}CARD)")


def _model(encoder_name: str, device: str):
    """One loaded model per (card, device) and process: Pyserini's hybrid CLI builds both sides, named
    ``retromae_ir:CARD`` and ``retromae_ir-sparse:CARD``."""
    return _loaded(card_of(encoder_name), _device(device))


@functools.lru_cache(maxsize=4)
def _loaded(card: str, device: str):
    from retromae_ir.encode.base import EncoderModel

    return EncoderModel.from_card(card, device=device)


def _device(device) -> str:
    import torch

    device = str(device or "cpu")
    return device if device.startswith("cpu") or torch.cuda.is_available() else "cpu"


def sparse_dicts(model, matrix) -> list[dict[str, int]]:
    """CSR rows of ``model``'s OT vectors -> Pyserini's ``{token: int}`` impacts (the card's scale)."""
    return impact_dicts(matrix, model.lucene_terms, model.card.scale)


def refuse_unapplied(prefix=None, fp16=False, tokenizer_name=None, add_sep=False, **_) -> None:
    """Pyserini's options our encoders would not apply: refused rather than swallowed (the card decides the
    encoding; a run made without the asked-for prefix, precision, tokenizer or title separator looked as if it had
    them)."""
    if add_sep:
        raise ValueError("retromae_ir encoders join a title and its text as `encode corpus` does: pyserini.encode's "
                         "--add-sep (a [SEP] between them) would not be applied; leave it out")
    if tokenizer_name:
        raise ValueError(f"retromae_ir encoders tokenize with their card's checkpoint: Pyserini's --tokenizer "
                         f"{tokenizer_name!r} would not be applied; leave it out")
    if prefix:
        raise ValueError(f"retromae_ir encoders encode as their card says: Pyserini's --query-prefix {prefix!r} "
                         "would not be applied; leave it out")
    if fp16:
        raise ValueError("retromae_ir encoders run in fp32 inside Pyserini: --fp16 would not be applied; leave it "
                         "out, or encode with `python -m retromae_ir.encode ... --dtype bf16`")


class _Base:
    sparse = False

    def __init__(self, encoder_name: str, device="cpu"):
        self.model = _model(encoder_name, _device(device))
        self.card = self.model.card
        if self.sparse and not self.card.sparse:
            raise ValueError(f"card {self.card.name!r} (kind {self.card.kind}) has no sparse side")


class RetroMAEDocumentEncoder(_Base, DocumentEncoder):
    """Dense passage vectors, float32 [B, d'] (Pyserini's DocumentEncoder convention)."""

    def __init__(self, model_name: str, device="cpu", **options):
        refuse_unapplied(**options)
        super().__init__(model_name, device)

    def encode(self, texts, titles=None, batch_size: int = 64, **options):
        return self._passages(texts, titles, batch_size, options).dense

    def _passages(self, texts, titles, batch_size: int, options: dict):
        """The passages' ``Encoded`` (title and text joined as ``encode corpus`` joins them)."""
        refuse_unapplied(**options)
        if titles is not None:
            texts = [joined(title, text) for title, text in zip(titles, texts)]
        return self.model.encode_passage(list(texts), batch_size)


class RetroMAEQueryEncoder(_Base, QueryEncoder):
    """Dense query vector [d'] (Pyserini's QueryEncoder convention)."""

    def __init__(self, encoder_dir: str, device="cpu", **options):
        refuse_unapplied(**options)
        super().__init__(encoder_dir, device)

    def encode(self, query: str, **_):
        return self.model.encode_query([query]).dense[0]


class RetroMAESparseDocumentEncoder(RetroMAEDocumentEncoder):
    """DupMAE OT passage vectors as ``{token: int}`` (top-k, quantised), like Pyserini's SPLADE encoder."""

    sparse = True

    def encode(self, texts, titles=None, batch_size: int = 64, **options):
        return sparse_dicts(self.model, self._passages(texts, titles, batch_size, options).sparse)


class RetroMAESparseQueryEncoder(RetroMAEQueryEncoder):
    """DupMAE OT query vector as ``{token: int}``, what LuceneImpactSearcher sends to Lucene."""

    sparse = True

    def encode(self, query: str, **_):
        return sparse_dicts(self.model, self.model.encode_query([query]).sparse)[0]


def _put_first(mapping: dict, entries: dict) -> None:
    rest = {key: value for key, value in mapping.items() if key not in entries}
    mapping.clear()
    mapping.update(entries)
    mapping.update(rest)


def register_encoders(encode_module) -> None:
    """Put our classes first in ``document_encoder_class_map`` / ``query_encoder_class_map`` (same dict objects
    the encode/faiss/hybrid CLIs imported). Neither of our prefixes contains the other, so their order is free."""
    _put_first(encode_module.document_encoder_class_map,
               {SPARSE_PREFIX: RetroMAESparseDocumentEncoder, DENSE_PREFIX: RetroMAEDocumentEncoder})
    _put_first(encode_module.query_encoder_class_map,
               {SPARSE_PREFIX: RetroMAESparseQueryEncoder, DENSE_PREFIX: RetroMAEQueryEncoder})


def register_impact_encoder(impact_module) -> None:
    """Let LuceneImpactSearcher (``--impact --encoder retromae_ir-sparse:CARD``) build our sparse query encoder."""
    cls = impact_module.LuceneImpactSearcher
    original = cls._init_query_encoder_from_str
    if getattr(original, "_retromae_ir", False):
        return

    def _init_query_encoder_from_str(query_encoder):
        if isinstance(query_encoder, str) and query_encoder.startswith((SPARSE_PREFIX, DENSE_PREFIX)):
            return RetroMAESparseQueryEncoder(query_encoder)
        return original(query_encoder)

    _init_query_encoder_from_str._retromae_ir = True
    cls._init_query_encoder_from_str = staticmethod(_init_query_encoder_from_str)


def register_loaded() -> None:
    """Register in the Pyserini modules already imported and whole: imported first, this module imports
    ``pyserini.encode`` while it is itself half-defined, so the start-up hook cannot register there and leaves it
    to this. (A module still executing, such as the impact searcher importing ``pyserini.encode``, gets the hook's
    registration once it has run.)"""
    for name, needs, register in (("pyserini.encode", "query_encoder_class_map", register_encoders),
                                  ("pyserini.search.lucene._impact_searcher", "LuceneImpactSearcher",
                                   register_impact_encoder)):
        if hasattr(sys.modules.get(name), needs):
            register(sys.modules[name])


register_loaded()
