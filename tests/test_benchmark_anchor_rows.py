"""benchmarks/finetune_anchor.py prints a chain's rows beside the sentence-transformers anchor, which it scores over
the whole corpus: a chain over a sub-corpus is refused, not printed beside it (0.83 against 0.67, exit 0)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def chain_rows():
    spec = importlib.util.spec_from_file_location("benchmark_finetune_anchor", REPO / "benchmarks" / "finetune_anchor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.chain_rows


def results(corpus_docs: int) -> dict:
    stage = {"settings": {"corpus_docs": corpus_docs}, "wall_s": 60.0, "eval_wall_s": 9.0,
             "dense": {"ndcg@10": 0.7}, "hybrid": {"ndcg@10": 0.71}}
    return {"baseline-bm25": {"settings": {"corpus_docs": corpus_docs}, "sparse": {"ndcg@10": 0.67}}, "1-stage1": stage}


def test_a_whole_corpus_chain_is_printed_and_a_sub_corpus_chain_refused(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results(0)))
    assert chain_rows()(path) == ["| ours, 1-stage1 | 0.7000 /  / 0.7100 | 60 | 9 |"]
    path.write_text(json.dumps(results(1000)))
    with pytest.raises(SystemExit, match="a chain over a 1000-document sub-corpus; the anchor is scored over the whole"):
        chain_rows()(path)
