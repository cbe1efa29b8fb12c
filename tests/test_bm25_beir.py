"""BM25 through real Lucene and the BEIR driver: a tiny BEIR dataset end to end, reuse, missing datasets,
and the published scifact figures reproduced."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "eval"))
import beir_all  # noqa: E402

from retromae_ir.runs import validate_trec_run  # noqa: E402

DOCS = {
    "d1": ("Aardvarks", "The aardvark digs burrows and eats termites at night."),
    "d2": ("Lucene", "Lucene builds inverted indexes for full text search."),
    "d3": ("Pyserini", "Pyserini wraps Anserini so Python users can search Lucene indexes."),
    "d4": ("Masked auto-encoders", "RetroMAE pre-trains retrieval models with masked auto-encoding."),
    "q2": ("A document whose id is a query id", "termites and aardvarks"),
}
QUERIES = {"q1": "what do aardvarks eat", "q2": "termites aardvark", "q3": "masked auto-encoding retrieval"}
QRELS = [("q1", "d1", 1), ("q2", "d1", 1), ("q3", "d4", 1)]


def write_beir(folder: Path) -> None:
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for docid, (title, text) in DOCS.items():
            handle.write(json.dumps({"_id": docid, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for qid, text in QUERIES.items():
            handle.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in QRELS]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")


@pytest.fixture()
def tiny_beir(tmp_path, monkeypatch) -> Path:
    # "quora" so that the query's own document is removed, as BEIR and Pyserini do on every dataset
    write_beir(tmp_path / "data" / "quora")
    monkeypatch.delenv("RETROMAE_IR_DATA", raising=False)
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.jvm
def test_bm25_on_a_tiny_beir_dataset_then_reuse(tiny_beir, capsys, monkeypatch):
    argv = ["--datasets", "quora", "bioasq", "--data-dir", str(tiny_beir / "data"), "--runs-dir",
            str(tiny_beir / "runs"), "--index-dir", str(tiny_beir / "indexes"), "--no-download", "--threads", "1"]
    assert beir_all.main(argv) == 2  # bioasq was asked for and cannot be had: quora's table, and an error
    out = capsys.readouterr().out
    run_path = tiny_beir / "runs" / "bm25" / "beir-quora.trec"
    summary = validate_trec_run(run_path)
    assert summary.topics == 3
    lines = [line.split() for line in run_path.read_text().splitlines()]
    top = {line[0]: line[2] for line in lines if line[3] == "1"}
    assert top == {"q1": "d1", "q2": "d1", "q3": "d4"}
    assert not any(line[0] == line[2] for line in lines)  # q2 never retrieves the document "q2"
    assert "| quora | 3 | 1.0000 | 1.0000 |" in out
    assert "not evaluated: bioasq" in out and "not publicly downloadable" in out
    for suffix in ("md", "csv", "png"):
        assert (tiny_beir / "runs" / "bm25" / f"beir-results.{suffix}").stat().st_size > 0

    # second run: the run file is re-scored, nothing is indexed or searched again
    import retromae_ir.bm25 as bm25

    def no_search(*args, **kwargs):
        raise AssertionError("searched again")

    monkeypatch.setattr(bm25.BM25Searcher, "search", no_search)
    monkeypatch.setattr(bm25, "build_index", no_search)
    assert beir_all.main(["--datasets", "quora"] + argv[3:]) == 0
    assert "| quora | 3 | 1.0000 | 1.0000 |" in capsys.readouterr().out


@pytest.mark.jvm
def test_index_is_reused_when_the_corpus_is_unchanged_and_rebuilt_when_it_changes(tiny_beir):
    from retromae_ir.bm25 import MANIFEST, build_index

    corpus = tiny_beir / "data" / "quora" / "corpus.jsonl"
    index = build_index(corpus, tiny_beir / "idx", threads=1)
    stamp = (index / MANIFEST).stat().st_mtime_ns
    assert build_index(corpus, tiny_beir / "idx", threads=1) == index
    assert (index / MANIFEST).stat().st_mtime_ns == stamp
    with open(corpus, "a") as handle:
        handle.write(json.dumps({"_id": "d5", "title": "", "text": "new"}) + "\n")
    build_index(corpus, tiny_beir / "idx", threads=1)
    assert json.loads((index / MANIFEST).read_text())["documents"] == 6
    # the same corpus under another Pyserini (its analyzer decides the terms) or collection writer: built again
    manifest = json.loads((index / MANIFEST).read_text())
    assert manifest["fingerprint"]["pyserini"] and manifest["fingerprint"]["collection"] == 1
    manifest["fingerprint"]["pyserini"] = "0.0.1"
    (index / MANIFEST).write_text(json.dumps(manifest))
    build_index(corpus, tiny_beir / "idx", threads=1)
    assert json.loads((index / MANIFEST).read_text())["fingerprint"]["pyserini"] != "0.0.1"


def test_a_corpus_changed_while_it_is_indexed_leaves_no_index(tiny_beir, monkeypatch):
    """The fingerprint was taken before the collection was read: the edited corpus's index was kept under it."""
    import retromae_ir.bm25 as bm25
    from retromae_ir.io import InputChangedError

    corpus = tiny_beir / "data" / "quora" / "corpus.jsonl"
    write_collection = bm25.write_json_collection

    def write_then_edit(*args, **kwargs):
        count = write_collection(*args, **kwargs)
        with open(corpus, "a") as handle:
            handle.write(json.dumps({"_id": "d9", "title": "", "text": "late"}) + "\n")
        return count

    monkeypatch.setattr(bm25, "write_json_collection", write_then_edit)
    with pytest.raises(InputChangedError, match=r"corpus.jsonl changed while it was indexed"):
        bm25.build_index(corpus, tiny_beir / "idx", threads=1)
    assert not (tiny_beir / "idx").exists() or not any((tiny_beir / "idx").iterdir())


@pytest.mark.jvm
def test_a_bm25_index_replaced_while_it_was_opened_is_an_error(tiny_beir, monkeypatch):
    import retromae_ir.bm25 as bm25

    corpus = tiny_beir / "data" / "quora" / "corpus.jsonl"
    assert bm25.open_searcher(corpus, tiny_beir / "idx", threads=1).search({"q": "aardvark"})["q"]
    real_init = bm25.BM25Searcher.__init__

    def replaced_meanwhile(self, index_dir, *args, **kwargs):
        real_init(self, index_dir, *args, **kwargs)
        (index_dir / bm25.MANIFEST).write_text("{}")  # another corpus's index under the same folder

    monkeypatch.setattr(bm25.BM25Searcher, "__init__", replaced_meanwhile)
    with pytest.raises(RuntimeError, match="was replaced by another process"):
        bm25.open_searcher(corpus, tiny_beir / "idx", threads=1)


@pytest.mark.jvm
@pytest.mark.slow
def test_bm25_flat_reproduces_pyserini_on_scifact(shared_data, tmp_path, capsys):
    """Pyserini's published BEIR BM25 flat figures for scifact: nDCG@10 0.6789, R@100 0.9253."""
    argv = ["--datasets", "scifact", "--data-dir", str(shared_data / "beir"), "--runs-dir", str(tmp_path / "runs"),
            "--index-dir", str(tmp_path / "indexes"), "--no-download"]
    assert beir_all.main(argv) == 0
    assert "| scifact | 300 | 0.6789 | 0.9253 | 0.6789 |" in capsys.readouterr().out


def test_other_bm25_parameters_get_their_own_runs_folder(tmp_path):
    """`eval/beir_all.py --retriever bm25 --k1 1.2` used to write runs/bm25/, replacing the default parameters'
    table (the one the README cites) with figures whose notes never named k1."""
    from retromae_ir.bm25 import BM25Params, BM25Retriever

    assert BM25Retriever(tmp_path).name == "bm25"
    assert BM25Retriever(tmp_path, BM25Params(k1=1.2, b=0.75)).name == "bm25-k1_1.2-b_0.75"
    assert BM25Retriever(tmp_path, BM25Params(hits=100)).name == "bm25"  # the depth is the run key's, not a name
