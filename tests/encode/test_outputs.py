"""Issue #16, the encode side: no command exits 0 with a wrong result. Chunks and indexes are reused only for the
same document texts; one writer per output; a killed encode leaves no live Lucene indexer and its leftovers are
cleared by the next run; a failed encode leaves no output that looks like a result. Real faiss and real Lucene,
tiny random models."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retromae_ir.encode.__main__ import main
from retromae_ir.encode.manifest import IndexMismatchError, checksums, read_manifest
from retromae_ir.io import OutputLockedError, lock_path

from lock_holder import held_lock

TEXTS = ["cells divide by mitosis", "the sun is a star", "rivers flow to the sea", "insulin regulates sugar",
         "jazz music history", "proteins fold into shapes"]
IDS = [f"d{i}" for i in range(len(TEXTS))]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def write_corpus(path: Path, ids: list[str], texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in zip(ids, texts)))
    return path


def swapped(texts: list[str]) -> list[str]:
    """The same ids, two documents' texts exchanged: only the texts tell the corpora apart."""
    return [texts[1], texts[0], *texts[2:]]


@pytest.fixture(scope="module")
def dense_card(tiny_bert_dir, tmp_path_factory) -> Path:
    card = tmp_path_factory.mktemp("cards") / "tiny-dense.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: cls-dense\ndims: 32\nmax_passage_length: 16\n")
    return card


@pytest.fixture(scope="module")
def sparse_card(tiny_bert_dir, tmp_path_factory) -> Path:
    card = tmp_path_factory.mktemp("cards") / "tiny-dupmae.yaml"
    card.write_text(f"checkpoint: {tiny_bert_dir}\nkind: dupmae\ndims: 32\nk: 16\nmax_passage_length: 16\n")
    return card


def encode_args(card: Path, corpus: Path, output: Path) -> list[str]:
    return ["corpus", "--encoder", str(card), "--corpus", str(corpus), "--output", str(output), "--device", "cpu",
            "--dtype", "fp32", "--chunk-size", "4"]


def status(argv: list[str]) -> int:
    """The exit status ``python -m retromae_ir.encode ARGV`` would have, run in this process."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "retromae_ir.encode", *args]


def wait_for(condition, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# -- 1. reuse decided by content, not by names ---------------------------------------------------------------------

def test_changed_texts_with_the_same_ids_are_encoded_again(dense_card, tmp_path):
    a = write_corpus(tmp_path / "a.jsonl", IDS, TEXTS)
    b = write_corpus(tmp_path / "b.jsonl", IDS, swapped(TEXTS))
    assert main(encode_args(dense_card, a, tmp_path / "idx")) == 0
    of_a = (tmp_path / "idx" / "dense" / "index").read_bytes()
    assert main(encode_args(dense_card, b, tmp_path / "idx")) == 0
    assert main(encode_args(dense_card, b, tmp_path / "fresh")) == 0
    index = (tmp_path / "idx" / "dense" / "index").read_bytes()
    assert index != of_a and index == (tmp_path / "fresh" / "dense" / "index").read_bytes()
    assert read_manifest(tmp_path / "idx")["corpus_digest"] == read_manifest(tmp_path / "fresh")["corpus_digest"]
    assert len(list((tmp_path / "idx" / ".work").iterdir())) == 1  # a's chunks went once b's were merged


def test_retriever_encodes_a_rewritten_corpus_again(dense_card, tmp_path):
    """The --force path of eval/beir_all.py: same --index-dir, same corpus path, other contents."""
    from retromae_ir.search.retriever import EncoderRetriever

    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    retriever = EncoderRetriever(str(dense_card), index_root=tmp_path / "indexes", threads=1, bf16=False)
    built = retriever.build_index(corpus, "data")
    write_corpus(corpus, IDS, swapped(TEXTS))
    assert retriever.build_index(corpus, "data") == built
    fresh = EncoderRetriever(str(dense_card), index_root=tmp_path / "fresh", threads=1, bf16=False)
    assert (built / "dense" / "index").read_bytes() == (fresh.build_index(corpus, "data") / "dense" /
                                                        "index").read_bytes()


def test_merge_refuses_to_guess_between_corpora(dense_card, tmp_path):
    """The merge command is not told the corpus: two finished encodings, or shards of two corpora, are refused."""
    from retromae_ir.encode import EncoderModel
    from retromae_ir.encode.corpus import encode_shard, merge

    model = EncoderModel.from_card(dense_card, device="cpu")
    encode_shard(model, IDS, TEXTS, tmp_path / "mixed", 0, 2)
    encode_shard(model, IDS, swapped(TEXTS), tmp_path / "mixed", 1, 2)
    with pytest.raises(IndexMismatchError, match="is not finished"):
        merge(tmp_path / "mixed", model.card, model.vocab, shard_num=2)
    encode_shard(model, IDS, TEXTS, tmp_path / "mixed", 1, 2)
    encode_shard(model, IDS, swapped(TEXTS), tmp_path / "mixed", 0, 2)
    with pytest.raises(IndexMismatchError, match="2 finished encodings"):
        merge(tmp_path / "mixed", model.card, model.vocab, shard_num=2)
    assert not (tmp_path / "mixed" / "manifest.json").exists()


# -- 2. one writer per output -------------------------------------------------------------------------------------

def test_second_writer_is_refused_and_the_first_output_matches_its_manifest(dense_card, tmp_path, capsys):
    """Writer 1 holds the lock while it waits on its corpus (a FIFO); writer 2, another corpus, must fail at once
    with the holder's PID in one line; writer 1 then finishes an index that is the corpus its manifest names."""
    fifo = tmp_path / "a.jsonl"
    os.mkfifo(fifo)
    b = write_corpus(tmp_path / "b.jsonl", [f"other{i}" for i in range(3)], TEXTS[:3])
    out = tmp_path / "idx"
    first = subprocess.Popen(cli(*encode_args(dense_card, fifo, out)), env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        pid_file = lock_path(out).with_name(lock_path(out).name + ".pid")
        wait_for(lambda: pid_file.is_file() and pid_file.read_text().strip() == str(first.pid), what="writer 1")
        assert status(encode_args(dense_card, b, out)) == 2
        refusal = capsys.readouterr().err.strip()
        assert len(refusal.splitlines()) == 1 and f"PID {first.pid}" in refusal
        feed = wait_for(lambda: _open_fifo_writer(fifo), what="writer 1 to read its corpus")
        with os.fdopen(feed, "w") as handle:
            handle.write("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in zip(IDS, TEXTS)))
        assert first.wait(timeout=120) == 0, first.stderr.read()[-3000:]
    finally:
        first.kill()
        first.wait()
    manifest = read_manifest(out)
    assert manifest["corpus"] == str(fifo) and manifest["documents"] == len(IDS)
    assert (out / "dense" / "docid").read_text().split() == IDS
    assert checksums(out, ["dense"]) == manifest["files"]


def _open_fifo_writer(fifo: Path) -> int | None:
    """A write end of ``fifo`` once its reader has it open (ENXIO until then)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None


def test_index_builds_and_miner_refuse_a_locked_output(dense_card, tmp_path, capsys):
    from retromae_ir import bm25, mine
    from retromae_ir.search.retriever import EncoderRetriever

    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    with held_lock(tmp_path / "indexes" / "tiny-dense" / "data") as pid:
        with pytest.raises(OutputLockedError, match=f"PID {pid}"):
            EncoderRetriever(str(dense_card), index_root=tmp_path / "indexes").build_index(corpus, "data")
    with held_lock(tmp_path / "bm25") as pid:
        with pytest.raises(OutputLockedError, match=f"PID {pid}"):
            bm25.build_index(corpus, tmp_path / "bm25")
    with held_lock(tmp_path / "train.jsonl") as pid:
        with pytest.raises(SystemExit) as exit_:
            mine.main(["--retriever", "bm25", "--corpus", str(corpus), "--queries", "q.tsv", "--qrels", "r.tsv",
                       "--output", str(tmp_path / "train.jsonl")])
    assert exit_.value.code == 2 and f"PID {pid}" in capsys.readouterr().err
    assert not (tmp_path / "bm25").exists() and not (tmp_path / "indexes" / "tiny-dense" / "data").exists()


# -- 3. no orphan indexer, no stale temporaries -------------------------------------------------------------------

def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _indexers(pid: int) -> list[int]:
    """Children of ``pid`` running ``pyserini.index.lucene`` (other, short-lived children come and go)."""
    found = []
    for child in _children(pid):
        with contextlib.suppress(OSError):
            if "pyserini.index.lucene" in Path(f"/proc/{child}/cmdline").read_text():
                found.append(child)
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.jvm
def test_kill_9_during_the_lucene_build_leaves_no_indexer_and_the_rerun_clears_its_leftovers(sparse_card, tmp_path,
                                                                                            caplog):
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    out = tmp_path / "idx"
    encode = subprocess.Popen(cli(*encode_args(sparse_card, corpus, out)), env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        indexer = wait_for(lambda: _indexers(encode.pid), what="the Lucene indexer")[0]
    finally:
        encode.send_signal(signal.SIGKILL)
        encode.wait()
    wait_for(lambda: not _alive(indexer), timeout=1, what=f"the indexer {indexer} to die with its parent")
    assert list(out.glob(".sparse.*.tmp")), "the killed run was expected to leave its temporary sparse folder"
    assert not (out / "manifest.json").exists()

    caplog.set_level("INFO")
    assert main(encode_args(sparse_card, corpus, out)) == 0
    assert not [p for p in out.rglob("*.tmp")] and not list(out.parent.glob(".idx.*.tmp"))
    assert "left by an interrupted write" in caplog.text
    manifest = read_manifest(out)
    assert manifest["documents"] == len(IDS) and checksums(out, ["dense", "sparse"]) == manifest["files"]


# -- 4. no output left by an early failure ------------------------------------------------------------------------

def test_a_malformed_corpus_leaves_no_output_behind(dense_card, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    corpus.write_text(corpus.read_text() + "{not json\n")
    assert status(encode_args(dense_card, corpus, tmp_path / "new" / "idx")) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "new" / "idx").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    assert status(encode_args(dense_card, corpus, existing)) == 2
    assert (existing / "notes.txt").read_text() == "mine"  # a folder the run did not create is left alone


def test_two_shards_of_one_output_do_not_lock_each_other_out(dense_card, tmp_path):
    """Shards lock their own folders, not the output, so torchrun ranks run side by side."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    out = tmp_path / "idx"
    with held_lock(out):
        for shard in ("0", "1"):
            assert main(encode_args(dense_card, corpus, out) + ["--shard-id", shard, "--shard-num", "2"]) == 0
    assert main(["merge", "--encoder", str(dense_card), "--output", str(out), "--shard-num", "2"]) == 0
    assert (out / "dense" / "docid").read_text().split() == IDS
    assert read_manifest(out)["documents"] == len(IDS)


def test_queries_of_another_card_replace_every_file(sparse_card, dense_card, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcells\nq2\tthe sun\n")
    args = ["queries", "--topics", str(topics), "--output", str(tmp_path / "q"), "--device", "cpu", "--dtype", "fp32"]
    assert main(args + ["--encoder", str(sparse_card)]) == 0 and (tmp_path / "q" / "sparse.jsonl").is_file()
    assert main(args + ["--encoder", str(dense_card)]) == 0
    assert not (tmp_path / "q" / "sparse.jsonl").exists()  # no sparse queries of the earlier card beside the new
    assert read_manifest(tmp_path / "q")["card"]["kind"] == "cls-dense"


def test_queries_are_not_encoded_into_an_index_folder(dense_card, tmp_path, capsys):
    """--output naming an index replaced its dense/ (the faiss index) and deleted its manifest (exit 0)."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    assert main(encode_args(dense_card, corpus, tmp_path / "index")) == 0
    manifest = (tmp_path / "index" / "manifest.json").read_text()
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcells\n")
    assert status(["queries", "--encoder", str(dense_card), "--topics", str(topics), "--output",
                   str(tmp_path / "index"), "--device", "cpu", "--dtype", "fp32"]) == 2
    assert "holds an encoded corpus (an index)" in capsys.readouterr().err
    assert (tmp_path / "index" / "manifest.json").read_text() == manifest
    assert (tmp_path / "index" / "dense" / "index").is_file()


def test_a_corpus_is_not_encoded_into_a_folder_of_encoded_queries(sparse_card, tmp_path, capsys):
    """The other way round: the queries' sparse.jsonl stayed beside the new index's manifest (exit 0)."""
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcells\n")
    assert main(["queries", "--encoder", str(sparse_card), "--topics", str(topics), "--output", str(tmp_path / "q"),
                 "--device", "cpu", "--dtype", "fp32"]) == 0
    before = sorted(path.name for path in (tmp_path / "q").iterdir() if path.suffix != ".log")
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    assert status(encode_args(sparse_card, corpus, tmp_path / "q")) == 2
    assert "holds encoded queries: encoding a corpus there would mix" in capsys.readouterr().err
    assert sorted(path.name for path in (tmp_path / "q").iterdir() if path.suffix != ".log") == before


def test_pre_encoded_queries_of_another_card_or_other_weights_are_refused_against_an_index(
        dense_card, sparse_card, tiny_bert_dir, tmp_path):
    """The queries' manifest records the weight files and precision; ``check_queries`` (run by the encode
    benchmark before Pyserini's searchers, which score any vectors handed to them) refuses queries that another
    card, or the same card over a checkpoint trained again in place, encoded."""
    import shutil

    from checkpoints import train_again_in_place
    from retromae_ir.encode.manifest import check_queries

    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tcells\nq2\tthe sun\n")
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_bert_dir, checkpoint)
    card = tmp_path / "card.yaml"
    card.write_text(dense_card.read_text().replace(str(tiny_bert_dir), str(checkpoint)))
    assert main(encode_args(card, corpus, tmp_path / "index")) == 0
    queries = ["queries", "--topics", str(topics), "--device", "cpu", "--dtype", "fp32", "--output"]
    assert main([*queries, str(tmp_path / "q"), "--encoder", str(card)]) == 0
    assert read_manifest(tmp_path / "q")["precision"] == "fp32"
    check_queries(tmp_path / "q", tmp_path / "index")
    assert main([*queries, str(tmp_path / "other-card"), "--encoder", str(sparse_card)]) == 0
    with pytest.raises(IndexMismatchError, match="another representation"):
        check_queries(tmp_path / "other-card", tmp_path / "index")
    other_precision = [arg if arg != "fp32" else "bf16" for arg in queries]  # the index is fp32
    assert main([*other_precision, str(tmp_path / "bf16"), "--encoder", str(card)]) == 0
    with pytest.raises(IndexMismatchError, match="encoded in bf16, .* in fp32: .*--dtype fp32"):
        check_queries(tmp_path / "bf16", tmp_path / "index")
    train_again_in_place(checkpoint)
    assert main([*queries, str(tmp_path / "retrained"), "--encoder", str(card)]) == 0
    with pytest.raises(IndexMismatchError, match="other weights"):
        check_queries(tmp_path / "retrained", tmp_path / "index")


def test_verify_compares_an_index_with_the_checksums_its_manifest_recorded(dense_card, tmp_path, capsys):
    """The manifest's checksums were written and never read: a file rewritten with the same count (another tool's
    vectors, say) went unnoticed. `encode verify` hashes the files and names each that differs."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", IDS, TEXTS)
    index = tmp_path / "index"
    assert main(encode_args(dense_card, corpus, index)) == 0
    capsys.readouterr()
    assert main(["verify", "--index", str(index)]) == 0
    assert capsys.readouterr().out.strip() == f"{index}: 2 files match its manifest"
    docids = (index / "dense" / "docid").read_text()
    (index / "dense" / "docid").write_text(docids.replace("d0", "x0"))
    (index / "dense" / "extra").write_text("")
    assert status(["verify", "--index", str(index)]) == 2
    assert ("2 file(s) differ from manifest.json: dense/extra not in the manifest; dense/docid changed"
            in capsys.readouterr().err)
    assert status(["verify", "--index", str(tmp_path)]) == 2  # no manifest at all
    assert "has no manifest.json" in capsys.readouterr().err
