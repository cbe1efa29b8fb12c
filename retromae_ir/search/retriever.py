"""An encoder card as an evaluation-suite retriever: encode a corpus once (reused while the card and the corpus
are unchanged), then search it with the exact hybrid searcher in dense, sparse or hybrid mode."""
from __future__ import annotations

import logging
import os
from functools import cached_property
from pathlib import Path
from typing import Callable

from retromae_ir.encode.cards import load_card
from retromae_ir.encode.manifest import MANIFEST, IndexMismatchError, read_manifest, reusable_manifest
from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.flat_index import FLAT_IP, flat_ip_kind
from retromae_ir.io import check_read_unchanged, check_unchanged, checkpoint_file_digests, claim_output, file_digest
from retromae_ir.search.exact_hybrid import SEARCH_VERSION

logger = logging.getLogger(__name__)


def default_mode(card) -> str:
    return "hybrid" if card.sparse else "dense"


def retriever_name(card, mode: str | None = None) -> str:
    """The card's name, with ``-<mode>`` when the search mode is not the card's default (runs/<name>/...)."""
    mode = mode or default_mode(card)
    return card.name if mode == default_mode(card) else f"{card.name}-{mode}"


class EncoderRetriever:
    """``retrieve(corpus, index_name, queries)`` over ``index_root/<card>/<index_name>``."""

    def __init__(self, card, mode: str | None = None, index_root: Path = Path("indexes"), hits: int = 1000,
                 batch_size: int = 64, threads: int = 2, bf16: bool | None = None, int8: bool = False,
                 lucene: bool = True, device: str | None = None, candidates: int = 1000,
                 compile_backend: str | None = None):
        self.card = load_card(card)
        self.mode = mode or default_mode(self.card)
        if self.mode != "dense" and not self.card.sparse:
            raise ValueError(f"card {self.card.name!r} is dense-only: search mode {self.mode} needs a sparse side "
                             "(--search of the evaluation drivers, --mode of mine)")
        self.name = retriever_name(self.card, self.mode)
        self.index_root = Path(index_root)
        self.hits, self.batch_size, self.threads, self.bf16, self.int8 = hits, batch_size, threads, bf16, int8
        self.lucene = lucene  # False: no Lucene impact index (a host without Java); the exact searcher needs none
        self.device = device  # None: cuda when available (int8 needs "cpu")
        self.candidates = candidates  # K': each side's top K' nominate the candidates scored exactly
        self.compile_backend = compile_backend  # eager's vectors to about 1e-6 in fp32 (to bf16 rounding under
        # bf16, as eager bf16 is), so not part of any key
        self.checked: dict[Path, str] = {}  # index folder -> its manifest as verified under the folder's lock

    @property
    def owner(self) -> dict:
        """What its runs folder belongs to (``evaluate.retrievers.claim_runs_folder``): the card's kind and search mode
        and its checkpoint, by its name or path or, for a local folder, by its files too (moved or copied it stays
        its own, and so does one trained again in place, or a card with other fields edited)."""
        local = Path(self.card.checkpoint_path()).is_dir() and not self.card.checkpoint.startswith("packaged:")
        return {"retriever": "encoder", "kind": self.card.kind, "mode": self.mode,
                "checkpoint": os.path.normpath(self.card.checkpoint),
                "weights": checkpoint_file_digests(self.card.checkpoint_path()) if local else None}

    @cached_property
    def model(self):
        from retromae_ir.encode import EncoderModel

        model = EncoderModel.from_card(self.card, device=self.device, bf16=self.bf16)
        if self.int8:
            model.quantize_int8()
        return model.compile_backbone(self.compile_backend) if self.compile_backend else model

    def source_digests(self, corpus: Path) -> dict[str, str]:
        """What an index is built from: the corpus bytes and, for a local checkpoint, its weight and tokenizer files
        (a card whose checkpoint directory was trained again keeps its fingerprint, but not these)."""
        weights = {f"{name}_sha256": digest for name, digest in self.model.checkpoint_digests().items()}
        return {"corpus_sha256": file_digest(corpus), **weights}

    def index_is_current(self, index_dir: Path, digests: dict[str, str]) -> bool:
        """Built by this card, weights, precision and encoding code from these corpus bytes (not merely a corpus of
        this name), with a Lucene impact index when this retriever builds one (an index made without it is not
        reused then)."""
        data = reusable_manifest(index_dir, self.model)
        if data is None:
            return False
        has_lucene = data.get("lucene", True) or not self.card.sparse
        recorded = {key: value for key, value in data.items() if key.endswith("_sha256")}
        return (has_lucene or not self.lucene) and recorded == digests  # a weight file gone is a change too

    def build_index(self, corpus: Path, index_name: str) -> Path:
        """Encode ``corpus`` into faiss + Lucene impact indexes, unless an index of it with this card exists.
        The index folder is locked meanwhile: two suites sharing an --index-dir never write one index at once."""
        from retromae_ir.encode.corpus import encode_shard, merge, read_corpus

        index_dir = self.index_root / self.card.name / index_name
        with claim_output(index_dir):
            digests = self.source_digests(corpus)
            if self.index_is_current(index_dir, digests):
                check_flat(index_dir)
                logger.info("reusing %s index %s", self.card.name, index_dir)
            else:
                docids, texts = read_corpus(corpus)
                check_read_unchanged(corpus, digests["corpus_sha256"], "it was read")  # else indexed under its digest
                folder = encode_shard(self.model, docids, texts, index_dir, batch_size=self.batch_size)
                del docids, texts  # encoded: the merge reads the chunks (about 4 GB at MS MARCO's 8.8M)
                merge(index_dir, self.card, self.model.vocab, threads=self.threads, work=folder.parent,
                      extra={"corpus": str(corpus), "bf16": self.model.bf16, **digests}, lucene=self.lucene)
            self.checked[index_dir] = (index_dir / MANIFEST).read_text()  # what retrieve() must find after opening
        return index_dir

    def run_key(self, corpus: Path) -> dict:
        """What its runs depend on besides the queries: the card, the weights and corpus bytes its index is built
        from, the precision, the encoding and search code's versions, the search mode, depth and candidates (the
        run cache's key)."""
        from retromae_ir.encode.corpus import precision

        return {"retriever": "encoder", "fingerprint": self.card.fingerprint(), **self.source_digests(corpus),
                "precision": precision(self.model), "encoding": ENCODING_VERSION, "search": SEARCH_VERSION,
                "mode": self.mode, "hits": self.hits, "candidates": self.candidates}

    def retrieve(self, corpus: Path, index_name: str, queries: dict[str, str]) -> dict[str, dict[str, float]]:
        return self.searcher(corpus, index_name)(queries)

    def searcher(self, corpus: Path, index_name: str) -> Callable[[dict[str, str]], dict[str, dict[str, float]]]:
        """A function from ``{qid: text}`` to each query's top ``hits``, by the exact searcher over the index of
        ``corpus`` (built or reused, and opened once: mining calls it a block of queries at a time), checked after
        opening to be the index verified under the lock."""
        from retromae_ir.search.exact_hybrid import ExactHybridSearcher

        index_dir = self.build_index(Path(corpus), index_name)
        searcher = ExactHybridSearcher(index_dir, self.model, self.mode, candidates=self.candidates,
                                       threads=self.threads)
        check_unchanged(index_dir / MANIFEST, self.checked[index_dir])  # not replaced since checked under the lock
        return lambda queries: searcher.batch_search(list(queries.values()), list(queries), k=self.hits,
                                                     batch_size=self.batch_size)


def check_flat(index_dir: Path) -> None:
    """Refuse an index whose dense side is not the flat one merge writes (rebuilt by ``encode dense-index``, or
    replaced by hand): the drivers cache runs under a key that names no faiss index, so its approximate or float16
    runs would be kept and reported as the flat index's."""
    named = dense_index_name(index_dir)
    if named != "Flat":
        raise IndexMismatchError(
            f"{index_dir}'s dense index is {named}, not the flat one these runs are cached for: remove "
            f"{index_dir / MANIFEST} and run again (the index is merged again from the chunks under "
            f"{index_dir / '.work'}, encoded again without them), or search it as it is with "
            f"`python -m retromae_ir.search`")


def dense_index_name(index_dir: Path) -> str:
    """What ``index_dir``'s dense index is: ``Flat`` (merge's), the factory string ``encode dense-index`` recorded,
    or, for one replaced by hand (the manifest does not know), its faiss type. The file's first bytes decide
    whether it is flat, whatever the manifest says."""
    kind = flat_ip_kind(index_dir / "dense" / "index")
    if kind == FLAT_IP:
        return "Flat"
    return read_manifest(index_dir).get("dense_index", f"a faiss index of type {kind!r}")
