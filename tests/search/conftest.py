"""One small index for every search test: six documents on unrelated topics, one matching query each,
encoded with a DupMAE card over the packaged MiniLM (short lengths) through our CLI entry points (in process;
the Lucene indexing they run is a subprocess)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CORPUS = HERE / "handful_corpus.jsonl"
TOPICS = HERE / "handful_topics.tsv"
CARD = """checkpoint: packaged:all-MiniLM-L6-v2
kind: dupmae
dims: 384
k: 64
query_k: 32
scale: 100
max_query_length: 32
max_passage_length: 64
"""


def _run_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="session")
def run_cli():
    """Run ``python ARGS`` in a fresh interpreter of this environment; fail with its output on a non-zero exit."""
    return _run_cli


@pytest.fixture(scope="session")
def handful(tmp_path_factory):
    """(card path, index dir, encoded-queries dir, topics path, {qid: the docid it is about})."""
    root = tmp_path_factory.mktemp("handful")
    card = root / "handful-card.yaml"
    card.write_text(CARD)
    from retromae_ir.encode.__main__ import main

    assert main(["corpus", "--encoder", str(card), "--corpus", str(CORPUS), "--output", str(root / "index"),
                 "--chunk-size", "4"]) == 0
    assert main(["queries", "--encoder", str(card), "--topics", str(TOPICS), "--output", str(root / "queries")]) == 0
    expected = {line.split("\t")[0]: "d-" + line.split("\t")[0][2:] for line in TOPICS.read_text().splitlines()}
    return card, root / "index", root / "queries", TOPICS, expected
