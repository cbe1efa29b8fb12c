"""MASTER's side texts per pre-training segment: generate cuts documents as pre-training does, writes a record per
segment from that segment's text, and pre-training gives each segment its own texts, refusing texts cut another
way. Generators here echo their input, so every value is exact."""
from __future__ import annotations

import json
import pytest
import torch

from retromae_ir.pretrain import generate as gen
from retromae_ir.pretrain.arguments import MaskingArguments
from retromae_ir.pretrain.data import load_segments, segment_texts, tokenize_corpus
from retromae_ir.pretrain.master import MASTER, MasterArguments
from retromae_ir.pretrain.masking import IGNORE_INDEX
from retromae_ir.pretrain.side_texts import SideTextError, load_side_texts

WORDS = "the cell grows in the brain and the gene makes a protein for the tissue of a mouse".split()
DOCS = [("long", " ".join(WORDS)), ("short", "white matter"), ("split", "microstructural development")]


class Echo:
    """A side-text generator that returns each passage as it was given."""

    key = "continuation"

    def __call__(self, passages):
        return list(passages)


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path)


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in DOCS))
    return path


def test_segment_texts_are_the_spans_of_the_segments(tokenizer, corpus):
    segments = tokenize_corpus(corpus, tokenizer, 8)  # 6 tokens a segment; every word of "long" is one token
    spans = {docid: segment_texts(text, tokenizer, 8) for docid, text in DOCS}
    assert spans["long"] == [" ".join(WORDS[i:i + 6]) for i in range(0, len(WORDS), 6)]
    assert spans["short"] == ["white matter"]
    assert [(s.docid, s.index) for s in segments] == [(d, i) for d, _ in DOCS for i in range(len(spans[d]))]
    for segment in segments:
        span = spans[segment.docid][segment.index]
        assert tuple(tokenizer(span, add_special_tokens=False)["input_ids"]) == segment.input_ids
    # a word cut between two segments: the second starts at its word piece
    pieces = tokenizer.tokenize("microstructural development")
    cut = segment_texts("microstructural development", tokenizer, 5)
    assert pieces == ["micro", "##st", "##ru", "##ct", "##ural", "development"]
    assert cut == ["microstru", "ctural development"]


def test_generate_writes_a_record_per_segment_from_its_text(tmp_path, tokenizer):
    out = tmp_path / "side.jsonl"
    segmenter = gen.Segmenter(tokenizer, 8)
    assert gen.generate_side_texts(DOCS[:2], out, [Echo()], batch_size=2, segmenter=segmenter) == 4
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["segment"], r["continuation"]) for r in records] == [
        ("long", 0, "the cell grows in the brain"), ("long", 1, "and the gene makes a protein"),
        ("long", 2, "for the tissue of a mouse"), ("short", 0, "white matter")]
    assert {r["text_sha256"] for r in records[:3]} == {gen.text_digest(DOCS[0][1])}
    assert json.loads(gen.key_path(out).read_text())["segments"] == segmenter.settings()
    assert gen.generate_side_texts(DOCS[:2], out, [Echo()], batch_size=2, segmenter=segmenter) == 0
    # the document changed: all its segments again, one record a segment; a shorter one drops its last segment
    shorter = [("long", " ".join(WORDS[:8])), DOCS[1]]
    assert gen.generate_side_texts(shorter, out, [Echo()], batch_size=2, segmenter=segmenter) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], r["segment"], r["continuation"]) for r in records) == [
        ("long", 0, "the cell grows in the brain"), ("long", 1, "and the"), ("short", 0, "white matter")]
    # texts cut another way are not continued, nor per-document ones
    with pytest.raises(ValueError, match="was generated with other settings"):
        gen.generate_side_texts(shorter, out, [Echo()], segmenter=gen.Segmenter(tokenizer, 16))
    with pytest.raises(ValueError, match="was generated with other settings"):
        gen.generate_side_texts(shorter, out, [Echo()])


def test_cli_needs_a_max_length_for_a_segment_tokenizer(tmp_path, corpus, capsys):
    argv = ["--corpus", str(corpus), "--output", str(tmp_path / "side.jsonl"), "--segment-tokenizer", "x"]
    with pytest.raises(SystemExit) as exit_:
        gen.main(argv)
    assert exit_.value.code == 2 and "give both" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        gen.main(argv[:4] + ["--segment-max-length", "2"])
    assert exit_.value.code == 2 and "leaves no room" in capsys.readouterr().err
    assert not (tmp_path / "side.jsonl").exists()


def build(model_dir, side, **args) -> MASTER:
    torch.manual_seed(0)
    return MASTER.from_pretrained(str(model_dir), MaskingArguments(),
                                  MasterArguments(master_tasks="gor", master_side_texts=str(side), **args))


def decoded_targets(model, segments, tokenizer):
    batch = model.make_collator()(model.make_examples(segments), torch.Generator().manual_seed(0))
    ids = torch.where(batch["gor_labels"] != IGNORE_INDEX, batch["gor_labels"], batch["gor_input_ids"])
    return [tokenizer.decode(row[mask.bool()], skip_special_tokens=True)
            for row, mask in zip(ids, batch["gor_attention_mask"])]


def test_each_segment_rebuilds_its_own_texts(tmp_path, tiny_bert_dir, tokenizer, corpus, caplog):
    side = tmp_path / "side.jsonl"
    gen.generate_side_texts(DOCS, side, [Echo()], segmenter=gen.Segmenter(tokenizer, 8))
    args = MasterArguments(master_tasks="gor", master_side_texts=str(side))
    assert MASTER.prepare_arguments(args, corpus, str(tiny_bert_dir), 8) == args
    with pytest.raises(SideTextError, match=r"cut by --segment-max-length 8.*--max-length 16"):
        MASTER.prepare_arguments(args, corpus, str(tiny_bert_dir), 16)
    model = build(tiny_bert_dir, side)
    assert load_side_texts(side, "[SEP]").per_segment
    segments = load_segments(corpus, model.tokenizer, 8)
    targets = decoded_targets(model, segments, tokenizer)
    assert targets == [segment_texts(text, tokenizer, 8)[s.index] for s in segments
                       for docid, text in DOCS if docid == s.docid]
    # per-document texts give every segment the whole document's, and say so
    whole = tmp_path / "whole.jsonl"
    gen.generate_side_texts(DOCS, whole, [Echo()])
    with caplog.at_level("WARNING", logger="retromae_ir.pretrain.side_texts"):
        model = build(tiny_bert_dir, whole)
        targets = decoded_targets(model, segments, tokenizer)
    assert targets[:3] == [" ".join(WORDS)] * 3
    assert "1 documents with texts span more than one segment (first: 'long')" in caplog.text


def test_mixed_records_are_refused(tmp_path):
    from retromae_ir.data.readers import DataFormatError

    path = tmp_path / "side.jsonl"
    path.write_text('{"id": "a", "segment": 0, "continuation": "x"}\n{"id": "b", "continuation": "y"}\n')
    with pytest.raises(DataFormatError, match="mixes records per document and per segment"):
        load_side_texts(path, "[SEP]")
    path.write_text('{"id": "a", "segment": -1, "continuation": "x"}\n')
    with pytest.raises(DataFormatError, match=r"side.jsonl:1: expected"):
        load_side_texts(path, "[SEP]")


def test_per_segment_texts_without_their_key_are_refused(tmp_path, tiny_bert_dir, tokenizer, corpus):
    """Without OUTPUT.key.json nothing says how the segments were cut: segment i may be another span."""
    side = tmp_path / "side.jsonl"
    gen.generate_side_texts(DOCS, side, [Echo()], segmenter=gen.Segmenter(tokenizer, 8))
    gen.key_path(side).unlink()
    args = MasterArguments(master_tasks="gor", master_side_texts=str(side))
    with pytest.raises(SideTextError, match=r"side.jsonl: per-segment side texts without a key"):
        MASTER.prepare_arguments(args, corpus, str(tiny_bert_dir), 8)
    # "segment": null is a record of the whole document, for the check as for the loader
    side.write_text("".join(json.dumps({"id": d, "segment": None, "text_sha256": gen.text_digest(t),
                                        "continuation": "x"}) + "\n" for d, t in DOCS))
    assert MASTER.prepare_arguments(args, corpus, str(tiny_bert_dir), 8) == args
    assert not load_side_texts(side, "[SEP]").per_segment


def test_a_slow_tokenizer_is_refused_before_any_output(monkeypatch):
    """Segments map back to text through character offsets, which only a fast tokenizer gives (in transformers 5
    a python-backend one, e.g. some sentencepiece models): refused when loaded, before OUTPUT.partial is written."""
    import transformers

    class Slow:
        is_fast = False

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name: Slow())
    with pytest.raises(ValueError, match="--segment-tokenizer some/model: Slow is no fast tokenizer"):
        gen.load_segmenter("some/model", 8)


def test_a_record_with_a_bad_segment_ends_what_a_resume_keeps(tmp_path, tokenizer):
    """A hand-edited partial file: the record with an unhashable segment is cut off like a torn one, not a crash."""
    out = tmp_path / "side.jsonl"
    partial = gen.partial_path(out)
    partial.write_text('{"id": "short", "segment": 0, "text_sha256": "%s", "continuation": "white matter"}\n'
                       '{"id": "long", "segment": [1], "continuation": "x"}\n' % gen.text_digest(DOCS[1][1]))
    done, repeated = gen.read_done(partial)
    assert done == {("short", 0): gen.text_digest(DOCS[1][1])} and not repeated
    assert partial.read_text().count("\n") == 1


def test_the_documented_commands_generate_per_segment_and_pretrain_on_them(tmp_path, tiny_bert_dir, corpus, capsys,
                                                                          monkeypatch):
    """`generate --segment-tokenizer MODEL --segment-max-length N` then `pretrain --method master --max-length N`
    trains; the same texts under `--max-length` 16 are refused before training (exit 2, nothing written)."""
    from pretrain_helpers import refused

    from retromae_ir.pretrain.__main__ import main as pretrain

    monkeypatch.setattr(gen, "load_continuation_generator", lambda *args, **kwargs: Echo())
    side = tmp_path / "side.jsonl"
    assert gen.main(["--corpus", str(corpus), "--output", str(side), "--doc2query-model", "none", "--gpt2-model",
                     "echo", "--segment-tokenizer", str(tiny_bert_dir), "--segment-max-length", "8"]) == 0
    records = [json.loads(line) for line in side.read_text().splitlines()]
    assert [(r["id"], r["segment"]) for r in records] == [("long", 0), ("long", 1), ("long", 2), ("short", 0),
                                                          ("split", 0)]
    argv = ["--method", "master", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--batch-size", "2",
            "--max-steps", "2", "--logging-steps", "10", "--master-tasks", "gor", "--master-side-texts", str(side)]
    line = refused(pretrain, argv + ["--output", str(tmp_path / "other"), "--max-length", "16"], capsys)
    assert "cut by --segment-max-length 8" in line and not (tmp_path / "other" / "loss.csv").exists()
    pretrain(argv + ["--output", str(tmp_path / "run"), "--max-length", "8"])
    assert "gor" in (tmp_path / "run" / "loss.csv").read_text().splitlines()[0].split(",")
