"""``benchmarks/hybrid_scale.py`` end to end on a tiny synthetic corpus: it builds a real index through the
toolkit's own writing code and the exact searcher returns brute force's top 10 (the benchmark was broken for a
week by a model interface it did not follow, and no test ran it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(work: Path, *extra: str) -> dict:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "hybrid_scale.py"), "--docs", "200",
                           "--queries", "10", "--vocab", "1000", "--work", str(work), "--skip", "pyserini",
                           "--no-lucene", "--candidates", "100", "--threads", "1", *extra],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(  # this checkout's code first
                              filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((work / "results.json").read_text())


def test_tiny_run_builds_and_the_exact_searcher_matches_brute_force(tmp_path):
    work = tmp_path / "work"
    results = _run(work)
    assert results["build"]["settings"]["docs"] == 200
    run = results["ours"]["runs"]["100"]
    assert (run["top1_identical"], run["top10_identical"], run["recall_at_10_of_exact"]) == (1.0, 1.0, 1.0)
    assert results["brute"]["source_document_first"] > 0.5  # each query is about one synthetic document
    built = {path: path.read_bytes() for path in (work / "index").rglob("*") if path.is_file()}
    flat = (work / "index" / "dense" / "index").read_bytes()
    results = _run(work, "--faiss", "SQfp16")  # the same build, its dense index rebuilt in a copy
    assert results["build"]["timings"]["faiss_SQfp16_bytes_per_doc"] < 0.6 * len(flat) / 200
    assert {path: path.read_bytes() for path in (work / "index").rglob("*") if path.is_file()} == built  # as it was
    assert json.loads((work / "index-SQfp16" / "manifest.json").read_text())["dense_index"] == "SQfp16"
    run = results["ours"]["runs"]["100"]
    assert (run["top10_identical"], run["recall_at_10_of_exact"]) == (1.0, 1.0)  # brute force reads the same fp16
