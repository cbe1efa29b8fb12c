"""The bad-input catalogue (#14): every command meets the inputs a user gets wrong and answers each the same way.

Each case runs a command's ``main(argv)`` in this process (no interpreter, torch import or JVM start per case) and
asserts the convention of ``retromae_ir.cli.command``: exit status 2, one ``error:`` line that names the file and
line (or the field) at fault, no traceback, and nothing at the output path: an output that did not exist before
the command does not exist after it. Tiny random models (conftest's ``tiny_bert_dir``) and tiny files; the one
index the search cases need is built once for the module, dense only, so no case starts Lucene.

Empty texts are the one input that is not refused everywhere: a document with an empty text is kept, counted and
warned about (real corpora hold a few, and ids must stay aligned with the qrels); a query with an empty text is an
error (see ``retromae_ir.data.readers``).
"""
from __future__ import annotations

import gzip
import json
import logging
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "eval"))

import beir_all  # noqa: E402
import trec_dl  # noqa: E402

from retromae_ir import mine, submit  # noqa: E402
from retromae_ir.encode.__main__ import main as encode_main  # noqa: E402
from retromae_ir.finetune.__main__ import main as finetune_main  # noqa: E402
from retromae_ir.pretrain.__main__ import main as pretrain_main  # noqa: E402
from retromae_ir.repro.__main__ import main as repro_main  # noqa: E402
from retromae_ir.rerank.__main__ import main as rerank_main  # noqa: E402
from retromae_ir.search.__main__ import main as search_main  # noqa: E402

TEXTS = ["cells divide by mitosis", "the sun is a star", "rivers flow to the sea", "insulin regulates sugar",
         "jazz music history", "proteins fold into shapes"]
IDS = [f"d{i}" for i in range(len(TEXTS))]


def jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


GOOD_CORPUS = jsonl([{"_id": i, "title": "", "text": t} for i, t in zip(IDS, TEXTS)])
GOOD_TOPICS = "q1\tcell division\nq2\tstars and the sun\n"
GOOD_QRELS = "q1\td0\t1\nq2\td1\t1\n"
GOOD_TRAIN = jsonl([{"qid": "q1", "query": "cell division", "positives": ["d0"], "negatives": ["d2", "d4"]},
                    {"qid": "q2", "query": "the sun", "positives": ["d1"], "negatives": ["d3", "d5"]}])
GOOD_RUN = "q1 Q0 d0 1 3.5 mine\nq1 Q0 d2 2 2.0 mine\nq2 Q0 d1 1 1.0 mine\n"


# -- the world every case starts from ------------------------------------------------------------------------------

@dataclass
class World:
    """Good inputs in ``root`` (each case copies what it breaks into its own folder) and the shared index."""

    root: Path
    card: Path  # the tiny dense card that built ``index``
    other_card: Path  # same checkpoint, another representation (max_passage_length)
    other_dims: Path  # same checkpoint, another dimension
    index: Path
    model: Path

    def card_text(self, **fields) -> str:
        base = {"checkpoint": str(self.model), "kind": "cls-dense", "dims": 32, "max_passage_length": 16,
                "max_query_length": 16, "pooling": "cls", "normalize": False}
        base.update(fields)
        return "".join(f"{key}: {value}\n" for key, value in base.items() if value is not None)


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_bert_dir) -> World:
    root = tmp_path_factory.mktemp("bad-inputs")
    (root / "corpus.jsonl").write_text(GOOD_CORPUS)
    (root / "topics.tsv").write_text(GOOD_TOPICS)
    w = World(root, root / "tiny-dense.yaml", root / "tiny-other.yaml", root / "tiny-dims.yaml", root / "index",
              tiny_bert_dir)
    w.card.write_text(w.card_text())
    w.other_card.write_text(w.card_text(max_passage_length=8))
    w.other_dims.write_text(w.card_text(kind="retromae", dims=16))
    assert encode_main(["corpus", "--encoder", str(w.card), "--corpus", str(root / "corpus.jsonl"), "--output",
                        str(w.index), "--device", "cpu", "--dtype", "fp32"]) == 0
    return w


def refused(main: Callable, argv: list[str], capsys) -> str:
    """Run ``main(argv)`` expecting the convention: exit 2, an ``error:`` line, no traceback; returns the first
    ``error:`` line (a command listing several problems, like ``submit``, gives one line each)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, f"exit {exit_.value.code}, expected 2:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert lines, f"no error: line in\n{err[-3000:]}"
    return lines[0]


# -- the commands, each with its good arguments --------------------------------------------------------------------

DEFAULTS = {"corpus": ("corpus.jsonl", GOOD_CORPUS), "topics": ("topics.tsv", GOOD_TOPICS),
            "qrels": ("qrels.tsv", GOOD_QRELS), "train": ("train.jsonl", GOOD_TRAIN), "run": ("run.trec", GOOD_RUN)}
ABSENT = None


def files(case: Path, broken: dict[str, tuple[str, str | bytes | None]]) -> dict[str, Path]:
    """The input files of a case in ``case``: the good ones, with ``broken`` replacing some roles by ``(file name,
    content)`` (content ``ABSENT``: the file is not there)."""
    paths = {}
    for role, (name, content) in {**DEFAULTS, **broken}.items():
        paths[role] = case / name
        if content is not ABSENT:
            paths[role].write_bytes(content if isinstance(content, bytes) else content.encode())
    return paths


def encode_corpus(world, f, card, out):
    return encode_main, ["corpus", "--encoder", str(card), "--corpus", str(f["corpus"]), "--output", str(out),
                         "--device", "cpu", "--dtype", "fp32"]


def encode_queries(world, f, card, out):
    return encode_main, ["queries", "--encoder", str(card), "--topics", str(f["topics"]), "--output", str(out),
                         "--device", "cpu", "--dtype", "fp32"]


def search(world, f, card, out, index=None):
    return search_main, ["--index", str(index or world.index), "--encoder", str(card), "--topics", str(f["topics"]),
                         "--output", str(out), "--mode", "dense", "--hits", "3", "--device", "cpu"]


def finetune(world, f, card, out):
    return finetune_main, ["--stage", "2", "--encoder", str(card), "--train", str(f["train"]), "--corpus",
                           str(f["corpus"]), "--output", str(out), "--group-size", "2", "--batch-size", "2",
                           "--max-steps", "1", "--device", "cpu"]


def pretrain(world, f, card, out, *extra):
    return pretrain_main, ["--method", "retromae", "--model", str(world.model), "--corpus", str(f["corpus"]),
                           "--output", str(out), "--max-length", "16", "--batch-size", "2", "--max-steps", "1",
                           "--device", "cpu", *extra]


def mine_(world, f, card, out):
    return mine.main, ["--retriever", str(card), "--corpus", str(f["corpus"]), "--queries", str(f["topics"]),
                       "--qrels", str(f["qrels"]), "--output", str(out), "--index-root", str(out.parent / "indexes"),
                       "--mode", "dense", "--min-rank", "1", "--max-rank", "5", "--threads", "1"]


def rerank_score(world, f, card, out):
    return rerank_main, ["score", "--model", str(world.model), "--input", str(f["train"]), "--corpus",
                         str(f["corpus"]), "--output", str(out), "--device", "cpu", "--max-length", "32"]


def beir(world, f, card, out):
    """BEIR's layout (data/scifact/{corpus.jsonl, queries.jsonl, qrels/test.tsv}) made of the case's files."""
    data = f["corpus"].parent / "data" / "scifact"
    (data / "qrels").mkdir(parents=True)
    if f["corpus"].exists():
        shutil.copy(f["corpus"], data / "corpus.jsonl")
    if f["qrels"].exists():
        shutil.copy(f["qrels"], data / "qrels" / "test.tsv")
    topics = [line.split("\t", 1) for line in GOOD_TOPICS.splitlines()]
    (data / "queries.jsonl").write_text(jsonl([{"_id": q, "text": t} for q, t in topics]))
    return beir_all.main, ["--encoder", str(card), "--search", "dense", "--datasets", "scifact", "--data-dir",
                           str(data.parent), "--runs-dir", str(out.parent), "--index-dir", str(out.parent / "indexes"),
                           "--no-download", "--threads", "1"]


def submit_(world, f, card, out):
    return submit.main, [str(f["run"]), "--topics", str(f["topics"]), "--tag", "tiny", "--output", str(out)]


COMMANDS = {"encode corpus": encode_corpus, "encode queries": encode_queries, "search": search,
            "finetune": finetune, "pretrain": pretrain, "mine": mine_, "rerank score": rerank_score,
            "beir_all": beir, "submit": submit_}
OUTPUT_NAME = {"search": "run.trec", "mine": "mined.jsonl", "rerank score": "scored.jsonl"}  # else a folder "out"


def run_case(world: World, tmp_path: Path, capsys, command: str, broken: dict, card: Path | None = None,
             **options) -> str:
    """Break the inputs as ``broken`` says, run ``command``, check the convention and that its output (which did
    not exist) still does not; returns the error line."""
    case = tmp_path / "case"
    case.mkdir()
    f = files(case, broken)
    card = card or world.card
    outputs = tmp_path / "outputs"
    output = outputs / (Path(card).stem if command == "beir_all" else OUTPUT_NAME.get(command, "out"))
    main, argv = COMMANDS[command](world, f, card, output, **options)
    line = refused(main, argv, capsys)
    left = sorted(p.relative_to(outputs) for p in outputs.rglob("*") if not p.name.startswith(".")) \
        if outputs.is_dir() else []
    assert not output.exists() and not [p for p in left if p.parts[0] != "indexes" or len(p.parts) > 2], \
        f"{command} left {left} behind"
    return line


def expect(line: str, *patterns: str) -> None:
    for pattern in patterns:
        assert re.search(pattern, line), f"{pattern!r} not in {line!r}"


# -- 1. corpora ----------------------------------------------------------------------------------------------------

CORPUS_CASES = {
    "malformed JSON line": (GOOD_CORPUS + '{"_id": "d9", "text": \n', r"corpus\.jsonl:7: malformed JSON"),
    "missing _id": (GOOD_CORPUS + json.dumps({"text": "no id"}) + "\n",
                    r"corpus\.jsonl:7: missing or empty id field '_id'"),
    "duplicate _id": (GOOD_CORPUS + json.dumps({"_id": "d1", "text": "again"}) + "\n",
                      r"corpus\.jsonl:7: duplicate id 'd1'"),
    "non-UTF-8 bytes": (GOOD_CORPUS.encode() + b'{"_id": "d9", "text": "caf\xe9"}\n', r"corpus\.jsonl:7: not valid UTF-8"),
    "missing file": (ABSENT, r"corpus\.jsonl(: no such file or directory| is missing)|not found: \S*corpus\.jsonl"),
}
CORPUS_READERS = ["encode corpus", "pretrain", "finetune", "beir_all", "rerank score"]


@pytest.mark.parametrize("case", CORPUS_CASES)
@pytest.mark.parametrize("command", CORPUS_READERS)
def test_bad_corpus(world, tmp_path, capsys, command, case):
    content, message = CORPUS_CASES[case]
    expect(run_case(world, tmp_path, capsys, command, {"corpus": ("corpus.jsonl", content)}), message)


def test_empty_document_texts_are_kept_counted_and_warned(world, tmp_path, caplog):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(GOOD_CORPUS + json.dumps({"_id": "empty", "title": "", "text": ""}) + "\n")
    with caplog.at_level(logging.WARNING):
        assert encode_main(["corpus", "--encoder", str(world.card), "--corpus", str(corpus), "--output",
                            str(tmp_path / "idx"), "--device", "cpu", "--dtype", "fp32"]) == 0
    assert "1 of 7 records have an empty text" in caplog.text
    assert (tmp_path / "idx" / "dense" / "docid").read_text().split() == IDS + ["empty"]


# -- 2. topics -----------------------------------------------------------------------------------------------------

def _truncated_gzip() -> bytes:
    whole = gzip.compress((GOOD_TOPICS * 200).encode())
    return whole[:len(whole) // 2]


TOPIC_CASES = {  # (file name, content, message)
    "corrupt gzip": ("topics.tsv.gz", b"this is not gzip\n", r"topics\.tsv\.gz:1: not a valid gzip file"),
    "truncated gzip": ("topics.tsv.gz", _truncated_gzip(), r"topics\.tsv\.gz:\d+: not a valid gzip file"),
    "line without text": ("topics.tsv", GOOD_TOPICS + "q3\n", r"topics\.tsv:3: expected 'qid<TAB>text'"),
    "empty text": ("topics.tsv", GOOD_TOPICS + "q3\t \n", r"topics\.tsv:3: query 'q3' has an empty text"),
    "duplicate qid": ("topics.tsv", GOOD_TOPICS + "q1\tagain\n", r"topics\.tsv:3: duplicate id 'q1'"),
    "non-UTF-8 bytes": ("topics.tsv", GOOD_TOPICS.encode() + b"q3\tna\xefve\n", r"topics\.tsv:3: not valid UTF-8"),
    "malformed JSON line": ("topics.jsonl", '{"qid": "q1", "text": "a"}\n{"qid": "q2", "text": \n',
                            r"topics\.jsonl:2: malformed JSON"),
    "missing file": ("topics.tsv", ABSENT, r"topics\.tsv: no such file or directory"),
}
TOPIC_READERS = ["encode queries", "search", "mine", "submit"]


@pytest.mark.parametrize("case", TOPIC_CASES)
@pytest.mark.parametrize("command", TOPIC_READERS)
def test_bad_topics(world, tmp_path, capsys, command, case):
    name, content, message = TOPIC_CASES[case]
    expect(run_case(world, tmp_path, capsys, command, {"topics": (name, content)}), message)
