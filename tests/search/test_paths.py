"""The known document comes first through every path: faiss, Lucene impact, Pyserini's hybrid CLI, exact hybrid."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retromae_ir.encode.manifest import read_manifest
from retromae_ir.evaluate import read_trec_run, validate_trec_run
from retromae_ir.io import file_digest

pytestmark = pytest.mark.jvm


def first(run: dict) -> dict:
    return {qid: max(hits.items(), key=lambda kv: kv[1])[0] for qid, hits in run.items()}


def test_index_layout_manifest_and_checksums(handful):
    card, index, queries, _, expected = handful
    manifest = read_manifest(index)
    assert manifest["documents"] == 6 and manifest["dims"] == 384 and manifest["k"] == 64 and manifest["scale"] == 100
    for rel, digest in manifest["files"].items():
        assert file_digest(index / rel) == digest
    assert (index / "dense" / "docid").read_text().split() == [f"d-{q[2:]}" for q in expected]
    for line in (index / "sparse" / "collection" / "docs.jsonl").read_text().splitlines():
        vector = json.loads(line)["vector"]
        assert 0 < len(vector) <= 64 and all(isinstance(w, int) and w > 0 for w in vector.values())


def test_pre_encoded_queries_are_in_pyserini_formats(handful):
    _, _, queries, topics, _ = handful
    frame = pd.read_pickle(queries / "dense" / "embedding.pkl")
    assert frame["text"].dtype == object and len(frame) == 6
    assert frame["embedding"][0].dtype == np.float32 and frame["embedding"][0].shape == (384,)
    for line in (queries / "sparse.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["contents"] and all(isinstance(w, int) for w in record["vector"].values())


def test_faiss_searcher_with_our_query_encoder_and_with_pre_encoded_queries(handful):
    from pyserini.encode import QueryEncoder
    from pyserini.search.faiss import FaissSearcher

    from retromae_ir.encode.pyserini_registry import RetroMAEQueryEncoder

    card, index, queries, topics, expected = handful
    texts = dict(line.split("\t") for line in topics.read_text().splitlines())
    for encoder in (RetroMAEQueryEncoder(f"retromae_ir:{card}"), QueryEncoder.load_encoded_queries(str(queries / "dense"))):
        searcher = FaissSearcher(str(index / "dense"), encoder)
        assert {qid: searcher.search(text, 3)[0].docid for qid, text in texts.items()} == expected


def test_impact_searcher_by_encoder_name_and_by_pre_encoded_file(handful):
    from pyserini.search.lucene import LuceneImpactSearcher

    card, index, queries, topics, expected = handful
    texts = dict(line.split("\t") for line in topics.read_text().splitlines())
    for encoder in (f"retromae_ir-sparse:{card}", str(queries / "sparse.jsonl")):
        searcher = LuceneImpactSearcher(str(index / "sparse" / "index"), encoder, min_idf=-1)
        assert {qid: searcher.search(text, 3)[0].docid for qid, text in texts.items()} == expected


def test_pyserini_hybrid_cli_finds_our_encoders_by_name(handful, tmp_path, run_cli):
    """A Pyserini CLI in a fresh process resolves retromae_ir:/retromae_ir-sparse: names (the start-up hook)."""
    card, index, _, topics, expected = handful
    run = tmp_path / "hybrid.txt"
    run_cli("-m", "pyserini.search.hybrid",
            "dense", "--index", str(index / "dense"), "--encoder", f"retromae_ir:{card}", "--device", "cpu",
            "sparse", "--index", str(index / "sparse" / "index"), "--impact", "--encoder",
            f"retromae_ir-sparse:{card}", "--min-idf", "-1",
            "fusion", "--alpha", str(1 / 100 ** 2),
            "run", "--topics", str(topics), "--output", str(run), "--hits", "6")
    validate_trec_run(run)
    assert first(read_trec_run(run)) == expected


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
def test_exact_hybrid_cli(handful, tmp_path, mode, capsys):
    from retromae_ir.search.__main__ import main

    card, index, _, topics, expected = handful
    run = tmp_path / f"{mode}.txt"
    main(["--index", str(index), "--encoder", str(card), "--topics", str(topics), "--output", str(run),
          "--mode", mode, *(["--candidates", "2"] if mode == "hybrid" else [])])
    summary = validate_trec_run(run)
    assert first(read_trec_run(run)) == expected
    assert summary is not None
    # a long search shows its progress and keeps a log beside the run (it had neither)
    assert f"search {mode}: 100%" in capsys.readouterr().err
    assert f"{index}" in Path(f"{run}.log").read_text()


@pytest.mark.parametrize("extra", [["--mode", "dense"], ["--mode", "sparse"], ["--brute-force"]])
def test_candidates_outside_the_hybrid_search_are_refused(tmp_path, capsys, extra):
    """K' only exists for the exact hybrid's union of two top lists: given to a one-sided or brute-force search it
    was accepted and did nothing."""
    from retromae_ir.search.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--index", str(tmp_path), "--encoder", "x", "--topics", "t", "--output", str(tmp_path / "run"),
              "--candidates", "10", *extra])
    assert exit_.value.code == 2 and "--candidates (K') applies to --mode hybrid" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [[], ["--brute-force", "--batch-size", "2"], ["--mode", "dense"]])
def test_remove_query_drops_self_hits_and_keeps_the_hits_asked_for(handful, tmp_path, extra):
    """Queries named as the documents they are about (ArguAna's and Quora's case): --remove-query drops each
    query's own document and still writes --hits hits (the docs pointed here for it; the flag did not exist)."""
    from retromae_ir.search.__main__ import main

    card, index, _, topics, expected = handful
    own = tmp_path / "own.tsv"  # each topic under the id of the document it is about
    own.write_text("".join(f"{expected[qid]}\t{text}" + "\n" for qid, text in
                           (line.split("\t", 1) for line in topics.read_text().splitlines())))
    kept, dropped = tmp_path / "kept.txt", tmp_path / "dropped.txt"
    for path, flag in ((kept, []), (dropped, ["--remove-query"])):
        main(["--index", str(index), "--encoder", str(card), "--topics", str(own), "--output", str(path),
              "--hits", "3", *flag, *extra])
    with_self, without = read_trec_run(kept), read_trec_run(dropped)
    assert all(next(iter(hits)) == qid for qid, hits in with_self.items())  # its own document first
    for qid, hits in without.items():
        assert qid not in hits and len(hits) == 3
        assert list(hits)[:2] == [d for d in with_self[qid] if d != qid][:2]


def test_brute_force_cli_matches_exact_cli(handful, tmp_path):
    from retromae_ir.search.__main__ import main

    card, index, _, topics, _ = handful
    runs = {}
    for extra in ([], ["--brute-force"]):
        path = tmp_path / f"run{len(extra)}.txt"
        main(["--index", str(index), "--encoder", str(card), "--topics", str(topics), "--output", str(path),
              "--hits", "6", *extra])
        runs[len(extra)] = read_trec_run(path)
    for qid, hits in runs[0].items():
        assert list(hits) == list(runs[1][qid])
        assert np.allclose(list(hits.values()), list(runs[1][qid].values()), atol=1e-4)
