"""Small corpora and segment batches shared by the pre-training tests."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

WORDS = ("protein cell gene tissue neuron virus enzyme lipid membrane receptor signal pathway expression "
         "mutation therapy patient cohort trial dose response").split()


def sentence(i: int, length: int = 14) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(length))


def write_corpus(path: Path, docs: int = 24, length: int = 14) -> Path:
    """A BEIR-style corpus.jsonl of deterministic scientific-sounding documents."""
    with open(path, "w") as handle:
        for i in range(docs):
            handle.write(json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": sentence(i, length)}) + "\n")
    return path


def refused(main, argv: list[str], capsys, status: int = 2) -> str:
    """Run a command's ``main``, expecting its one-line ``error:`` exit with ``status`` and no traceback; returns
    the line."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == status and "Traceback" not in err and "error: " in err, err
    return err[err.rindex("error: "):].strip()
