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
from retromae_ir.pretrain.generate import main as generate_main  # noqa: E402
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
    cross_encoder: Path  # the tiny model with a classification head (rerank score refuses a new one)

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
              tiny_bert_dir, root / "cross-encoder")
    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments

    CrossEncoder.load(CrossEncoderArguments(str(tiny_bert_dir), max_length=32)).save(w.cross_encoder, {})
    w.card.write_text(w.card_text())
    w.other_card.write_text(w.card_text(max_passage_length=8))
    w.other_dims.write_text(w.card_text(kind="retromae", dims=16))
    assert encode_main(["corpus", "--encoder", str(w.card), "--corpus", str(root / "corpus.jsonl"), "--output",
                        str(w.index), "--device", "cpu", "--dtype", "fp32"]) == 0
    return w


@pytest.fixture(autouse=True)
def root_logging():
    """Commands set up logging to the stderr of the moment (this test's capture): put the root logger back after
    each case, so no later test logs into a stream that is gone."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


def refused(main: Callable, argv: list[str], capsys) -> str:
    """Run ``main(argv)`` expecting the convention: exit 2, an ``error:`` line, no traceback; returns the first
    ``error:`` line (a command listing several problems, like ``submit``, gives one line each)."""
    try:
        status = main(argv)  # a command returns its status (sys.exit(main())) or raises SystemExit
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, f"exit {status}, expected 2:\n{err[-3000:]}"
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


def encode_corpus(world, f, card, out, extra=()):
    return encode_main, ["corpus", "--encoder", str(card), "--corpus", str(f["corpus"]), "--output", str(out),
                         "--device", "cpu", "--dtype", "fp32", *extra]


def encode_queries(world, f, card, out):
    return encode_main, ["queries", "--encoder", str(card), "--topics", str(f["topics"]), "--output", str(out),
                         "--device", "cpu", "--dtype", "fp32"]


def search(world, f, card, out, index=None, extra=()):
    return search_main, ["--index", str(index or world.index), "--encoder", str(card), "--topics", str(f["topics"]),
                         "--output", str(out), "--mode", "dense", "--hits", "3", "--device", "cpu", *extra]


def finetune(world, f, card, out, extra=()):
    return finetune_main, ["--stage", "2", "--encoder", str(card), "--train", str(f["train"]), "--corpus",
                           str(f["corpus"]), "--output", str(out), "--group-size", "2", "--batch-size", "2",
                           "--max-steps", "1", "--device", "cpu", *extra]


def pretrain(world, f, card, out, extra=()):
    return pretrain_main, ["--method", "retromae", "--model", str(world.model), "--corpus", str(f["corpus"]),
                           "--output", str(out), "--max-length", "16", "--batch-size", "2", "--max-steps", "1",
                           "--device", "cpu", *extra]


def mine_(world, f, card, out):
    return mine.main, ["--retriever", str(card), "--corpus", str(f["corpus"]), "--queries", str(f["topics"]),
                       "--qrels", str(f["qrels"]), "--output", str(out), "--index-root", str(out.parent / "indexes"),
                       "--mode", "dense", "--min-rank", "1", "--max-rank", "5", "--threads", "1"]


def rerank_train(world, f, card, out, group="1", extra=()):
    return rerank_main, ["train", "--model", str(world.model), "--train", str(f["train"]), "--corpus",
                         str(f["corpus"]), "--output", str(out), "--group-size", group, "--batch-size", "2",
                         "--max-steps", "1", "--max-length", "32", "--device", "cpu", *extra]


def distill(world, f, card, out):
    return finetune_main, ["--stage", "distill", "--encoder", str(card), "--train", str(f["train"]), "--corpus",
                           str(f["corpus"]), "--output", str(out), "--group-size", "1", "--batch-size", "2",
                           "--max-steps", "1", "--device", "cpu"]


def rerank_score(world, f, card, out, extra=()):
    return rerank_main, ["score", "--model", str(world.cross_encoder), "--input", str(f["train"]), "--corpus",
                         str(f["corpus"]), "--output", str(out), "--device", "cpu", "--max-length", "32", *extra]


def beir(world, f, card, out, extra=()):
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
                           "--no-download", "--threads", "1", *extra]


def generate(world, f, card, out, extra=()):
    return generate_main, ["--corpus", str(f["corpus"]), "--output", str(out), "--doc2query-model", "none",
                           "--device", "cpu", *extra]


def submit_(world, f, card, out):
    return submit.main, [str(f["run"]), "--topics", str(f["topics"]), "--tag", "tiny", "--output", str(out)]


COMMANDS = {"encode corpus": encode_corpus, "encode queries": encode_queries, "search": search,
            "finetune": finetune, "pretrain": pretrain, "mine": mine_, "rerank score": rerank_score,
            "beir_all": beir, "submit": submit_, "generate": generate, "rerank train": rerank_train, "finetune distill": distill}
OUTPUT_NAME = {"search": "run.trec", "mine": "mined.jsonl", "rerank score": "scored.jsonl", "generate": "texts.jsonl"}  # else a folder "out"


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


# -- 3. indexes ----------------------------------------------------------------------------------------------------

def _broken_index(world: World, tmp_path: Path, remove: str) -> Path:
    index = tmp_path / "index"
    shutil.copytree(world.index, index)
    (index / remove).unlink()
    return index


@pytest.mark.parametrize("case", ["built by another card", "of another dimension", "missing manifest",
                                  "missing faiss file", "not an index"])
def test_bad_index(world, tmp_path, capsys, case):
    card, index, message = world.card, None, None
    if case == "built by another card":
        card, message = world.other_card, r"index\S* was built with card 'tiny-dense', not 'tiny-other'.*max_passage_length"
    elif case == "of another dimension":
        card, message = world.other_dims, r"index\S* was built with card 'tiny-dense'.*dims: index 32 vs card 16"
    elif case == "missing manifest":
        index, message = _broken_index(world, tmp_path, "manifest.json"), r"index has no manifest\.json"
    elif case == "missing faiss file":
        index, message = _broken_index(world, tmp_path, "dense/index"), r"index/dense/index is missing"
    else:
        index, message = tmp_path / "nowhere", r"nowhere has no manifest\.json"
    expect(run_case(world, tmp_path, capsys, "search", {}, card=card, index=index), message)


# -- 4. encoder cards ----------------------------------------------------------------------------------------------

CARD_CASES = {  # card fields (None: the file is absent) -> message
    "unknown key": ({"colour": "blue"}, r"tiny-bad\.yaml: unknown fields \['colour'\]"),
    "wrong kind": ({"kind": "sparse-magic"}, r"card 'tiny-bad': unknown kind 'sparse-magic'"),
    "negative k": ({"kind": "dupmae", "k": -5}, r"card 'tiny-bad': k must be positive"),
    "missing checkpoint": ({"checkpoint": "/nonexistent/checkpoint"}, r"/nonexistent/checkpoint"),
    "missing card file": (None, r"card file \S*tiny-bad\.yaml does not exist"),
    "not YAML": ("checkpoint: [unclosed\n", r"tiny-bad\.yaml is not valid YAML"),
    # the tokenizer ignores a limit its special tokens fill: every text was encoded whole (exit 0)
    # (search refuses the card sooner: its index was encoded at another length)
    "one-token max length": ({"max_passage_length": 1}, r"card 'tiny-bad': max_passage_length 1 leaves no room for "
                             r"text: the tokenizer adds 2|max_passage_length: index 16 vs card 1"),
}
CARD_READERS = ["encode corpus", "encode queries", "search", "finetune", "mine", "beir_all"]


@pytest.mark.parametrize("case", CARD_CASES)
@pytest.mark.parametrize("command", CARD_READERS)
def test_bad_card(world, tmp_path, capsys, command, case):
    fields, message = CARD_CASES[case]
    card = tmp_path / "tiny-bad.yaml"
    if isinstance(fields, dict):
        card.write_text(world.card_text(**fields))
    elif isinstance(fields, str):
        card.write_text(fields)
    expect(run_case(world, tmp_path, capsys, command, {}, card=card), message)


# -- 5. outputs ----------------------------------------------------------------------------------------------------

WRITERS = ["encode corpus", "encode queries", "search", "finetune", "pretrain", "mine", "rerank score", "submit",
           "beir_all"]


@pytest.mark.parametrize("command", WRITERS)
def test_unwritable_output(world, tmp_path, capsys, command):
    """The output's folder is a file (what root, who may write anywhere, cannot write into either)."""
    (tmp_path / "outputs").write_text("a file, not a folder")
    line = run_case(world, tmp_path, capsys, command, {})
    expect(line, r"outputs\S*: cannot be written: \S*outputs is a file, not a folder")
    assert (tmp_path / "outputs").read_text() == "a file, not a folder"


# -- 6. TREC runs (submit) -----------------------------------------------------------------------------------------

RUN_CASES = {
    "wrong column count": (GOOD_RUN.replace("q2 Q0 d1 1 1.0 mine", "q2 Q0 d1 1 1.0"), r"run\.trec:3: expected 6 columns"),
    "non-numeric score": (GOOD_RUN.replace("3.5", "high"), r"run\.trec:1: score 'high' is not a number"),
    "duplicate document": (GOOD_RUN + "q2 Q0 d1 2 0.5 mine\n", r"run\.trec:4: document 'd1' appears twice"),
    "unknown topic": (GOOD_RUN + "q9 Q0 d1 1 1.0 mine\n", r"1 topic\(s\) in the run are not in \S*topics\.tsv: q9"),
    "non-UTF-8 bytes": (GOOD_RUN.encode() + b"q2 Q0 d\xff 2 0.5 mine\n", r"run\.trec:4: not valid UTF-8"),
    "missing file": (ABSENT, r"run\.trec: no such file or directory"),
}


@pytest.mark.parametrize("case", RUN_CASES)
def test_bad_run(world, tmp_path, capsys, case):
    content, message = RUN_CASES[case]
    expect(run_case(world, tmp_path, capsys, "submit", {"run": ("run.trec", content)}), message)


# -- 7. training data ----------------------------------------------------------------------------------------------

TRAIN_CASES = {
    "malformed JSON line": (GOOD_TRAIN + '{"query": \n', r"train\.jsonl:3: (invalid|malformed) JSON"),
    "empty query": (GOOD_TRAIN + jsonl([{"query": " ", "positives": ["d0"], "negatives": ["d1"]}]),
                    r"train\.jsonl:3: .*'query'"),
    "unknown document": (GOOD_TRAIN + jsonl([{"query": "x", "positives": ["d99"], "negatives": ["d1"]}]),
                         r"train\.jsonl:3: positives: document id 'd99' is not in the corpus"),
    "non-UTF-8 bytes": (GOOD_TRAIN.encode() + b'{"query": "\xff"}\n', r"train\.jsonl:3: not valid UTF-8"),
    "missing file": (ABSENT, r"train\.jsonl: no such file or directory"),
}


@pytest.mark.parametrize("case", TRAIN_CASES)
@pytest.mark.parametrize("command", ["finetune", "rerank score"])
def test_bad_training_data(world, tmp_path, capsys, command, case):
    content, message = TRAIN_CASES[case]
    expect(run_case(world, tmp_path, capsys, command, {"train": ("train.jsonl", content)}), message)


READ_THEN_REPLACED = {  # the training commands: the reader to wrap, the input it reads
    "finetune": ("retromae_ir.finetune.__main__", "load_examples", "train"),
    "rerank train": ("retromae_ir.finetune.data", "load_examples", "train"),
    "pretrain": ("retromae_ir.pretrain.__main__", "load_segments", "corpus"),
}


@pytest.mark.parametrize("command", READ_THEN_REPLACED)
def test_an_input_replaced_while_training_reads_it_is_refused(world, tmp_path, capsys, monkeypatch, command):
    """The run's identity keys each input by a digest taken before the data is read: a file replaced in between
    trained the model on the new bytes, recorded as the old ones (exit 0)."""
    import importlib

    module, reader, role = READ_THEN_REPLACED[command]
    module = importlib.import_module(module)
    read = getattr(module, reader)

    def read_then_replace(*args, **kwargs):
        data = read(*args, **kwargs)
        path = tmp_path / "case" / DEFAULTS[role][0]
        path.write_text(path.read_text() + "\n")
        return data

    monkeypatch.setattr(module, reader, read_then_replace)
    options = {"group": "2"} if command == "rerank train" else {}  # its default group of 1 is refused first
    expect(run_case(world, tmp_path, capsys, command, {}, **options), rf"{DEFAULTS[role][0]} changed while this run "
                                                                       "read it")


QRELS_CASES = {
    "non-integer label": (GOOD_QRELS + "q2\td2\thigh\n", r"qrels\.tsv:3: relevance 'high' is not an integer"),
    "wrong column count": (GOOD_QRELS + "q2\td2\n", r"qrels\.tsv:3: expected BEIR qrels"),
    "judged query without topic": (GOOD_QRELS + "q7\td2\t1\n", r"qrels\.tsv: 1 judged queries are not in"),
    "missing file": (ABSENT, r"qrels\.tsv: no such file or directory"),
}


@pytest.mark.parametrize("case", QRELS_CASES)
def test_bad_qrels(world, tmp_path, capsys, case):
    content, message = QRELS_CASES[case]
    expect(run_case(world, tmp_path, capsys, "mine", {"qrels": ("qrels.tsv", content)}), message)


GROUP_CASES = {  # a group of one passage: a softmax of 1, loss 0, nothing trained (it used to exit 0)
    "rerank train": r"the cross-encoder trains on groups .*--group-size must be >= 2, got 1",
    "finetune distill": r"--stage distill needs --group-size >= 2, got 1",
}


@pytest.mark.parametrize("command", GROUP_CASES)
def test_a_group_of_one_passage_is_refused_where_only_groups_train(world, tmp_path, capsys, command):
    expect(run_case(world, tmp_path, capsys, command, {}), GROUP_CASES[command])


SIZE_CASES = {  # a length the tokenizer ignores, or 0 read as unset (the card's); a step that scores nothing
    "finetune --max-query-length 0": ("finetune", ["--max-query-length", "0"], r"--max-query-length must be >= 1"),
    "finetune --logging-steps -1": ("finetune", ["--logging-steps", "-1"], r"--logging-steps must be >= 1, got -1"),
    "finetune --max-passage-length 2": ("finetune", ["--max-passage-length", "2"],
                                        r"--max-passage-length 2 leaves no room for text: the tokenizer adds 2"),
    "rerank train --max-length 3": ("rerank train", ["--group-size", "2", "--max-length", "3"],
                                    r"--max-length 3 leaves no room for text: the tokenizer adds 3 special tokens "
                                    r"to a query-passage pair"),
    "rerank score --max-length 0": ("rerank score", ["--max-length", "0"], r"--max-length must be >= 1, got 0"),
    "rerank score --batch-size 0": ("rerank score", ["--batch-size", "0"], r"--batch-size must be >= 1, got 0"),
    "rerank score --chunk-queries -1": ("rerank score", ["--chunk-queries", "-1"],
                                        r"--chunk-queries must be >= 1, got -1"),
    # range(0, n, -1) is empty: an empty run file, "wrote ...: 0 queries", exit 0
    "search --batch-size -1": ("search", ["--batch-size", "-1"], r"--batch-size must be >= 1, got -1"),
    "search --threads 0": ("search", ["--threads", "0"], r"--threads must be >= 1, got 0"),
    # read as unset: torch's own thread count, $WORLD_SIZE or one shard
    "encode corpus --threads 0": ("encode corpus", ["--threads", "0"], r"--threads must be >= 1, got 0"),
    "encode corpus --shard-num 0": ("encode corpus", ["--shard-num", "0"], r"--shard-num must be >= 1, got 0"),
    # batched nothing: every side text counted as gone, pruned, and an empty file published (exit 0)
    "generate --batch-size 0": ("generate", ["--batch-size", "0"], r"--batch-size must be >= 1, got 0"),
    "generate --max-new-tokens 0": ("generate", ["--max-new-tokens", "0"], r"--max-new-tokens must be >= 1, got 0"),
    "beir_all --batch-size 0": ("beir_all", ["--batch-size", "0"], r"--batch-size must be >= 1, got 0"),
}


@pytest.mark.parametrize("case", SIZE_CASES)
def test_sizes_that_would_train_or_score_otherwise_are_refused(world, tmp_path, capsys, case):
    command, extra, message = SIZE_CASES[case]
    expect(run_case(world, tmp_path, capsys, command, {}, extra=extra), message)


# -- 8. pre-training -----------------------------------------------------------------------------------------------

PRETRAIN_CASES = {  # extra arguments, corpus, message
    "zero steps": (["--max-steps", "0"], GOOD_CORPUS, r"--max-steps must be > 0"),
    "zero epochs": (["--epochs", "0", "--max-steps", "-1"], GOOD_CORPUS, r"--epochs must be > 0"),
    # read as 1: a log line and a loss.csv rewrite every step
    "logging every 0 steps": (["--logging-steps", "0"], GOOD_CORPUS, r"--logging-steps must be >= 1, got 0"),
    "corpus too short to mask": ([], jsonl([{"_id": "a", "text": "cell"}, {"_id": "b", "text": "sun"}]),
                                 r"corpus\.jsonl.*too short"),
    "fewer segments than a batch": (["--batch-size", "8"], GOOD_CORPUS, r"corpus has 6 segments, fewer than one"),
    # segments are keyed by (id, index): MASTER's neighbouring span would pair one document's with another's
    "{text} JSONL with a repeated id": ([], jsonl([{"id": "a", "text": t} for t in TEXTS[:2]]),
                                       r"corpus\.jsonl:2: duplicate id 'a'"),
}


@pytest.mark.parametrize("case", PRETRAIN_CASES)
def test_bad_pretraining(world, tmp_path, capsys, case):
    extra, corpus, message = PRETRAIN_CASES[case]
    line = run_case(world, tmp_path, capsys, "pretrain", {"corpus": ("corpus.jsonl", corpus)}, extra=extra)
    expect(line, message)


# -- 9. TREC DL and the reproduction matrix -------------------------------------------------------------------------

TREC_DL_CASES = {  # file -> (content, message)
    "collection line without passage": ("collection.tsv", "d0\tcells divide\nd1\n",
                                        r"collection\.tsv:2: expected 'pid<TAB>passage'"),
    "missing collection": ("collection.tsv", ABSENT, r"collection\.tsv: collection not found"),
    "missing topics file": ("topics.dl19-passage.txt", ABSENT, r"topics\.dl19-passage\.txt not found"),
    "topics line without text": ("topics.dl19-passage.txt", "q1\tcell division\nq2\n",
                                 r"topics\.dl19-passage\.txt:2: expected 'qid<TAB>text'"),
    "non-integer qrels label": ("qrels.dl19-passage.txt", "q1 0 d0 2\nq2 0 d1 x\n",
                                r"qrels\.dl19-passage\.txt:2: relevance 'x' is not an integer"),
}


@pytest.mark.parametrize("case", TREC_DL_CASES)
def test_bad_trec_dl_input(world, tmp_path, capsys, case):
    good = {"collection.tsv": "".join(f"{i}\t{t}\n" for i, t in zip(IDS, TEXTS)),
            "topics.dl19-passage.txt": GOOD_TOPICS, "qrels.dl19-passage.txt": "q1 0 d0 2\nq2 0 d1 1\n"}
    name, content = TREC_DL_CASES[case][:2]
    good[name] = content
    for file, text in good.items():
        if text is not ABSENT:
            (tmp_path / file).write_text(text)
    runs = tmp_path / "outputs" / world.card.stem
    line = refused(trec_dl.main, ["--encoder", str(world.card), "--search", "dense", "--collection",
                                  str(tmp_path / "collection.tsv"), "--sets", "dl19", "--topics-dir", str(tmp_path),
                                  "--runs-dir", str(runs.parent), "--index-dir", str(tmp_path / "outputs" / "indexes"),
                                  "--threads", "1"], capsys)
    expect(line, TREC_DL_CASES[case][2])
    assert not runs.exists() and not list((tmp_path / "outputs" / "indexes").glob("*/[!.]*"))


@pytest.mark.parametrize("content, message", [
    (ABSENT, r"conditions\.yaml: no such file or directory"),
    ("conditions: [unclosed\n", r"conditions\.yaml: not valid YAML"),
    ("- just a list\n", r"conditions\.yaml: expected a mapping"),
    ("conditions:\n  - name: x\n    colour: blue\n", r"conditions\.yaml: condition 1 \(x\)"),
    ("conditions:\n  - {name: x, dataset: scifact, retriever: bm25, expected: {}}\n",
     r"conditions\.yaml: condition 'x' needs 'expected'"),
    ("conditions:\n  - {name: x, dataset: scifact, retriever: bm25, expected: {ndcg@10: .nan}}\n",
     r"conditions\.yaml: condition 'x' needs 'expected': a mapping of metric to a finite score"),
    # each of these checked nothing, or let every score pass, and exited 0
    ("condition:\n  - {name: x, dataset: scifact, retriever: bm25, expected: {ndcg@10: 0.5}}\n",
     r"conditions\.yaml: unknown top-level key\(s\) 'condition'"),
    ("tolerance: 0.001\n", r"conditions\.yaml: 'conditions' must be a non-empty list"),
    ("tolerance: .nan\nconditions:\n  - {name: x, dataset: scifact, retriever: bm25, expected: {ndcg@10: 0.5}}\n",
     r"conditions\.yaml: 'tolerance' must be a finite number >= 0, got nan"),
    ("tolerance: -1\nconditions:\n  - {name: x, dataset: scifact, retriever: bm25, expected: {ndcg@10: 0.5}}\n",
     r"conditions\.yaml: 'tolerance' must be a finite number >= 0, got -1"),
])
def test_bad_reproduction_matrix(tmp_path, capsys, content, message):
    conditions = tmp_path / "conditions.yaml"
    if content is not ABSENT:
        conditions.write_text(content)
    expect(refused(repro_main, ["--list", "--conditions-file", str(conditions)], capsys), message)


# -- 10. the convention itself -------------------------------------------------------------------------------------

def test_debug_shows_the_traceback_and_still_exits_2(world, tmp_path, capsys, monkeypatch):
    missing = ["--index", str(world.index), "--encoder", str(world.card), "--topics", str(tmp_path / "none.tsv"),
               "--output", str(tmp_path / "run.trec")]
    for argv, env in ((missing + ["--debug"], None), (missing, "1")):
        if env:
            monkeypatch.setenv("RETROMAE_IR_DEBUG", env)
        with pytest.raises(SystemExit) as exit_:
            search_main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "Traceback" in err and "FileNotFoundError" in err
        assert err.splitlines()[-1] == f"error: {tmp_path / 'none.tsv'}: no such file or directory"
    monkeypatch.setenv("RETROMAE_IR_DEBUG", "0")
    assert "Traceback" not in refused(search_main, missing, capsys)


def test_an_unexpected_failure_keeps_its_traceback(world, tmp_path, monkeypatch):
    """A bug is not a user error: it propagates (Python prints the traceback, exit status 1)."""
    import retromae_ir.search.exact_hybrid as exact_hybrid

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(exact_hybrid.ExactHybridSearcher, "batch_search", broken)
    (tmp_path / "topics.tsv").write_text(GOOD_TOPICS)
    with pytest.raises(RuntimeError, match="a bug"):
        search_main(["--index", str(world.index), "--encoder", str(world.card), "--topics",
                     str(tmp_path / "topics.tsv"), "--output", str(tmp_path / "run.trec"), "--mode", "dense",
                     "--device", "cpu"])
    assert not (tmp_path / "run.trec").exists()
