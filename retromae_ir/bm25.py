"""BM25 through real Lucene: index a BEIR corpus with Pyserini and search it (Pyserini's BEIR "flat" condition).

Indexing runs ``python -m pyserini.index.lucene`` in a subprocess, so the index directory appears only when
Lucene has finished (it is built in a temporary directory and renamed) and this process' JVM stays free
for searching; the subprocess dies with this process. An index is reused when its manifest records the corpus
bytes it was built from (size and SHA-256, not the path) and the code that built it (Pyserini's version, whose
analyzer and indexer defaults decide the terms, and :data:`COLLECTION_VERSION`), and is built under the index
folder's lock.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from retromae_ir.data.readers import iter_corpus
from retromae_ir.io import (atomic_dir, atomic_write, check_read_unchanged, check_unchanged, claim_output,
                            file_digest)
from retromae_ir.lucene_indexer import build_lucene_index

logger = logging.getLogger(__name__)

MANIFEST = "retromae_ir-manifest.json"
# bumped when the collection written for Lucene changes (what a document's contents are): an index of the old is
# built again, and BM25 runs made from it are searched again
COLLECTION_VERSION = 1


@dataclass(frozen=True)
class BM25Params:
    """Pyserini's BEIR flat defaults: k1 0.9, b 0.4, 1000 hits."""

    k1: float = 0.9
    b: float = 0.4
    hits: int = 1000


def index_code() -> dict:
    """What builds an index besides the corpus: Pyserini's version and the collection writer's."""
    from importlib.metadata import version

    return {"pyserini": version("pyserini"), "collection": COLLECTION_VERSION}


def corpus_fingerprint(corpus: Path) -> dict:
    """Size and SHA-256 of the corpus file and :func:`index_code`: what tells whether an index was built from it
    (the path is kept for the reader only: a rewritten file at the same path is another corpus, a copied one the
    same)."""
    return {"corpus": str(corpus.resolve()), "bytes": corpus.stat().st_size, "sha256": file_digest(corpus),
            **index_code()}


def write_json_collection(corpus: Path, out_dir: Path) -> int:
    """Write Pyserini's JsonCollection (``{"id", "contents"}``, contents = title + " " + text); returns the count.
    ``corpus`` is a BEIR ``corpus.jsonl`` or an MS MARCO ``collection.tsv``."""
    count = 0
    with atomic_write(out_dir / "docs.jsonl") as handle:
        for doc in tqdm(iter_corpus(corpus), desc=f"collection {corpus.name}", unit="doc"):
            handle.write(json.dumps({"id": doc.docid, "contents": doc.contents}, ensure_ascii=False) + "\n")
            count += 1
    return count


def index_is_current(index_dir: Path, fingerprint: dict) -> bool:
    """Built from the same corpus bytes, wherever that file lay, by the same code."""
    manifest = index_dir / MANIFEST
    if not manifest.is_file() or not (index_dir / "lucene").is_dir():
        return False
    built = json.loads(manifest.read_text()).get("fingerprint", {})
    return all(built.get(key) == value for key, value in fingerprint.items() if key != "corpus")


def build_index(corpus: Path, index_dir: Path, threads: int = 2) -> Path:
    """Build (or reuse) a Lucene BM25 index of ``corpus`` (BEIR jsonl or MS MARCO tsv) at ``index_dir``, holding
    its lock throughout; the indexer subprocess dies with this process."""
    return _build_index(corpus, index_dir, threads)[0]


def open_searcher(corpus: Path, index_dir: Path, params: BM25Params = BM25Params(), threads: int = 2) -> "BM25Searcher":
    """A searcher over the index of ``corpus`` at ``index_dir`` (built or reused), checked after opening to be the
    index verified under the lock: a process that replaced the folder in between is an error, not a search of
    another corpus."""
    index_dir, manifest = _build_index(corpus, index_dir, threads)
    searcher = BM25Searcher(index_dir, params, threads)
    check_unchanged(index_dir / MANIFEST, manifest)
    return searcher


def _build_index(corpus: Path, index_dir: Path, threads: int) -> tuple[Path, str]:
    """The index folder and its manifest as read under the lock."""
    corpus, index_dir = Path(corpus), Path(index_dir)
    with claim_output(index_dir):
        fingerprint = corpus_fingerprint(corpus)
        if index_is_current(index_dir, fingerprint):
            logger.info("reusing BM25 index %s", index_dir)
        else:
            with atomic_dir(index_dir) as tmp:
                _index_collection(corpus, tmp, threads, fingerprint)
                check_read_unchanged(corpus, fingerprint["sha256"], "it was indexed")  # else kept under its digest
        return index_dir, (index_dir / MANIFEST).read_text()


def _index_collection(corpus: Path, folder: Path, threads: int, fingerprint: dict) -> None:
    """``folder/lucene`` and the manifest, through a JsonCollection that is deleted once indexed."""
    collection = folder / "collection"
    documents = write_json_collection(corpus, collection)
    arguments = ["--collection", "JsonCollection", "--input", str(collection), "--index", str(folder / "lucene"),
                 "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(threads),
                 "--storePositions", "--storeDocvectors", "--storeRaw"]
    build_lucene_index(arguments, documents, str(corpus))
    (collection / "docs.jsonl").unlink()
    collection.rmdir()
    manifest = {"fingerprint": fingerprint, "documents": documents, "command": ["-m", "pyserini.index.lucene",
                                                                               *arguments]}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))


class BM25Searcher:
    """Batched BM25 search over an index built by :func:`build_index`."""

    def __init__(self, index_dir: Path, params: BM25Params = BM25Params(), threads: int = 2):
        from pyserini.search.lucene import LuceneSearcher

        self.params = params
        self.threads = threads
        self.searcher = LuceneSearcher(str(Path(index_dir) / "lucene"))
        self.searcher.set_bm25(params.k1, params.b)

    def search(self, queries: dict[str, str], batch_size: int = 256) -> dict[str, dict[str, float]]:
        """``{qid: {docid: score}}`` with at most ``params.hits`` documents per query."""
        qids = list(queries)
        run: dict[str, dict[str, float]] = {}
        for start in tqdm(range(0, len(qids), batch_size), desc="bm25 search", unit="batch"):
            batch = qids[start:start + batch_size]
            hits = self.searcher.batch_search([queries[q] for q in batch], batch,
                                              k=self.params.hits, threads=self.threads)
            run.update({qid: {h.docid: float(h.score) for h in hits[qid]} for qid in batch})
        return run


class BM25Retriever:
    """BM25 as an evaluation-suite retriever: one index per corpus under ``index_root``, built on first use."""

    def __init__(self, index_root: Path, params: BM25Params = BM25Params(), threads: int = 2):
        self.index_root = Path(index_root)
        self.params = params
        self.threads = threads

    @property
    def name(self) -> str:
        """``bm25`` under Pyserini's BEIR flat k1 and b, else ``bm25-k1_<k1>-b_<b>``: the runs folder and tables of
        other parameters never replace the defaults' (``runs/bm25/``, which the README cites)."""
        default = BM25Params()
        if (self.params.k1, self.params.b) == (default.k1, default.b):
            return "bm25"
        return f"bm25-k1_{self.params.k1:g}-b_{self.params.b:g}"

    @property
    def owner(self) -> dict:
        """What its runs folder belongs to (``evaluate.retrievers.claim_runs_folder``): BM25 under these parameters."""
        return {"retriever": "bm25", "k1": self.params.k1, "b": self.params.b}

    def run_key(self, corpus: Path) -> dict:
        """What its runs depend on besides the queries: the parameters, the corpus bytes and the index code."""
        return {"retriever": "bm25", "k1": self.params.k1, "b": self.params.b, "hits": self.params.hits,
                "corpus_sha256": file_digest(corpus), **index_code()}

    def retrieve(self, corpus: Path, index_name: str, queries: dict[str, str]) -> dict[str, dict[str, float]]:
        return open_searcher(corpus, self.index_root / index_name, self.params, self.threads).search(queries)
