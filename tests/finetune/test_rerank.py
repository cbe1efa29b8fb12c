"""Cross-encoder: group-wise loss, soft labels aligned with the candidates, resumable scoring, distillation input."""
import json
import logging

import pytest
import torch

from retromae_ir.data.readers import DataFormatError
from retromae_ir.finetune.data import TrainExample, read_jsonl_examples
from retromae_ir.finetune.losses import listwise_loss
from retromae_ir.io import file_digest
from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments
from retromae_ir.rerank.score import ScoreArguments, score_file

RECORDS = [{"qid": "1", "query": "vitamin d", "positives": ["a"], "negatives": ["b", "c"]},
           {"qid": "2", "query": "insulin", "positives": ["b", "c"], "negatives": ["a"]},
           {"qid": "3", "query": "rain", "positives": ["c"], "negatives": ["a", "b"]}]
CORPUS = {"a": "vitamin d helps bones", "b": "insulin lowers blood sugar", "c": "clouds bring rain"}


@pytest.fixture(scope="module")
def cross_encoder(tiny_bert_dir):
    return CrossEncoder.load(CrossEncoderArguments(str(tiny_bert_dir), max_length=32), group_size=3).eval()


def test_group_loss_on_the_pair_scores(cross_encoder):
    examples = [TrainExample("vitamin d", ["vitamin d helps bones"], ["x", "y"]),
                TrainExample("rain", ["clouds bring rain"], ["z", "w"])]
    batch = cross_encoder.make_collator()(examples, torch.Generator().manual_seed(0))
    assert batch["size"] == 2 and batch["input_ids"].shape[0] == 6
    outputs = cross_encoder(batch)
    expected = listwise_loss(outputs["scores"].view(2, 3))
    assert cross_encoder.loss(outputs, batch)["loss"].item() == pytest.approx(expected.item())


def test_pairs_cut_the_passage_first_and_a_query_longer_than_the_limit(cross_encoder):
    collator = cross_encoder.make_collator()  # max_length 32
    tokenizer = cross_encoder.tokenizer
    short = collator.pairs(["vitamin d"], ["bones " * 100])
    assert short["input_ids"].shape[1] == 32
    assert tokenizer.decode(short["input_ids"][0]).startswith("[CLS] vitamin d [SEP] bones")
    long = collator.pairs(["vitamin " * 40], ["bones " * 100])  # only_second truncation fails on this pair
    assert long["input_ids"].shape[1] == 32
    assert tokenizer.decode(long["input_ids"][0]).count("bones") >= 1


def test_scores_align_with_candidates_and_resume(cross_encoder, tmp_path):
    corpus, source = write_inputs(tmp_path)
    args = ScoreArguments(str(source), str(tmp_path / "scored.jsonl"), str(corpus), batch_size=4, chunk_queries=1)
    fresh = score_file(cross_encoder, args).read_text().splitlines()
    for line, record in zip(fresh, RECORDS):
        scored = json.loads(line)
        ids = record["positives"] + record["negatives"]
        expected = cross_encoder.score([record["query"]] * len(ids), [CORPUS[d] for d in ids])
        assert scored["positive_scores"] + scored["negative_scores"] == pytest.approx(expected, abs=1e-5)
        assert {k: scored[k] for k in record} == record
    examples = read_jsonl_examples(tmp_path / "scored.jsonl", CORPUS)
    assert all(e.scored for e in examples)

    # an interrupted run: one complete record and a torn one; the rerun scores the rest only
    (tmp_path / "scored.jsonl").unlink()
    interrupted(cross_encoder, args)
    (tmp_path / "scored.jsonl.partial").write_text(fresh[0] + "\n" + fresh[1][:20])  # torn while writing record 2
    scored = []
    original = cross_encoder.score
    cross_encoder.score = lambda queries, passages: scored.extend(queries) or original(queries, passages)
    try:
        resumed = score_file(cross_encoder, args).read_text().splitlines()
    finally:
        del cross_encoder.score
    assert set(scored) == {"insulin", "rain"}  # queries 2 and 3 only
    assert len(resumed) == len(fresh) and resumed[0] == fresh[0]
    for again, first in zip(map(json.loads, resumed[1:]), map(json.loads, fresh[1:])):
        assert again["qid"] == first["qid"]
        assert again["positive_scores"] + again["negative_scores"] == pytest.approx(
            first["positive_scores"] + first["negative_scores"], abs=1e-5)
    assert not (tmp_path / "scored.jsonl.partial").exists()
    assert not (tmp_path / "scored.jsonl.partial.key.json").exists()


def write_inputs(tmp_path):
    """CORPUS as corpus.jsonl and RECORDS as the negatives file neg.jsonl in ``tmp_path``."""
    corpus, source = tmp_path / "corpus.jsonl", tmp_path / "neg.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in CORPUS.items()))
    source.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return corpus, source


def interrupted(model, args):
    """score_file stopped by an error after its first chunk of queries (chunk_queries=1)."""
    original, calls = model.score, []

    def fail_second_chunk(queries, passages):
        calls.append(queries[0])
        if len(set(calls)) > 1:
            raise KeyboardInterrupt
        return original(queries, passages)

    model.score = fail_second_chunk
    try:
        with pytest.raises(KeyboardInterrupt):
            score_file(model, args)
    finally:
        del model.score


def test_a_partial_file_of_other_inputs_is_started_over(cross_encoder, tmp_path):
    """Interrupted with negatives A, rerun with negatives B into the same output: B's scores only, every record."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in CORPUS.items()))
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    other = [{**r, "qid": f"b{r['qid']}", "negatives": r["negatives"][:1]} for r in RECORDS]
    second.write_text("".join(json.dumps(r) + "\n" for r in other))
    output = str(tmp_path / "scored.jsonl")
    interrupted(cross_encoder, ScoreArguments(str(first), output, str(corpus), chunk_queries=1))
    assert (tmp_path / "scored.jsonl.partial").read_text().count("\n") == 1  # A's first record
    lines = score_file(cross_encoder, ScoreArguments(str(second), output, str(corpus), chunk_queries=1))
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [r["qid"] for r in records] == ["b1", "b2", "b3"]
    assert all(len(r["negative_scores"]) == 1 for r in records)


def test_a_mined_record_left_beside_the_scored_output_is_removed(cross_encoder, tmp_path):
    """OUTPUT.args.json (mine's record of another corpus) stayed beside the scored file, and made_from reads it
    before OUTPUT.key.json: the other corpus's digest was checked, and its ids resolved to wrong passages (exit 0)."""
    from retromae_ir.finetune.data import made_from

    corpus, source = write_inputs(tmp_path)
    output = tmp_path / "scored.jsonl"
    (tmp_path / "scored.jsonl.args.json").write_text(json.dumps({"corpus_sha256": "another corpus's"}))
    score_file(cross_encoder, ScoreArguments(str(source), str(output), str(corpus)))
    assert not (tmp_path / "scored.jsonl.args.json").exists()
    assert made_from(output)["corpus_sha256"] == file_digest(corpus)
    # the key, written before the scored file is published, names it: a file that is not its own is refused
    assert made_from(output)["output_sha256"] == file_digest(output)
    output.write_text(output.read_text().splitlines()[0] + "\n")
    with pytest.raises(DataFormatError, match=r"scored.jsonl is not the file scored.jsonl.key.json records"):
        made_from(output)


def test_a_partial_file_scored_on_another_kind_of_device_is_started_over(cross_encoder, tmp_path):
    """A GPU rounds otherwise than a CPU: a partial file begun on one is not continued on the other (it was, and the
    output held scores of two roundings)."""
    corpus, source = write_inputs(tmp_path)
    args = ScoreArguments(str(source), str(tmp_path / "scored.jsonl"), str(corpus), chunk_queries=1)
    interrupted(cross_encoder, args)
    key = tmp_path / "scored.jsonl.partial.key.json"
    assert json.loads(key.read_text())["device"] == "cpu"
    key.write_text(json.dumps({**json.loads(key.read_text()), "device": "cuda"}))  # begun on a GPU
    scored = []
    original = cross_encoder.score
    cross_encoder.score = lambda queries, passages: scored.extend(queries) or original(queries, passages)
    try:
        score_file(cross_encoder, args)
    finally:
        del cross_encoder.score
    assert set(scored) == {"vitamin d", "insulin", "rain"}  # every query again, on this device


def train_argv(model, tmp_path) -> list[str]:
    """`rerank train` of ``model`` on RECORDS over CORPUS (files written under ``tmp_path``), saving every step."""
    train_file, corpus_file = tmp_path / "train.jsonl", tmp_path / "corpus.jsonl"
    train_file.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    corpus_file.write_text("".join(json.dumps({"_id": docid, "title": "", "text": text}) + "\n"
                                   for docid, text in CORPUS.items()))
    return ["train", "--model", str(model), "--max-length", "32", "--train", str(train_file), "--corpus",
            str(corpus_file), "--group-size", "2", "--batch-size", "2", "--save-steps", "1", "--device", "cpu",
            "--output", str(tmp_path / "ce")]


def test_resume_from_a_start_trained_again_in_place_is_refused(tiny_bert_dir, tmp_path, capsys):
    """`rerank train --resume` keys the run on the start's weight files, not only on the --model path: a start
    folder trained again in place is another run (it used to resume the old one and exit 0)."""
    import shutil

    from checkpoints import train_again_in_place
    from retromae_ir.rerank.__main__ import main

    start = tmp_path / "start"
    shutil.copytree(tiny_bert_dir, start)
    argv = train_argv(start, tmp_path)
    main([*argv, "--max-steps", "2"])
    train_again_in_place(start)
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--max-steps", "3", "--resume"])
    assert refused.value.code == 2 and "start weights {" in capsys.readouterr().err


def test_resume_under_another_twin_rule_is_refused(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    """Training drops listed negatives that are a same-text query's positive: a run begun under one twin rule was
    resumed under the next (exit 0)."""
    import retromae_ir.finetune.data as data
    from retromae_ir.rerank.__main__ import main

    argv = train_argv(tiny_bert_dir, tmp_path)
    main([*argv, "--max-steps", "1"])
    monkeypatch.setattr(data, "MASKING_VERSION", data.MASKING_VERSION + 1)
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--max-steps", "2", "--resume"])
    assert refused.value.code == 2
    assert f"twin-query rule {data.MASKING_VERSION - 1} -> {data.MASKING_VERSION}" in capsys.readouterr().err


def test_scoring_with_a_checkpoint_without_a_trained_head_is_refused(tiny_bert_dir, tmp_path, capsys):
    """`rerank score --model` of a bi-encoder or plain checkpoint drew a random classification head and wrote soft
    labels of noise (exit 0), which distillation then trained on; a trained cross-encoder's output is scored."""
    from retromae_ir.rerank.__main__ import main

    source, corpus_file = tmp_path / "negatives.jsonl", tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    corpus_file.write_text("".join(json.dumps({"_id": docid, "title": "", "text": text}) + "\n"
                                   for docid, text in CORPUS.items()))
    argv = ["score", "--input", str(source), "--corpus", str(corpus_file), "--max-length", "32"]
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--model", str(tiny_bert_dir), "--output", str(tmp_path / "noise.jsonl")])
    assert refused.value.code == 2
    assert f"{tiny_bert_dir} is not a trained cross-encoder" in capsys.readouterr().err
    assert not (tmp_path / "noise.jsonl").exists()
    trained = tmp_path / "ce"
    CrossEncoder.load(CrossEncoderArguments(str(tiny_bert_dir), max_length=32)).save(trained, {})
    main([*argv, "--model", str(trained), "--output", str(tmp_path / "scored.jsonl")])
    assert len((tmp_path / "scored.jsonl").read_text().splitlines()) == len(RECORDS)
    # without --max-length, a trained cross-encoder scores at the length it was trained at, not at 256
    assert CrossEncoder.load(CrossEncoderArguments(str(trained)), trained=True).args.max_length == 32
    assert CrossEncoder.load(CrossEncoderArguments(str(tiny_bert_dir))).args.max_length == 256  # no record
    assert CrossEncoder.load(CrossEncoderArguments(str(trained), max_length=16)).args.max_length == 16


def test_scored_negatives_that_repeat_a_positive_stay_aligned(cross_encoder, tmp_path):
    """A corpus with one text under two ids: the scorer scores every listed negative, so its scores align with
    the record it writes, and distillation's reader then drops the repeat together with its score."""
    corpus = tmp_path / "corpus.jsonl"
    texts = {**CORPUS, "a2": CORPUS["a"]}
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in texts.items()))
    source = tmp_path / "neg.jsonl"
    source.write_text(json.dumps({"qid": "1", "query": "vitamin d", "positives": ["a"],
                                  "negatives": ["b", "a2", "c"]}) + "\n")
    scored = json.loads(score_file(cross_encoder, ScoreArguments(str(source), str(tmp_path / "scored.jsonl"),
                                                                 str(corpus))).read_text())
    assert scored["negatives"] == ["b", "a2", "c"] and len(scored["negative_scores"]) == 3
    (example,) = read_jsonl_examples(tmp_path / "scored.jsonl", texts)
    assert example.negatives == [CORPUS["b"], CORPUS["c"]]
    assert example.negative_scores == [scored["negative_scores"][0], scored["negative_scores"][2]]


@pytest.mark.parametrize("flag", ["--max-query-length", "--max_passage_length", "--max-passage"])
def test_the_bi_encoder_length_flags_are_refused_for_the_cross_encoder(tmp_path, capsys, flag):
    """Accepted and ignored before (the cross-encoder cuts query + passage at --max-length), exit 0."""
    from retromae_ir.rerank.__main__ import main

    with pytest.raises(SystemExit) as refused:
        main(["train", "--train", "x.jsonl", "--corpus", "c.jsonl", "--output", str(tmp_path / "ce"), flag, "32"])
    assert refused.value.code == 2
    assert "does not apply to the cross-encoder" in capsys.readouterr().err
    assert not (tmp_path / "ce").exists()


def test_ids_taken_from_another_corpus_are_refused_down_the_chain(cross_encoder, tmp_path):
    """Mined negatives name passages by id: scored or trained on with another --corpus, the ids resolved to
    unrelated passages wherever that corpus had them (exit 0). mine and rerank score record the corpus's digest;
    scoring and training check it, and the scored file passes the record on."""
    from retromae_ir.finetune.arguments import DataArguments
    from retromae_ir.finetune.data import load_examples

    corpus, other = tmp_path / "corpus.jsonl", tmp_path / "other.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in CORPUS.items()))
    other.write_text("".join(json.dumps({"_id": k, "text": f"unrelated {k}"}) + "\n" for k in CORPUS))
    mined = tmp_path / "neg.jsonl"
    mined.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    record = {"corpus": str(corpus), "corpus_sha256": file_digest(corpus)}
    (tmp_path / "neg.jsonl.args.json").write_text(json.dumps(record))
    taken = rf"neg.jsonl: its passage ids were taken from another corpus \({corpus}\)"
    with pytest.raises(DataFormatError, match=taken):
        score_file(cross_encoder, ScoreArguments(str(mined), str(tmp_path / "bad.jsonl"), str(other)))
    assert not (tmp_path / "bad.jsonl").exists()
    scored = score_file(cross_encoder, ScoreArguments(str(mined), str(tmp_path / "scored.jsonl"), str(corpus)))
    assert load_examples(DataArguments(train=str(scored), corpus=str(corpus)), need_scores=True)
    with pytest.raises(DataFormatError, match=r"scored.jsonl: its passage ids were taken from another corpus"):
        load_examples(DataArguments(train=str(scored), corpus=str(other)))
    mined.with_name("neg.jsonl.args.json").unlink()  # a hand-made file: nothing to check it against
    assert load_examples(DataArguments(train=str(mined), corpus=str(other)))


def test_a_file_mined_from_qrels_that_changed_since_is_refused(cross_encoder, tmp_path):
    """mine, then a dev split carved again (another size or seed) into the same train.tsv: the mined queries may
    now be dev queries, and training on them chose settings on queries it had learnt (exit 0). mine records the
    qrels' digest and place (relative to the file), rerank score passes them on, training and scoring check them;
    judgements added for the same queries are no reason to refuse."""
    import shutil

    from retromae_ir.data.readers import DataFormatError
    from retromae_ir.finetune.arguments import DataArguments
    from retromae_ir.finetune.data import load_examples

    out = tmp_path / "chain"
    (out / "splits").mkdir(parents=True)
    corpus, qrels = tmp_path / "corpus.jsonl", out / "splits" / "train.tsv"
    corpus.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in CORPUS.items()))
    judged = "".join(f"{r['qid']}\t{p}\t1\n" for r in RECORDS for p in r["positives"])
    qrels.write_text("query-id\tcorpus-id\tscore\n" + judged)
    mined = out / "neg.jsonl"
    mined.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    made = {"corpus": str(corpus), "corpus_sha256": file_digest(corpus), "qrels_sha256": file_digest(qrels),
            "qrels_here": "splits/train.tsv"}
    (out / "neg.jsonl.args.json").write_text(json.dumps(made))
    scored = score_file(cross_encoder, ScoreArguments(str(mined), str(out / "scored.jsonl"), str(corpus)))
    assert json.loads((out / "scored.jsonl.key.json").read_text())["qrels_here"] == "splits/train.tsv"
    copy = shutil.copytree(out, tmp_path / "copy")  # a copied output checks its own split
    qrels.write_text(qrels.read_text() + f"{RECORDS[0]['qid']}\td9\t1\n")  # a judgement added: fine
    assert load_examples(DataArguments(train=str(scored), corpus=str(corpus)), need_scores=True)
    qrels.write_text("query-id\tcorpus-id\tscore\nother\td2\t1\n")  # carved again: its queries are gone
    changed = rf"of its queries \(e.g. \['{RECORDS[0]['qid']}'.*\]\) are no longer in .*train.tsv"
    for path in (mined, scored):
        with pytest.raises(DataFormatError, match=rf"{path.name}: \d+ {changed}"):
            load_examples(DataArguments(train=str(path), corpus=str(corpus)))
    with pytest.raises(DataFormatError, match=rf"neg.jsonl: \d+ {changed}"):
        score_file(cross_encoder, ScoreArguments(str(mined), str(out / "again.jsonl"), str(corpus)))
    assert load_examples(DataArguments(train=str(copy / "scored.jsonl"), corpus=str(corpus)), need_scores=True)
    qrels.unlink()  # no longer where it was recorded: nothing to check against
    assert load_examples(DataArguments(train=str(mined), corpus=str(corpus)))


def test_a_rerun_scores_each_pair_in_the_batch_a_whole_run_would(cross_encoder, tmp_path, caplog):
    """A partial file of another batching is started over, and a chunk cut short is scored again whole: padding to
    another length rounds otherwise, and a resumed file held scores of two batchings (exit 0)."""
    caplog.set_level(logging.INFO)  # the level a command sets up
    corpus, source = write_inputs(tmp_path)
    args = ScoreArguments(str(source), str(tmp_path / "scored.jsonl"), str(corpus), batch_size=3, chunk_queries=2)
    fresh = score_file(cross_encoder, args).read_text().splitlines()
    (tmp_path / "scored.jsonl").unlink()
    partial = tmp_path / "scored.jsonl.partial"

    def rerun(arguments):
        scored, original = [], cross_encoder.score
        cross_encoder.score = lambda queries, passages: scored.extend(queries) or original(queries, passages)
        try:
            return score_file(cross_encoder, arguments).read_text().splitlines(), scored
        finally:
            del cross_encoder.score

    other_batching = ScoreArguments(**{**vars(args), "batch_size": 64, "chunk_queries": 1})
    interrupted(cross_encoder, other_batching)
    assert partial.read_text().count("\n") == 1
    assert json.loads(partial.with_name(partial.name + ".key.json").read_text())["batching"] == {
        "batch_size": 64, "chunk_queries": 1}
    lines, scored = rerun(args)
    assert lines == fresh and set(scored) == {"vitamin d", "insulin", "rain"}  # started over

    for left, rescored in ((fresh[0] + "\n", {"vitamin d", "insulin", "rain"}),  # the first chunk cut after a record
                           (fresh[0] + "\n" + fresh[1] + "\n" + fresh[2][:15], {"rain"})):  # a whole chunk, torn line
        (tmp_path / "scored.jsonl").unlink()
        interrupted(cross_encoder, args)  # leaves this batching's key beside the partial file
        partial.write_text(left)
        lines, scored = rerun(args)
        assert lines == fresh and set(scored) == rescored  # a cut chunk is scored whole again
    log = (tmp_path / "scored.jsonl.log").read_text()  # every run's, the interrupted ones' too
    assert log.count("3 queries scored") == 4 and log.count("continuing after 2 scored queries") == 1


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e39"])
def test_teacher_scores_that_are_not_finite_float32_are_refused(tmp_path, value):
    """JSON reads NaN and Infinity, and 1e39 is inf as float32: distillation's loss was nan from its first step."""
    source = tmp_path / "scored.jsonl"
    source.write_text(json.dumps({"query": "vitamin d", "positives": ["a"], "negatives": ["b"],
                                  "positive_scores": [1.0], "negative_scores": [0.5]}) + "\n"
                      + '{"query": "insulin", "positives": ["b"], "negatives": ["a"], "positive_scores": [2.0], '
                      f'"negative_scores": [{value}]}}\n')
    with pytest.raises(DataFormatError, match=rf"scored.jsonl:2: 'negative_scores' holds a score that is not a "
                                              r"finite float32"):
        read_jsonl_examples(source, CORPUS)


def test_a_cross_encoder_scoring_nan_writes_nothing(cross_encoder, tmp_path, monkeypatch):
    corpus, source = write_inputs(tmp_path)
    monkeypatch.setattr(cross_encoder, "score", lambda queries, passages: [float("nan")] * len(queries))
    with pytest.raises(ValueError, match="the cross-encoder scored a pair of query 'vitamin d' nan"):
        score_file(cross_encoder, ScoreArguments(str(source), str(tmp_path / "scored.jsonl"), str(corpus)))
    assert not (tmp_path / "scored.jsonl").exists()
    partial = tmp_path / "scored.jsonl.partial"
    assert not partial.exists() or partial.read_text() == ""


def test_a_cross_encoder_trained_again_in_place_after_its_load_is_refused(cross_encoder, tiny_bert_dir, tmp_path):
    """The weights were keyed minutes after the load (after the corpus was read): scores of the loaded weights were
    keyed as the new ones, and a resumed partial file then mixed two teachers' scores."""
    import shutil

    from retromae_ir.io import InputChangedError

    folder = tmp_path / "ce"
    cross_encoder.save(folder, {})
    loaded = CrossEncoder.load(CrossEncoderArguments(str(folder), max_length=32), trained=True)
    corpus, source = write_inputs(tmp_path)
    args = ScoreArguments(str(source), str(tmp_path / "scored.jsonl"), str(corpus))
    shutil.copy(tiny_bert_dir / "config.json", folder / "config.json")  # another training's files in its place
    with pytest.raises(InputChangedError, match=r"ce changed since it was loaded"):
        score_file(loaded, args)
    assert not (tmp_path / "scored.jsonl").exists()
