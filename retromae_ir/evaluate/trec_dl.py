"""TREC Deep Learning 2019/2020 and MS MARCO dev-subset evaluation over an MS MARCO passage collection.

Topics and qrels come from local files (``--topics-dir``, then ``$RETROMAE_IR_TOPICS``; Anserini's file names, as in
shared/data/topics-and-qrels) or, with a network, from Pyserini by name. Only judged queries are searched (DL19 has
43 judged of 200). DL uses the TREC convention (relevance >= 2 for MAP and recall); dev uses MRR@10 and R@1000.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from retromae_ir.data.readers import DataFormatError, load_qrels, load_topics
from retromae_ir.evaluate.metrics import TREC_DL_MIN_RELEVANCE, evaluate_run
from retromae_ir.evaluate.runs import cached_run, require_documents, run_key


@dataclass(frozen=True)
class TopicSet:
    name: str
    topics_file: str      # Anserini's file name
    qrels_file: str
    pyserini_name: str    # what pyserini.search.get_topics / get_qrels_file know
    min_relevance: int
    metrics: tuple[str, ...]


TOPIC_SETS = {t.name: t for t in (
    TopicSet("dl19", "topics.dl19-passage.txt", "qrels.dl19-passage.txt", "dl19-passage",
             TREC_DL_MIN_RELEVANCE, ("ndcg@10", "map", "recall@1000")),
    TopicSet("dl20", "topics.dl20.txt", "qrels.dl20-passage.txt", "dl20-passage",
             TREC_DL_MIN_RELEVANCE, ("ndcg@10", "map", "recall@1000")),
    TopicSet("msmarco-dev", "topics.msmarco-passage.dev-subset.txt", "qrels.msmarco-passage.dev-subset.txt",
             "msmarco-passage-dev-subset", 1, ("mrr@10", "recall@1000")),
)}


def local_topics_dir(topics_dir: str | os.PathLike | None) -> Path | None:
    if topics_dir is not None:
        return Path(topics_dir)
    return Path(os.environ["RETROMAE_IR_TOPICS"]) if os.environ.get("RETROMAE_IR_TOPICS") else None


def load_topic_set(topic_set: TopicSet, topics_dir: str | os.PathLike | None = None
                   ) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Judged topics and qrels of ``topic_set``, from local files when a folder is given, else from Pyserini. A
    judged query missing from the topics is an error: left out, it would leave the mean too (a wrong figure)."""
    folder = local_topics_dir(topics_dir)
    topics_path = qrels_path = topic_set.pyserini_name
    if folder is not None:
        topics_path, qrels_path = folder / topic_set.topics_file, folder / topic_set.qrels_file
        for path in (topics_path, qrels_path):
            if not path.is_file():
                raise FileNotFoundError(f"{path} not found: {topic_set.name} needs {topic_set.topics_file} and "
                                        f"{topic_set.qrels_file} in {folder}")
        topics, qrels = load_topics(topics_path), load_qrels(qrels_path)
    else:
        from pyserini.search import get_qrels_file, get_topics

        topics = {str(q): t["title"] for q, t in get_topics(topic_set.pyserini_name).items()}
        qrels = load_qrels(get_qrels_file(topic_set.pyserini_name))
    missing = sorted(set(qrels) - set(topics))
    if missing:
        raise DataFormatError(f"{qrels_path} judges {len(missing)} queries that {topics_path} lacks (e.g. "
                              f"{missing[0]!r}): the topics file is incomplete or of another set")
    return {qid: text for qid, text in topics.items() if qid in qrels}, qrels


def evaluate_topic_set(retriever, collection: Path, topic_set: TopicSet, runs_dir: Path,
                       topics_dir: str | os.PathLike | None = None, force: bool = False) -> dict[str, float]:
    """Search (or reuse the run file of) one topic set and score it; writes ``runs_dir/<set>.trec`` only for a
    valid run (see ``cached_run``)."""
    topics, qrels = load_topic_set(topic_set, topics_dir)
    require_documents(collection)
    cached = cached_run(Path(runs_dir) / f"{topic_set.name}.trec",
                        lambda: retriever.retrieve(Path(collection), "msmarco-passage", topics), topics,
                        retriever.name[:12], run_key(retriever, collection, topics), force)
    scores = evaluate_run(cached.run, qrels, topic_set.metrics, topic_set.min_relevance)
    return {"queries": len(topics), **scores}
