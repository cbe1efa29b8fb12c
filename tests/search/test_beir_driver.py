"""The BEIR driver with an encoder card: encode, index, exact hybrid search, score; then resume without encoding
or searching, and re-search (--force) without re-encoding."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
HANDFUL = Path(__file__).parent
sys.path.insert(0, str(REPO / "eval"))
import beir_all  # noqa: E402

@pytest.fixture()
def beir_handful(tmp_path, handful) -> Path:
    """The search tests' six documents as a BEIR dataset (under a registered name) with one relevant doc per query."""
    folder = tmp_path / "data" / "scidocs"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text((HANDFUL / "handful_corpus.jsonl").read_text())
    topics = [line.split("\t") for line in (HANDFUL / "handful_topics.tsv").read_text().splitlines()]
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in topics))
    qrels = ["query-id\tcorpus-id\tscore"] + [f"{q}\td-{q[2:]}\t1" for q, _ in topics]
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    (tmp_path / "handful-dupmae.yaml").write_text(handful[0].read_text())  # the search tests' card
    return tmp_path


@pytest.mark.jvm
def test_encoder_card_on_beir_then_resume(beir_handful, capsys, monkeypatch):
    root = beir_handful
    argv = ["--encoder", str(root / "handful-dupmae.yaml"), "--datasets", "scidocs", "--data-dir", str(root / "data"),
            "--runs-dir", str(root / "runs"), "--index-dir", str(root / "indexes"), "--no-download", "--threads", "1"]
    assert beir_all.main(argv) == 0
    assert "| scidocs | 6 | 1.0000 | 1.0000 |" in capsys.readouterr().out
    assert (root / "runs" / "handful-dupmae" / "beir-scidocs.trec").is_file()
    assert json.loads((root / "runs" / "handful-dupmae" / "retriever.json").read_text()) == {
        "retriever": "encoder", "kind": "dupmae", "mode": "hybrid", "checkpoint": "packaged:all-MiniLM-L6-v2",
        "weights": None}
    assert (root / "indexes" / "handful-dupmae" / "scidocs" / "manifest.json").is_file()

    import retromae_ir.encode.corpus as corpus
    import retromae_ir.search.exact_hybrid as exact

    def forbidden(*args, **kwargs):
        raise AssertionError("work that should have been reused was redone")

    monkeypatch.setattr(corpus, "encode_shard", forbidden)
    monkeypatch.setattr(exact.ExactHybridSearcher, "batch_search", forbidden)
    assert beir_all.main(argv) == 0  # run file present: neither encoding nor search
    assert "| scidocs | 6 | 1.0000 | 1.0000 |" in capsys.readouterr().out

    monkeypatch.undo()
    monkeypatch.setattr(corpus, "encode_shard", forbidden)
    assert beir_all.main(argv + ["--force", "--search", "dense"]) == 0  # new search, same encoded index
    out = capsys.readouterr().out
    assert "| scidocs | 6 |" in out and (root / "runs" / "handful-dupmae-dense" / "beir-scidocs.trec").is_file()


def test_a_runs_folder_of_another_retriever_of_the_same_name_is_refused(beir_handful, minilm_path, capsys):
    """Every chain's stage-2 card is called 2-stage2, and a card may be called bm25: the second retriever's runs and
    table replaced the first's in RUNS_DIR/<name>/ under the same title (exit 0). Another folder's checkpoint under
    the same card name is refused; the same card, its other fields edited, is still its own."""
    import shutil

    root, runs = beir_handful, beir_handful / "runs"
    other = root / "other"
    other.mkdir()
    shutil.copytree(minilm_path, other / "checkpoint")
    card = (root / "handful-dupmae.yaml").read_text()
    (other / "handful-dupmae.yaml").write_text(card.replace("packaged:all-MiniLM-L6-v2", "./checkpoint"))
    common = ["--datasets", "scidocs", "--data-dir", str(root / "data"), "--runs-dir", str(runs), "--index-dir",
              str(root / "indexes"), "--no-download", "--threads", "1"]
    (runs / "handful-dupmae").mkdir(parents=True)
    (runs / "handful-dupmae" / "retriever.json").write_text(json.dumps(
        {"retriever": "encoder", "kind": "dupmae", "mode": "hybrid", "checkpoint": "packaged:all-MiniLM-L6-v2",
         "weights": None}))
    with pytest.raises(SystemExit) as refused:
        beir_all.main(["--encoder", str(other / "handful-dupmae.yaml"), *common])
    assert refused.value.code == 2
    assert "runs/handful-dupmae holds the runs of another retriever" in capsys.readouterr().err
    assert sorted(p.name for p in (runs / "handful-dupmae").iterdir()) == ["retriever.json"]
    from retromae_ir.evaluate.retrievers import claim_runs_folder
    from retromae_ir.search.retriever import EncoderRetriever

    edited = root / "edited" / "handful-dupmae.yaml"  # the packaged card with another k: its own folder still
    edited.parent.mkdir()
    edited.write_text(card.replace("k: 64", "k: 32"))
    claim_runs_folder(runs / "handful-dupmae", EncoderRetriever(str(edited)).owner)
    # a local checkpoint is its own by its path (trained again in place) or its files (the folder moved)
    (runs / "local").mkdir()
    claim_runs_folder(runs / "local", EncoderRetriever(str(other / "handful-dupmae.yaml")).owner)
    moved = shutil.move(other, root / "moved")
    claim_runs_folder(runs / "local", EncoderRetriever(str(moved / "handful-dupmae.yaml")).owner)
    assert json.loads((runs / "local" / "retriever.json").read_text())["checkpoint"] == str(moved / "checkpoint")
    (moved / "checkpoint" / "config.json").write_text((moved / "checkpoint" / "config.json").read_text() + "\n")
    claim_runs_folder(runs / "local", EncoderRetriever(str(moved / "handful-dupmae.yaml")).owner)
    # a failed run does not take a folder from before records for its retriever
    (runs / "old" / "handful-dupmae").mkdir(parents=True)
    with pytest.raises(SystemExit):
        beir_all.main(["--encoder", str(root / "handful-dupmae.yaml"), "--datasets", "nfcorpus", "--data-dir",
                       str(root / "data"), "--runs-dir", str(runs / "old"), "--no-download"])
    assert not (runs / "old" / "handful-dupmae" / "retriever.json").exists()
    # the dense search of a card named as another card's dense folder: another kind, refused
    (runs / "minilm-dense").mkdir()
    claim_runs_folder(runs / "minilm-dense", EncoderRetriever("dupmae-minilm", mode="dense").owner)
    with pytest.raises(ValueError, match="holds the runs of another retriever"):
        claim_runs_folder(runs / "minilm-dense", EncoderRetriever("minilm-cls").owner)
    (runs / "bm25").mkdir()
    (runs / "bm25" / "retriever.json").write_text(json.dumps({"retriever": "bm25", "k1": 0.9, "b": 0.4}))
    (root / "bm25.yaml").write_text(card)  # a card named bm25: not into BM25's runs
    with pytest.raises(SystemExit):
        beir_all.main(["--encoder", str(root / "bm25.yaml"), *common])
    assert "runs/bm25 holds the runs of another retriever" in capsys.readouterr().err


def test_search_mode_without_encoder_is_refused(capsys):
    with pytest.raises(SystemExit):
        beir_all.main(["--search", "dense"])
    assert "--search goes with --encoder" in capsys.readouterr().err


def test_compile_without_encoder_is_refused(capsys):
    with pytest.raises(SystemExit):
        beir_all.main(["--compile"])
    assert "--compile goes with --encoder" in capsys.readouterr().err


def test_compile_reaches_the_retrievers_model(tiny_bert_dir, tmp_path):
    from retromae_ir.encode.base import FrozenCompiled
    from retromae_ir.evaluate.retrievers import add_retriever_arguments, make_retriever

    card = tmp_path / "card.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\n")
    parser = argparse.ArgumentParser()
    add_retriever_arguments(parser)
    compiled = make_retriever(parser.parse_args(["--encoder", str(card), "--compile", "--dtype", "fp32"]))
    eager = make_retriever(parser.parse_args(["--encoder", str(card), "--dtype", "fp32"]))
    assert isinstance(compiled.model.backbone, FrozenCompiled) and not isinstance(eager.model.backbone, FrozenCompiled)
    texts = ["a short text", "another text, somewhat longer than the first one"]
    np.testing.assert_allclose(compiled.model.encode_passage(texts).dense, eager.model.encode_passage(texts).dense,
                               atol=1e-5)
    from retromae_ir.encode.openvino_backbone import OpenVINOBackbone

    openvino = make_retriever(parser.parse_args(["--encoder", str(card), "--compile", "openvino", "--dtype", "fp32"]))
    assert isinstance(openvino.model.backbone, OpenVINOBackbone)
    np.testing.assert_allclose(openvino.model.encode_passage(texts).dense, eager.model.encode_passage(texts).dense,
                               atol=1e-5)


@pytest.mark.parametrize("argv, message", [
    (["--encoder", "minilm-mean", "--k1", "1.2"], "--k1 goes with --retriever bm25, not --encoder"),
    (["--encoder", "minilm-mean", "--b", "0.75"], "--b goes with --retriever bm25, not --encoder"),
    (["--retriever", "bm25", "--batch-size", "8"], "--batch-size goes with --encoder"),
    (["--dtype", "bf16"], "--dtype goes with --encoder"),
])
def test_a_flag_of_the_other_retriever_is_refused_not_ignored(capsys, argv, message):
    """--k1/--b with an encoder (or --batch-size/--dtype with BM25) were parsed and unused, exit 0."""
    with pytest.raises(SystemExit) as exit_:
        beir_all.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_retrievers_defaults_are_the_documented_ones():
    import argparse

    from retromae_ir.evaluate.retrievers import add_retriever_arguments, make_retriever

    parser = argparse.ArgumentParser()
    add_retriever_arguments(parser)
    bm25 = make_retriever(parser.parse_args([]))
    assert (bm25.params.k1, bm25.params.b) == (0.9, 0.4)
    assert make_retriever(parser.parse_args(["--k1", "1.2", "--b", "0.75"])).name != bm25.name
    encoder = make_retriever(parser.parse_args(["--encoder", "minilm-mean"]))
    assert (encoder.batch_size, encoder.bf16) == (64, None)  # 64 a batch, auto precision
