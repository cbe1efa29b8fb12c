"""Exact hybrid search at scale on synthetic documents: peak memory and queries/s of ours and Pyserini's HybridSearcher.

    .venv/bin/python benchmarks/hybrid_scale.py --docs 20000            # checks the set-up in a few minutes
    nice -n 19 .venv/bin/python benchmarks/hybrid_scale.py --docs 1000000

``--docs`` random documents become a real index of this toolkit through its own writing code: a stand-in model
hands ``retromae_ir.encode.corpus.encode_shard`` random vectors (so the content-keyed chunk cache, the merge, the
faiss flat index, the float16 OT store, the JsonVectorCollection and the Lucene impact index are the ones
``python -m retromae_ir.encode corpus`` writes), and ``retromae_ir.encode.queries.encode_queries`` writes the
queries in Pyserini's pre-encoded formats. Dense vectors: ``--dims`` standard normal, L2-normalised. OT vectors: up
to ``--k`` distinct terms a document out of ``--vocab``, drawn with probability proportional to 1 / rank^``--zipf``
(ranks shuffled over the term ids), weights uniform in [0.05, 0.15] (the range of the trained scifact chain's OT
weights, 0.078-0.120). Each query is about one random document: its dense vector that document's plus as much noise,
its ``--query-k`` OT terms half the document's, half drawn like a document's.

Then, each in a fresh process so that its peak memory is its own (one untimed pass, then the timed one):

* ``brute``: Eq. 12 over every document (BruteForceScorer, the reference top-10);
* ``ours``: ExactHybridSearcher, K' = ``--candidates``, at most K' hits a query (the searcher raises K' to the hits
  asked for), ``--threads`` threads, batches of 64 pre-encoded queries (of up to 4,096 over a flat index larger
  than the memory there is for it, as ``batch_search`` takes them: each search reads that file whole);
* ``pyserini``: Pyserini's HybridSearcher.batch_search over the same faiss index and the Lucene impact index, the
  same pre-encoded queries (``k0`` = K', alpha = 1 / scale^2), ``--threads`` threads.

Memory is sampled every 20 ms from /proc/self/status: peak VmRSS (what ``getrusage`` reports as ru_maxrss) and its
two parts, anonymous memory (the heap: Python, the JVM's heap, the faiss index Pyserini reads into memory) and
file-backed pages (a memory-mapped file's pages the process has touched, our searcher's faiss index among them;
the kernel may drop them under pressure and read them again).
The build is not part of what is measured. Results go to ``--work``/results.json and a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from retromae_ir.cli import Repeatable

BLOCK = 4096  # documents generated per random block (the chunk size of the encode is a multiple)


class Memory:
    """Peaks of VmRSS, RssAnon and RssFile of this process, sampled in a background thread."""

    FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")

    def __init__(self, interval: float = 0.02):
        self.peak = dict.fromkeys(self.FIELDS, 0)
        self.marks = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    @classmethod
    def read(cls) -> dict[str, int]:
        values = {}
        with open("/proc/self/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in cls.FIELDS:
                    values[key] = int(rest.split()[0]) * 1024
        return values

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(interval)

    def sample(self) -> dict[str, int]:
        now = self.read()
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)
        return now

    def mark(self, label: str) -> None:
        self.marks[label] = self.sample()

    def report(self) -> dict:
        self._stop.set()
        self._thread.join()
        self.sample()
        import resource

        return {"peak": self.peak, "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "marks": self.marks}


class Synthetic:
    """Deterministic random documents and queries (numpy Generator seeded by (seed, block))."""

    def __init__(self, args):
        self.docs, self.dims, self.k, self.query_k = args.docs, args.dims, args.k, args.query_k
        self.vocab, self.seed = args.vocab, args.seed
        rng = np.random.default_rng([args.seed, 0])
        by_rank = 1.0 / np.arange(1, args.vocab + 1) ** args.zipf
        self.p = np.empty(args.vocab)
        self.p[rng.permutation(args.vocab)] = by_rank / by_rank.sum()

    def draw_terms(self, rng, rows: int, k: int) -> list[np.ndarray]:
        """Up to ``k`` distinct terms per row: 2k draws with replacement, duplicates dropped, k of the rest kept."""
        draws = np.sort(rng.choice(self.vocab, size=(rows, 2 * k), p=self.p), axis=1)
        priority = rng.random(draws.shape)
        priority[:, 1:][draws[:, 1:] == draws[:, :-1]] = 2.0  # a repeated term is never kept twice
        keep = np.argpartition(priority, k - 1, axis=1)[:, :k]
        terms = np.take_along_axis(draws, keep, axis=1)
        valid = np.take_along_axis(priority, keep, axis=1) < 2.0
        return [np.sort(row[ok]) for row, ok in zip(terms, valid)]

    def block(self, b: int):
        import scipy.sparse

        rng = np.random.default_rng([self.seed, 1, b])
        rows = min(BLOCK, self.docs - b * BLOCK)
        dense = rng.standard_normal((rows, self.dims)).astype(np.float32)
        dense /= np.linalg.norm(dense, axis=1, keepdims=True)
        terms = self.draw_terms(rng, rows, self.k)
        indptr = np.concatenate([[0], np.cumsum([len(t) for t in terms])])
        weights = rng.uniform(0.05, 0.15, indptr[-1]).astype(np.float32)
        return dense, scipy.sparse.csr_matrix((weights, np.concatenate(terms), indptr), shape=(rows, self.vocab))

    def documents(self, start: int, end: int):
        import scipy.sparse

        from retromae_ir.encode.base import Encoded

        blocks = [self.block(b) for b in range(start // BLOCK, (end - 1) // BLOCK + 1)]
        offset = start - (start // BLOCK) * BLOCK
        dense = np.concatenate([d for d, _ in blocks])[offset:offset + end - start]
        sparse = scipy.sparse.vstack([s for _, s in blocks], format="csr")[offset:offset + end - start]
        return Encoded(dense, sparse)

    def queries(self, n: int):
        import scipy.sparse

        from retromae_ir.encode.base import Encoded

        rng = np.random.default_rng([self.seed, 2])
        sources = np.sort(rng.choice(self.docs, size=n, replace=False))
        blocks = {b: self.block(b) for b in np.unique(sources // BLOCK).tolist()}
        source_dense, source_terms = [], []
        for j in sources.tolist():
            dense, sparse = blocks[j // BLOCK]
            source_dense.append(dense[j % BLOCK])
            source_terms.append(sparse[j % BLOCK].indices)
        noise = rng.standard_normal((n, self.dims)).astype(np.float32)
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        dense = np.stack(source_dense) + noise
        dense /= np.linalg.norm(dense, axis=1, keepdims=True)
        rows = []
        for own, drawn in zip(source_terms, self.draw_terms(rng, n, self.query_k)):
            own = rng.choice(own, size=min(len(own), self.query_k // 2), replace=False)
            others = np.setdiff1d(drawn, own)
            others = rng.choice(others, size=min(len(others), self.query_k - len(own)), replace=False)
            rows.append(np.sort(np.concatenate([own, others])))
        indptr = np.concatenate([[0], np.cumsum([len(t) for t in rows])])
        weights = rng.uniform(0.05, 0.15, indptr[-1]).astype(np.float32)
        sparse = scipy.sparse.csr_matrix((weights, np.concatenate(rows), indptr), shape=(n, self.vocab))
        return Encoded(dense.astype(np.float32), sparse), sources


class SyntheticModel:
    """What encode_shard, merge and encode_queries need of an EncoderModel; vectors come from ``Synthetic``."""

    int8 = bf16 = False

    def __init__(self, card, synthetic: Synthetic, queries=None):
        self.card, self.synthetic, self._queries = card, synthetic, queries
        self.vocab = self.lucene_terms = [f"t{i}" for i in range(synthetic.vocab)]  # distinct, no whitespace

    def checkpoint_digests(self) -> dict[str, str]:
        """No checkpoint files: the generator's settings are in the card's checkpoint name, which its fingerprint
        keys."""
        return {}

    def encode_passage(self, texts, batch_size: int = 64, progress: bool = False):
        first = int(texts[0].rsplit(" ", 1)[1])
        return self.synthetic.documents(first, first + len(texts))

    def encode_query(self, texts, batch_size: int = 64, progress: bool = False):
        from retromae_ir.encode.base import Encoded

        rows = [int(text.rsplit(" ", 1)[1]) for text in texts]
        return Encoded(self._queries.dense[rows], self._queries.sparse[rows])


def card_text(args) -> str:
    # the generator's settings go into the checkpoint name, which the card's fingerprint (and so the chunk cache
    # key) covers: other settings never resume onto these chunks. No "/" in it: an owner/name would be looked up on
    # the hub for its weight digests (five retries offline)
    return (f"checkpoint: synthetic-zipf{args.zipf}-seed{args.seed}-vocab{args.vocab}\nkind: dupmae\n"
            f"dims: {args.dims}\npooling: cls\nnormalize: false\nk: {args.k}\nquery_k: {args.query_k}\nscale: 100\n"
            f"description: benchmarks/hybrid_scale.py synthetic documents\n")


def write_json(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path``, atomically: a killed run leaves the old file or none, never half of one."""
    from retromae_ir.io import atomic_write

    with atomic_write(path) as out:
        json.dump(data, out, indent=1)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def build(args) -> dict:
    """The index and the pre-encoded queries under --work (reused when built with the same settings)."""
    from retromae_ir.encode.cards import load_card
    from retromae_ir.encode.corpus import encode_shard, merge
    from retromae_ir.encode.queries import encode_queries
    from retromae_ir.io import claim_output

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    from retromae_ir.encode.representation import ENCODING_VERSION

    settings = {key: getattr(args, key) for key in ("docs", "queries", "dims", "k", "query_k", "vocab", "zipf",
                                                    "seed", "no_lucene")}
    settings["encoding"] = ENCODING_VERSION  # the searchers refuse an index of other encoding code
    done = work / "build.json"
    if done.is_file() and json.loads(done.read_text())["settings"] == settings:
        print(f"reusing the index under {work}", flush=True)
        return json.loads(done.read_text())
    done.unlink(missing_ok=True)  # until the new record, a half-rebuilt index is never taken as the old build
    (work / "card.yaml").write_text(card_text(args))
    card = load_card(work / "card.yaml")
    synthetic = Synthetic(args)
    timings = {}
    start = time.perf_counter()
    queries, sources = synthetic.queries(args.queries)
    model = SyntheticModel(card, synthetic, queries)
    index_dir = work / "index"
    docids = [f"doc{i}" for i in range(args.docs)]
    texts = [f"synthetic document {i}" for i in range(args.docs)]
    with claim_output(index_dir):
        folder = encode_shard(model, docids, texts, index_dir, chunk_size=BLOCK * 4, batch_size=BLOCK)
        timings["generate_s"] = time.perf_counter() - start
        start = time.perf_counter()
        merge(index_dir, card, model.vocab, threads=args.threads, work=folder.parent, lucene=not args.no_lucene,
              extra={"corpus": "synthetic", "bf16": False})
        timings["merge_s"] = time.perf_counter() - start  # faiss + OT store + collection + Lucene + checksums
    topics = {f"q{i}": f"synthetic query {i}" for i in range(args.queries)}
    with claim_output(work / "queries"):
        encode_queries(model, topics, work / "queries")
    np.savez(work / "queries" / "float.npz", dense=queries.dense, data=queries.sparse.data,
             indices=queries.sparse.indices, indptr=queries.sparse.indptr, vocab=args.vocab, sources=sources)
    store = index_dir / "sparse" / "ot"
    sizes = {"dense_flat": du(index_dir / "dense" / "index"), "ot_store": du(store)}
    if not args.no_lucene:
        sizes.update(lucene_impact_index=du(index_dir / "sparse" / "index"),
                     json_vector_collection=du(index_dir / "sparse" / "collection"))
    postings = json.loads((store / "store.json").read_text())["postings"]
    info = {"settings": settings, "timings": timings, "bytes": sizes,
            "bytes_per_doc": {key: value / args.docs for key, value in sizes.items()},
            "postings_per_doc": postings / args.docs, "ot_store_bytes_per_posting": sizes["ot_store"] / postings}
    write_json(done, info)  # the build's "done" marker: whole or absent
    return info


def index_dir(args) -> Path:
    """The index the phases search: the built one, or its copy with another faiss index (--faiss)."""
    return args.work / ("index" if args.faiss == "Flat" else f"index-{args.faiss.replace(',', '-')}")


def with_faiss(args) -> dict:
    """A copy of the index whose dense/index is rebuilt as ``faiss.index_factory(dims, --faiss)`` by
    ``python -m retromae_ir.encode dense-index``'s code (the sparse side, the manifest it rewrites and the flat
    index it reads are links to the built index's)."""
    from retromae_ir.encode.dense_index import rebuild_dense
    from retromae_ir.io import atomic_write

    target = index_dir(args)
    # the copy is of this build (its settings) with this nprobe: any other copy is made again
    key = {"build": json.loads((args.work / "build.json").read_text())["settings"], "faiss": args.faiss,
           "nprobe": args.nprobe}
    made = target / "key.json"
    if args.faiss == "Flat" or (made.is_file() and json.loads(made.read_text()) == key):
        return {}
    shutil.rmtree(target, ignore_errors=True)
    (target / "dense").mkdir(parents=True)
    for name in ("sparse", "manifest.json", "dense/index", "dense/docid"):
        (target / name).symlink_to(args.work / "index" / name)
    start = time.perf_counter()
    rebuild_dense(target, args.faiss, nprobe=args.nprobe, seed=args.seed)
    with atomic_write(made) as out:  # a partial key would fail the next run's json.loads instead of a rebuild
        out.write(json.dumps(key))
    return {f"faiss_{args.faiss}_build_s": time.perf_counter() - start,
            f"faiss_{args.faiss}_bytes_per_doc": du(target / "dense" / "index") / args.docs}


def load_queries(work: Path):
    import scipy.sparse

    from retromae_ir.encode.base import Encoded

    with np.load(work / "queries" / "float.npz") as saved:
        sparse = scipy.sparse.csr_matrix((saved["data"], saved["indices"], saved["indptr"]),
                                         shape=(len(saved["indptr"]) - 1, int(saved["vocab"])))
        return Encoded(saved["dense"], sparse), saved["sources"]


def phase_ours(args, memory: Memory) -> dict:
    import faiss

    from retromae_ir.encode.base import Encoded
    from retromae_ir.search import ExactHybridSearcher

    encoded, _ = load_queries(args.work)
    memory.mark("imported")
    start = time.perf_counter()
    searcher = ExactHybridSearcher(index_dir(args), args.work / "card.yaml", candidates=args.candidates[0],
                                   threads=args.threads)
    load_s = time.perf_counter() - start
    memory.mark("loaded")
    runs = {}

    def search_all() -> list:
        # at most K' hits: the searcher raises K' to the hits asked for, so --hits 1000 would make every K' 1,000
        hits, k = [], min(args.hits, searcher.candidates)
        step = searcher.queries_at_once(64)  # as batch_search takes them
        for first in range(0, len(encoded), step):
            batch = Encoded(encoded.dense[first:first + step], encoded.sparse[first:first + step])
            hits.extend(searcher.search_encoded(batch, k))
        return hits

    search_all()  # untimed, as Pyserini's phase: the first depth is not the only one paying the page faults
    for depth in args.candidates:
        searcher.candidates = depth
        read_before = bytes_read()
        start = time.perf_counter()
        hits = search_all()
        seconds = time.perf_counter() - start
        read_per_query = (bytes_read() - read_before) / len(encoded)
        memory.mark(f"searched K'={depth}")
        start = time.perf_counter()
        faiss.omp_set_num_threads(args.threads)
        searcher.index.dense_search(np.ascontiguousarray(encoded.dense), depth)  # faiss's, or the file scan's
        runs[depth] = {"search_s": seconds, "qps": len(encoded) / seconds, "faiss_alone_s": time.perf_counter() - start,
                       "top10": [[d for d, _ in h[:10]] for h in hits], "bytes_read_per_query": read_per_query}
    store = searcher.index.store
    postings = [store.posting_count(encoded.sparse[q].indices) for q in range(len(encoded))]
    return {"load_s": load_s, "runs": runs, "postings_read_per_query": float(np.mean(postings)),
            "dense_scan": searcher.index.scans_file}


def bytes_read() -> int:
    """Bytes this process has read through read/pread calls (/proc/self/io rchar): page-cache hits included,
    pages of a memory-mapped file not."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def phase_pyserini(args, memory: Memory) -> dict:
    from pyserini.encode import QueryEncoder
    from pyserini.search.faiss import FaissSearcher
    from pyserini.search.hybrid import HybridSearcher
    from pyserini.search.lucene import LuceneImpactSearcher

    topics = {f"q{i}": f"synthetic query {i}" for i in range(args.queries)}
    memory.mark("imported")
    start = time.perf_counter()
    dense = FaissSearcher(str(index_dir(args) / "dense"),
                          QueryEncoder.load_encoded_queries(str(args.work / "queries" / "dense"), verbose=False))
    sparse = LuceneImpactSearcher(str(args.work / "index" / "sparse" / "index"),
                                  str(args.work / "queries" / "sparse.jsonl"), min_idf=-1)
    hybrid = HybridSearcher(dense, sparse)
    load_s = time.perf_counter() - start
    memory.mark("loaded")
    runs = {}
    hybrid.batch_search(list(topics.values()), list(topics), k0=args.candidates[0], k=args.hits,
                        threads=args.threads, alpha=1 / 100 ** 2)  # untimed, as ours
    for depth in args.candidates:
        start = time.perf_counter()
        fused = hybrid.batch_search(list(topics.values()), list(topics), k0=depth, k=args.hits,
                                    threads=args.threads, alpha=1 / 100 ** 2)
        seconds = time.perf_counter() - start
        memory.mark(f"searched K'={depth}")
        top10 = [[h.docid for h in sorted(fused[q], key=lambda h: (-h.score, h.docid))[:10]] for q in topics]
        runs[depth] = {"search_s": seconds, "qps": len(topics) / seconds, "top10": top10}
    return {"load_s": load_s, "runs": runs}


def phase_brute(args, memory: Memory) -> dict:
    from retromae_ir.search import BruteForceScorer, HybridIndex

    encoded, sources = load_queries(args.work)
    index = HybridIndex(index_dir(args), args.work / "card.yaml")
    scorer = BruteForceScorer(index)
    top10 = []
    start = time.perf_counter()
    for first in range(0, len(encoded), 16):
        hits = scorer.search(encoded.dense[first:first + 16], encoded.sparse[first:first + 16], 10)
        top10.extend([[d for d, _ in h] for h in hits])
    source_first = float(np.mean([t[0] == f"doc{j}" for t, j in zip(top10, sources)]))
    return {"search_s": time.perf_counter() - start, "top10": top10, "source_document_first": source_first}


PHASES = {"ours": phase_ours, "pyserini": phase_pyserini, "brute": phase_brute}


def run_phase(args) -> None:
    memory = Memory()
    result = PHASES[args.phase](args, memory)
    result["memory"] = memory.report()
    write_json(args.work / f"phase-{args.phase}.json", result)


def agreement(top10s, reference) -> dict:
    return {"top1_identical": float(np.mean([a[:1] == b[:1] for a, b in zip(top10s, reference)])),
            "top10_identical": float(np.mean([a == b for a, b in zip(top10s, reference)])),
            "recall_at_10_of_exact": float(np.mean([len(set(a) & set(b)) / max(1, len(b))
                                                    for a, b in zip(top10s, reference)]))}


def gib(value: int) -> str:
    return f"{value / 2 ** 30:.3f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/hybrid_scale.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, required=True, help="synthetic documents (N)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--k", type=int, default=384, help="OT terms a document (the card's k)")
    parser.add_argument("--query-k", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--zipf", type=float, default=0.8,
                        help="term probability ~ 1 / rank^zipf (0.8: a posting's term is in 8.3%% of the documents, "
                             "as in the trained scifact chain's stage-2 index, 8.5%%)")
    parser.add_argument("--candidates", type=int, nargs="+", action=Repeatable,
                        default=[100, 1000], help="K' of both searchers")
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="default: /tmp/hybrid_scale-<docs>")
    parser.add_argument("--no-lucene", action="store_true",
                        help="write no Lucene index (the OT store streamed from the chunks) and skip Pyserini")
    parser.add_argument("--faiss", default="Flat",
                        help="faiss.index_factory string of the dense index both searchers use (default Flat, what "
                             "merge writes; e.g. SQfp16, HNSW32,Flat, IVF4096,Flat with --nprobe)")
    parser.add_argument("--nprobe", type=int, default=None, help="lists an IVF index searches")
    parser.add_argument("--skip", nargs="*", action=Repeatable,
                        default=[], choices=sorted(PHASES), help="phases not to run")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)  # a child process's phase
    args = parser.parse_args(argv)
    args.work = (args.work or Path(f"/tmp/hybrid_scale-{args.docs}")).resolve()
    if args.phase:
        run_phase(args)
        return 0
    info = build(args)
    info["timings"].update(with_faiss(args))
    print(json.dumps({key: info[key] for key in ("timings", "bytes_per_doc", "postings_per_doc")}), flush=True)
    skip = set(args.skip) | ({"pyserini"} if args.no_lucene else set())
    results = {"build": info}
    for phase in ("brute", "ours", "pyserini"):
        if phase in skip:
            continue
        command = [sys.executable, os.path.abspath(__file__), "--phase", phase, *(argv or sys.argv[1:])]
        start = time.perf_counter()
        done = subprocess.run(command)
        if done.returncode != 0:
            raise SystemExit(f"phase {phase} failed (exit {done.returncode})")
        results[phase] = json.loads((args.work / f"phase-{phase}.json").read_text())
        results[phase]["wall_s"] = time.perf_counter() - start
        print(f"{phase} done in {results[phase]['wall_s']:.1f} s", flush=True)
    for phase in ("ours", "pyserini"):
        for run in results.get(phase, {}).get("runs", {}).values():
            if "brute" in results:
                run.update(agreement(run["top10"], results["brute"]["top10"]))
            run.pop("top10")
    results.get("brute", {}).pop("top10", None)
    write_json(args.work / "results.json", results)
    print(table(args, results))
    return 0


def table(args, results: dict) -> str:
    lines = [f"N = {args.docs:,} documents, faiss {args.faiss}{f' nprobe {args.nprobe}' if args.nprobe else ''}, "
             f"{args.queries} queries, dims {args.dims}, k {args.k}, query_k "
             f"{args.query_k}, zipf {args.zipf}, {args.threads} threads; OT store "
             f"{results['build']['bytes_per_doc']['ot_store']:.0f} bytes/doc, "
             f"{results['build']['postings_per_doc']:.1f} postings/doc",
             "", "| searcher | K' | q/s | top-1 identical to brute force | top-10 identical | R@10 of exact |",
             "| --- | --- | --- | --- | --- | --- |"]
    memory = ["", "| searcher | load s | anon after imports GiB | anon after load GiB | peak anon GiB | "
                  "peak file-backed GiB | peak RSS GiB |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for phase, name in (("ours", "exact hybrid (ours)"), ("pyserini", "Pyserini HybridSearcher")):
        if phase not in results:
            continue
        r = results[phase]
        for depth, run in r["runs"].items():
            lines.append(f"| {name} | {depth} | {run['qps']:.2f} | {run.get('top1_identical', float('nan')):.3f} | "
                         f"{run.get('top10_identical', float('nan')):.3f} | "
                         f"{run.get('recall_at_10_of_exact', float('nan')):.3f} |")
        peak, marks = r["memory"]["peak"], r["memory"]["marks"]
        memory.append(f"| {name} | {r['load_s']:.2f} | {gib(marks['imported']['RssAnon'])} | "
                      f"{gib(marks['loaded']['RssAnon'])} | {gib(peak['RssAnon'])} | {gib(peak['RssFile'])} | "
                      f"{gib(peak['VmHWM'])} |")
    lines += memory
    if "ours" in results:
        faiss_s = ", ".join(f"K'={d}: {run['faiss_alone_s']:.2f} s of {run['search_s']:.2f} s, "
                            f"{run.get('bytes_read_per_query', 0) / 2 ** 20:.1f} MiB read a query"
                            for d, run in results["ours"]["runs"].items())
        lines.append(f"\nours: faiss alone {faiss_s}; {results['ours']['postings_read_per_query']:,.0f} postings read "
                     f"a query")
    if "brute" in results:
        lines.append(f"brute force: {results['brute']['search_s']:.1f} s; the query's source document first for "
                     f"{results['brute']['source_document_first']:.3f} of the queries")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
