"""MASTER side-text generation with tiny random models: record format, resume after an interruption,
torn tails, no duplicates, identical output to an uninterrupted run.

Offline tokenizers: the doc2query stand-in (a tiny T5ForConditionalGeneration) reuses MiniLM's WordPiece
tokenizer ([PAD]=0 is T5's decoder start, [SEP] its eos); the GPT-2 stand-in gets a byte-level BPE trained
here on a few sentences and wrapped as GPT2TokenizerFast, so the real no-pad-token path is exercised.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from retromae_ir.pretrain import generate as gen

PASSAGES = [f"passage {i} about {w} and the {w} of cells in tissue" for i, w in
            enumerate(["proteins", "genes", "neurons", "viruses", "bacteria", "enzymes", "lipids"])]
DOCS = [(f"d{i}", text) for i, text in enumerate(PASSAGES)]


@pytest.fixture(scope="module")
def query_generator(minilm_path):
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    config = T5Config(vocab_size=tokenizer.vocab_size, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
                      decoder_start_token_id=tokenizer.pad_token_id)
    model = T5ForConditionalGeneration(config).eval()
    return gen.QueryGenerator(model, tokenizer, num_queries=3, max_query_length=6)


@pytest.fixture(scope="module")
def continuation_generator():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(PASSAGES, vocab_size=300, special_tokens=["<|endoftext|>"])
    tokenizer = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    assert tokenizer.pad_token is None
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2, n_positions=64,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config).eval()
    return gen.ContinuationGenerator(model, tokenizer, max_prompt_length=12, max_new_tokens=5)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_hold_queries_and_continuation(tmp_path, query_generator, continuation_generator):
    out = tmp_path / "side.jsonl"
    n = gen.generate_side_texts(DOCS, out, [query_generator, continuation_generator], batch_size=3)
    records = read_jsonl(out)
    assert n == 7 and [r["id"] for r in records] == [docid for docid, _ in DOCS]
    assert all(set(r) == {"id", "text_sha256", "queries", "continuation"} for r in records)
    assert all(len(r["queries"]) == 3 and all(isinstance(q, str) for q in r["queries"]) for r in records)
    assert all(isinstance(r["continuation"], str) for r in records)
    assert not gen.partial_path(out).exists()


def test_a_second_writer_of_the_same_output_is_refused(tmp_path, continuation_generator):
    """Two runs on one output (a job requeued while the first still ran) appended the same records, the second
    then into the published file, and deleted its key (exit 0 for the first)."""
    from lock_holder import held_lock

    from retromae_ir.io import OutputLockedError

    out = tmp_path / "side.jsonl"
    with held_lock(out) as pid:
        with pytest.raises(OutputLockedError, match=f"PID {pid}"):
            gen.generate_side_texts(DOCS[:2], out, [continuation_generator], batch_size=2)
    assert not out.exists() and not gen.partial_path(out).exists()
    gen.generate_side_texts(DOCS[:2], out, [continuation_generator], batch_size=2)  # the holder gone: written
    assert len(read_jsonl(out)) == 2


def test_switched_off_generator_leaves_its_key_out(tmp_path, continuation_generator):
    out = tmp_path / "side.jsonl"
    gen.generate_side_texts(DOCS[:2], out, [continuation_generator], batch_size=2)
    assert [set(r) for r in read_jsonl(out)] == [{"id", "text_sha256", "continuation"}] * 2


def test_interrupted_run_resumes_to_the_same_file(tmp_path, query_generator, continuation_generator):
    generators = [query_generator, continuation_generator]
    reference = tmp_path / "reference.jsonl"
    gen.generate_side_texts(DOCS, reference, generators, batch_size=2, seed=7)
    assert len({q for r in read_jsonl(reference) for q in r["queries"]}) > 10  # real, varied samples

    class Interrupt(Exception):
        pass

    calls = {"n": 0}
    generate = continuation_generator.model.generate

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # third batch: two batches (4 docs) are already on disk
            raise Interrupt
        return generate(*args, **kwargs)

    out = tmp_path / "side.jsonl"
    continuation_generator.model.generate = failing
    try:
        with pytest.raises(Interrupt):
            gen.generate_side_texts(DOCS, out, generators, batch_size=2, seed=7)
    finally:
        del continuation_generator.model.generate
    partial = gen.partial_path(out)
    assert not out.exists()
    assert [r["id"] for r in read_jsonl(partial)] == ["d0", "d1", "d2", "d3"]
    with open(partial, "a") as handle:  # a record torn by a kill in the middle of a write
        handle.write('{"id": "d4", "queries": ["half')

    written = gen.generate_side_texts(DOCS, out, generators, batch_size=2, seed=7)
    assert written == 3
    assert out.read_text() == reference.read_text()
    assert gen.generate_side_texts(DOCS, out, generators, batch_size=2, seed=7) == 0
    assert out.read_text() == reference.read_text()
    # killed between publishing's two renames: OUTPUT without its key, the key still the partial's. Every rerun
    # was refused ("no key file"), with advice that threw the texts away; the rename is finished instead
    from retromae_ir.io import key_path

    os.replace(key_path(out), key_path(partial))
    assert gen.generate_side_texts(DOCS, out, generators, batch_size=2, seed=7) == 0
    assert out.read_text() == reference.read_text() and key_path(out).is_file()


def test_cli_loads_models_by_path(tmp_path, query_generator, continuation_generator, capsys):
    for name, generator in (("t5", query_generator), ("gpt2", continuation_generator)):
        generator.model.save_pretrained(tmp_path / name)
        generator.tokenizer.save_pretrained(tmp_path / name)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": docid, "title": "", "text": text}) + "\n" for docid, text in DOCS[:3]))
    out = tmp_path / "side.jsonl"
    argv = ["--corpus", str(corpus), "--output", str(out), "--doc2query-model", str(tmp_path / "t5"),
            "--gpt2-model", str(tmp_path / "gpt2"), "--num-queries", "2", "--max-query-length", "5",
            "--max-new-tokens", "3", "--batch-size", "2", "--device", "cpu"]
    assert gen.main(argv) == 0
    records = read_jsonl(out)
    assert [r["id"] for r in records] == ["d0", "d1", "d2"] and all(len(r["queries"]) == 2 for r in records)
    assert "wrote 3 new records" in (tmp_path / "side.jsonl.log").read_text()
    with pytest.raises(SystemExit) as exit_:
        gen.main(argv[:4] + ["--gpt2-model", "none", "--doc2query-model", "none"])
    assert exit_.value.code == 2 and "error: no generator selected" in capsys.readouterr().err
    # a switched-off generator's options: parsed, logged as arguments, read by nothing
    for off, given, says in (("--gpt2-model", ["--max-new-tokens", "3"], "--max-new-tokens: options of --gpt2-model"),
                             ("--doc2query-model", ["--num-queries", "2", "--query-top-k", "5"],
                              "--num-queries, --query-top-k: options of --doc2query-model, which is none")):
        with pytest.raises(SystemExit) as exit_:
            gen.main([*argv[:2], "--output", str(tmp_path / "off.jsonl"), off, "none", *given])
        assert exit_.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "off.jsonl").exists()
    # a second writer of another output stops before loading a model or writing into the holder's log
    from lock_holder import held_lock

    other = tmp_path / "other.jsonl"
    with held_lock(other) as pid:
        with pytest.raises(SystemExit) as exit_:
            gen.main([*argv[:2], "--output", str(other), *argv[4:]])
    assert exit_.value.code == 2 and f"PID {pid}" in capsys.readouterr().err
    assert not (tmp_path / "other.jsonl.log").exists()
    # the doc2query folder trained again in place: same path, other weights, so the file is not continued
    from transformers import T5ForConditionalGeneration

    t5 = T5ForConditionalGeneration.from_pretrained(tmp_path / "t5")
    with torch.no_grad():
        t5.shared.weight.mul_(2.0)
    t5.save_pretrained(tmp_path / "t5")
    with pytest.raises(SystemExit) as exit_:
        gen.main(argv)
    assert exit_.value.code == 2 and "was generated with other settings" in capsys.readouterr().err


def test_repeated_corpus_id_is_an_error(tmp_path, continuation_generator):
    with pytest.raises(ValueError, match="occurs twice"):
        gen.generate_side_texts(DOCS[:2] + DOCS[:1], tmp_path / "side.jsonl", [continuation_generator])
    assert not (tmp_path / "side.jsonl").exists()


def test_other_settings_are_refused_and_changed_passages_generated_again(tmp_path, query_generator,
                                                                         continuation_generator):
    """A finished file is extended only under the same generators and seed, and only for unchanged passages: a
    changed passage gets a new record in its place, a document gone from the corpus loses its record."""
    out = tmp_path / "side.jsonl"
    assert gen.generate_side_texts(DOCS[:4], out, [query_generator], batch_size=2, seed=7) == 4
    # another generator set (or seed, model, options): refused, the file kept; moved away, generated afresh
    before = out.read_text()
    with pytest.raises(ValueError, match="was generated with other settings .*move it away"):
        gen.generate_side_texts(DOCS[:4], out, [query_generator, continuation_generator], batch_size=2, seed=7)
    assert out.read_text() == before and not gen.partial_path(out).exists()
    out.rename(tmp_path / "queries-only.jsonl")
    assert gen.generate_side_texts(DOCS[:4], out, [query_generator, continuation_generator], batch_size=2,
                                   seed=7) == 4
    both = {r["id"]: r for r in read_jsonl(out)}
    # same settings: d1's passage changed, d3 left the corpus, d4 joined
    changed = [DOCS[0], (DOCS[1][0], DOCS[1][1] + " and something new"), DOCS[2], DOCS[4]]
    assert gen.generate_side_texts(changed, out, [query_generator, continuation_generator], batch_size=2,
                                   seed=7) == 2
    records = read_jsonl(out)
    assert sorted(r["id"] for r in records) == sorted(docid for docid, _ in changed)
    by_id = {r["id"]: r for r in records}
    assert by_id["d0"] == both["d0"] and by_id["d2"] == both["d2"]
    assert by_id["d1"]["text_sha256"] == gen.text_digest(changed[1][1]) != both["d1"]["text_sha256"]


def test_an_interrupted_regeneration_of_changed_passages_resumes(tmp_path, query_generator):
    """A finished file, then changed passages whose regeneration is interrupted (old and new records of d0 in the
    partial file): the rerun finishes with one record an id, the new ones."""
    out = tmp_path / "side.jsonl"
    gen.generate_side_texts(DOCS[:4], out, [query_generator], batch_size=1, seed=7)
    changed = [(docid, text + " revised") for docid, text in DOCS[:4]]

    class Interrupt(Exception):
        pass

    generate, calls = query_generator.model.generate, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # d0 and d1 generated again, d2 not
            raise Interrupt
        return generate(*args, **kwargs)

    query_generator.model.generate = failing
    try:
        with pytest.raises(Interrupt):
            gen.generate_side_texts(changed, out, [query_generator], batch_size=1, seed=7)
    finally:
        del query_generator.model.generate
    assert gen.generate_side_texts(changed, out, [query_generator], batch_size=1, seed=7) == 2
    records = read_jsonl(out)
    assert [r["id"] for r in records] == ["d0", "d1", "d2", "d3"]
    assert all(r["text_sha256"] == gen.text_digest(text) for r, (_, text) in zip(records, changed))
