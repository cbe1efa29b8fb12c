"""Evaluate one retriever over BEIR datasets: resolve, retrieve, write runs, score, tabulate.

A retriever is anything with a ``name`` and ``retrieve(corpus, index_name, queries) -> run``; the suite
owns everything around it (data resolution, run files, skipping finished datasets, cqadupstack averaging,
tables), so BM25 and the neural encoders share it. A dataset that cannot give a valid result (empty corpus, no hits
at all, malformed files) is "failed", listed with the reason, and leaves no run file to be reused.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pandas as pd

from retromae_ir.data.beir import BEIR_DATASETS, BeirPart, DatasetUnavailable, get_beir_dataset, resolve_beir
from retromae_ir.data.readers import load_beir_queries, load_qrels
from retromae_ir.evaluate.metrics import evaluate_run
from retromae_ir.evaluate.references import REFERENCE_COLUMNS
from retromae_ir.evaluate.report import write_bar_chart, write_table
from retromae_ir.evaluate.runs import cached_run, require_documents, run_key
from retromae_ir.runs import remove_self_hits

logger = logging.getLogger(__name__)

SUITE_METRICS = ("ndcg@10", "recall@100")
Run = dict[str, dict[str, float]]


class Retriever(Protocol):
    name: str

    def retrieve(self, corpus: Path, index_name: str, queries: dict[str, str]) -> Run:
        """Top documents of ``corpus`` for each query; indexes it builds are kept under ``index_name``."""

    def run_key(self, corpus: Path) -> dict:
        """Everything but the queries that its runs of ``corpus`` depend on (the run cache's key)."""


@dataclass
class DatasetResult:
    dataset: str
    status: str  # "ok", "reused", "missing" (not found) or "failed" (no valid result)
    metrics: dict[str, float] = field(default_factory=dict)
    queries: int = 0
    reason: str = ""
    no_hits: int = 0  # judged queries the run has no hits for (scored 0)

    @property
    def evaluated(self) -> bool:
        return self.status in ("ok", "reused")


def judged_queries(folder: Path, split: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The split's judged queries and their qrels (BEIR's queries.jsonl holds every split's queries)."""
    qrels = load_qrels(folder / "qrels" / f"{split}.tsv")
    queries = load_beir_queries(folder / "queries.jsonl")
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise ValueError(f"{folder / 'queries.jsonl'}: {len(missing)} judged queries have no text, e.g. {missing[0]!r}")
    return {qid: queries[qid] for qid in qrels}, qrels


class BeirSuite:
    """Runs ``retriever`` over datasets, writing ``runs_dir/beir-<part>.trec`` and the results tables."""

    def __init__(self, retriever: Retriever, runs_dir: Path, data_dir: Path | None = None,
                 force: bool = False, download: bool = True):
        self.retriever = retriever
        self.runs_dir = Path(runs_dir)
        self.data_dir = data_dir
        self.force = force
        self.download = download

    def run_part(self, part: BeirPart, folder: Path, drop_self_hits: bool) -> DatasetResult:
        """One part's result, reusing its run file unless ``force``; raises ``ValueError`` when it has none."""
        queries, qrels = judged_queries(part.folder(folder), part.split)
        corpus = part.folder(folder) / "corpus.jsonl"
        require_documents(corpus)

        def retrieve():
            run = self.retriever.retrieve(corpus, part.name, queries)
            return remove_self_hits(run) if drop_self_hits else run

        key = run_key(self.retriever, corpus, queries, drop_self_hits=drop_self_hits)
        cached = cached_run(self.runs_dir / f"beir-{part.name}.trec", retrieve, queries, self.retriever.name[:12],
                            key, self.force)
        return DatasetResult(part.name, "reused" if cached.reused else "ok",
                             evaluate_run(cached.run, qrels, SUITE_METRICS), len(queries), no_hits=len(cached.no_hits))

    def run_dataset(self, name: str) -> DatasetResult:
        dataset = get_beir_dataset(name)
        try:
            folder = resolve_beir(name, self.data_dir, download=self.download)
        except DatasetUnavailable as exc:
            logger.warning("%s: skipped: %s", name, exc)
            return DatasetResult(name, "missing", reason=str(exc))
        try:
            parts = [self.run_part(part, folder, dataset.drop_self_hits) for part in dataset.parts]
        except ValueError as exc:  # EvaluationError, DataFormatError
            logger.error("%s: failed: %s", name, exc)
            return DatasetResult(name, "failed", reason=str(exc))
        # cqadupstack: BEIR reports the mean of its subforums' scores
        metrics = {m: sum(p.metrics[m] for p in parts) / len(parts) for m in SUITE_METRICS}
        status = "reused" if all(p.status == "reused" for p in parts) else "ok"
        return DatasetResult(name, status, metrics, sum(p.queries for p in parts), no_hits=sum(p.no_hits for p in parts))

    def run(self, names: list[str] | None = None) -> list[DatasetResult]:
        """Each dataset once, in the order first named (a name given twice would count twice in the average)."""
        from tqdm import tqdm

        names = list(dict.fromkeys(names or BEIR_DATASETS))
        results = []
        for name in tqdm(names, desc=f"BEIR {self.retriever.name}", unit="dataset"):
            result = self.run_dataset(name)
            if result.evaluated:
                logger.info("%s: %s", name, ", ".join(f"{m} {v:.4f}" for m, v in result.metrics.items()))
            results.append(result)
        return results


def results_frame(results: list[DatasetResult], retriever_name: str) -> pd.DataFrame:
    """One row per evaluated dataset plus an average row, with the published reference columns beside ours."""
    done = [r for r in results if r.evaluated]
    rows = [{"dataset": r.dataset, "queries": r.queries,
             **{f"{m} ({retriever_name})": r.metrics[m] for m in SUITE_METRICS},
             **{col: ref.get(r.dataset) for col, ref in REFERENCE_COLUMNS.items()}} for r in done]
    frame = pd.DataFrame(rows)
    if rows:
        average = {"dataset": f"average ({len(done)} of {len(BEIR_DATASETS)})", "queries": frame["queries"].sum()}
        for column in frame.columns[2:]:
            # an average only where the column covers every evaluated dataset, so averages compare like for like
            average[column] = frame[column].dropna().mean() if frame[column].notna().all() else None
        frame = pd.concat([frame, pd.DataFrame([average])], ignore_index=True)
    return frame


def result_notes(results: list[DatasetResult]) -> list[str]:
    """One line per dataset not evaluated (with the reason) and per dataset with judged queries left without hits."""
    notes = [f"not evaluated: {r.dataset}: {r.reason}" for r in results if not r.evaluated]
    return notes + [f"{r.dataset}: {r.no_hits} of {r.queries} judged queries have no hits (scored 0)"
                    for r in results if r.evaluated and r.no_hits]


def write_results(results: list[DatasetResult], retriever_name: str, out_dir: Path) -> pd.DataFrame:
    """``out_dir``/beir-results.{md,csv,png}; datasets not evaluated are listed with the reason under the table,
    and so are judged queries without hits."""
    frame = results_frame(results, retriever_name)
    notes = ["nDCG@10 and R@100 on each dataset's test split; cqadupstack is the mean of its 12 subforums; "
             "a hit whose docid is the query's id is removed on every dataset, as BEIR and Pyserini do.",
             *result_notes(results)]
    if len(frame):
        write_table(frame, Path(out_dir) / "beir-results", f"BEIR: {retriever_name}", notes)
        ndcg = f"ndcg@10 ({retriever_name})"
        columns = [ndcg] + [c for c in REFERENCE_COLUMNS if frame[c].notna().any()]
        write_bar_chart(frame, "dataset", columns, Path(out_dir) / "beir-results.png", "nDCG@10",
                        f"BEIR nDCG@10: {retriever_name}")
    return frame
