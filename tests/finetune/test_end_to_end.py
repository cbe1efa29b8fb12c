"""Stage 1 (in-batch, scifact train qrels) -> mining with the stage-1 card -> stage 2 (hard negatives, resumed)
on a tiny random DupMAE and a 50-document slice of scifact; every output loads as an encoder card."""
import json

import numpy as np
import pytest
import torch
import yaml

from retromae_ir.data.readers import iter_beir_corpus, load_beir_queries, load_qrels
from retromae_ir.encode import EncoderModel, load_card
from retromae_ir.finetune.arguments import DataArguments, LossArguments
from retromae_ir.finetune.data import TrainExample
from retromae_ir.finetune.__main__ import main as finetune
from retromae_ir.finetune.model import BiEncoder
from retromae_ir.mine import MiningArguments, judged_positives, mine


@pytest.fixture(scope="module")
def scifact_slice(shared_data, tmp_path_factory):
    """The documents judged for the first training queries, padded to 50, with those queries and qrels."""
    source = shared_data / "beir" / "scifact"
    qrels = load_qrels(source / "qrels" / "train.tsv")
    docs = {doc.docid: doc for doc in iter_beir_corpus(source / "corpus.jsonl")}
    keep, judged = [], {}
    for qid, labels in qrels.items():
        if len(keep) >= 20:
            break
        judged[qid] = labels
        keep += [d for d in labels if d not in keep]
    keep += [d for d in docs if d not in keep][:50 - len(keep)]
    out = tmp_path_factory.mktemp("scifact-slice")
    (out / "qrels").mkdir()
    (out / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d, "title": docs[d].title, "text": docs[d].text}) + "\n" for d in keep))
    queries = load_beir_queries(source / "queries.jsonl")
    (out / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in judged))
    (out / "qrels" / "train.tsv").write_text("".join(f"{q}\t{d}\t{s}\n" for q, ls in judged.items()
                                                     for d, s in ls.items()))
    return out


def tiny_card_file(tiny_bert_dir, folder):
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump({"checkpoint": str(tiny_bert_dir), "kind": "dupmae", "dims": 16, "k": 40,
                                    "query_k": 20, "max_query_length": 24, "max_passage_length": 48}))
    return path


def exact_run(card, corpus_path, queries):
    """Eq. 12 scores of every query against every document with the card's EncoderModel."""
    model = EncoderModel.from_card(card, device="cpu")
    docs = list(iter_beir_corpus(corpus_path))
    d, q = model.encode_passage([x.contents for x in docs]), model.encode_query(list(queries.values()))
    scores = q.dense @ d.dense.T + (q.sparse @ d.sparse.T).toarray()
    return {qid: {doc.docid: float(s) for doc, s in zip(docs, row)} for qid, row in zip(queries, scores)}


def test_stage1_mine_stage2(tiny_bert_dir, scifact_slice, tmp_path):
    corpus = scifact_slice / "corpus.jsonl"
    common = ["--corpus", str(corpus), "--batch-size", "4", "--device", "cpu", "--logging-steps", "1"]
    finetune(["--stage", "1", "--encoder", str(tiny_card_file(tiny_bert_dir, tmp_path)),
              "--queries", str(scifact_slice / "queries.jsonl"), "--qrels", str(scifact_slice / "qrels/train.tsv"),
              "--group-size", "1", "--max-steps", "2", "--output", str(tmp_path / "s1"), *common])
    stage1 = tmp_path / "s1" / "card.yaml"
    assert yaml.safe_load(stage1.read_text())["checkpoint"] == "."  # the folder beside the card, wherever it lies
    assert load_card(stage1).checkpoint == str((tmp_path / "s1").resolve())
    assert (tmp_path / "s1" / "projection.safetensors").is_file() and (tmp_path / "s1" / "loss.png").is_file()

    queries = load_beir_queries(scifact_slice / "queries.jsonl")
    positives = judged_positives(load_qrels(scifact_slice / "qrels/train.tsv"), 1)
    args = MiningArguments(str(stage1), str(corpus), "q", "r", str(tmp_path / "neg.jsonl"), min_rank=2,
                           max_rank=30, negatives=4)
    records = mine(exact_run(str(stage1), corpus, queries), queries, positives, args)
    assert records and all(not set(r["negatives"]) & positives[r["qid"]] for r in records)
    (tmp_path / "neg.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    stage2 = ["--stage", "2", "--encoder", str(stage1), "--train", str(tmp_path / "neg.jsonl"), "--group-size", "3",
              "--grad-cache-chunk", "2", "--save-steps", "1", "--output", str(tmp_path / "s2"), *common]
    finetune([*stage2, "--max-steps", "2"])
    finetune([*stage2, "--max-steps", "3", "--resume"])
    history = (tmp_path / "s2" / "loss.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in history] == ["step", "1", "2", "3"]
    # each invocation's data line (logged before train.log was open) is in it, the resume's too
    line = f"{tmp_path / 'neg.jsonl'}: {len(records)} training queries"
    assert (tmp_path / "s2" / "train.log").read_text().count(line) == 2
    assert json.loads((tmp_path / "s2" / "retromae_ir.json").read_text())["step"] == 3

    trained = EncoderModel.from_card(str(tmp_path / "s2" / "card.yaml"), device="cpu")
    start = EncoderModel.from_card(str(stage1), device="cpu")
    text = ["vitamin d deficiency and bone density"]
    encoded = trained.encode_query(text)
    assert encoded.dense.shape == (1, 16) and encoded.sparse.nnz <= 20
    assert not np.allclose(encoded.dense, start.encode_query(text).dense)
    # the training forward is the retrieval representation
    model = BiEncoder(trained, DataArguments(train="x", group_size=1), LossArguments()).eval()
    with torch.no_grad():
        out = model(model.make_collator()([TrainExample(text[0], ["p"], [])], torch.Generator()))
    np.testing.assert_allclose(out["query_dense"].numpy(), encoded.dense, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["query_sparse"].numpy(), encoded.sparse.toarray(), rtol=1e-5, atol=1e-6)


def test_resume_from_a_start_trained_again_in_place_is_refused(tiny_bert_dir, scifact_slice, tmp_path, capsys):
    """The start card's weight files key the run: the same card over a checkpoint trained again in place is
    another run, so --resume is refused, naming the start weights."""
    import shutil

    from checkpoints import train_again_in_place

    start = tmp_path / "start"
    shutil.copytree(tiny_bert_dir, start)
    argv = ["--stage", "1", "--encoder", str(tiny_card_file(start, tmp_path)), "--queries",
            str(scifact_slice / "queries.jsonl"), "--qrels", str(scifact_slice / "qrels/train.tsv"), "--corpus",
            str(scifact_slice / "corpus.jsonl"), "--group-size", "1", "--batch-size", "4", "--device", "cpu",
            "--save-steps", "1", "--output", str(tmp_path / "s1")]
    finetune([*argv, "--max-steps", "2"])
    train_again_in_place(start)
    with pytest.raises(SystemExit) as refused:
        finetune([*argv, "--max-steps", "3", "--resume"])
    assert refused.value.code == 2 and "start weights {" in capsys.readouterr().err


def test_resume_under_another_twin_rule_is_refused_where_the_rule_acts(tiny_bert_dir, scifact_slice, tmp_path, capsys,
                                                                      monkeypatch):
    """The twin-query rule decides what --mask-false-negatives leaves out (and drops a --train file's listed negatives
    that are a twin's positive): a run begun under one rule was resumed under the next (exit 0). From qrels without
    masking the rule changes nothing, and such a run resumes."""
    import retromae_ir.finetune.__main__ as cli

    argv = ["--stage", "1", "--encoder", str(tiny_card_file(tiny_bert_dir, tmp_path)), "--queries",
            str(scifact_slice / "queries.jsonl"), "--qrels", str(scifact_slice / "qrels/train.tsv"), "--corpus",
            str(scifact_slice / "corpus.jsonl"), "--group-size", "1", "--batch-size", "4", "--device", "cpu",
            "--save-steps", "1"]
    masked, plain = [*argv, "--mask-false-negatives", "--output", str(tmp_path / "m")], [
        *argv, "--output", str(tmp_path / "p")]
    finetune([*masked, "--max-steps", "1"])
    finetune([*plain, "--max-steps", "1"])
    monkeypatch.setattr(cli, "MASKING_VERSION", cli.MASKING_VERSION + 1)  # the next rule
    with pytest.raises(SystemExit) as refused:
        finetune([*masked, "--max-steps", "2", "--resume"])
    assert refused.value.code == 2
    assert f"twin-query rule {cli.MASKING_VERSION - 1} -> {cli.MASKING_VERSION}" in capsys.readouterr().err
    finetune([*plain, "--max-steps", "2", "--resume"])  # nothing the rule decides: resumed


def test_resume_under_other_encoding_code_is_refused(tiny_bert_dir, scifact_slice, tmp_path, capsys, monkeypatch):
    """The encoding code decides the representation fine-tuning trains (the chain keys its stages by it): a run
    begun under one version was resumed under the next by the command (exit 0)."""
    import retromae_ir.finetune.__main__ as cli

    argv = ["--stage", "1", "--encoder", str(tiny_card_file(tiny_bert_dir, tmp_path)), "--queries",
            str(scifact_slice / "queries.jsonl"), "--qrels", str(scifact_slice / "qrels/train.tsv"), "--corpus",
            str(scifact_slice / "corpus.jsonl"), "--group-size", "1", "--batch-size", "4", "--device", "cpu",
            "--save-steps", "1", "--output", str(tmp_path / "run")]
    finetune([*argv, "--max-steps", "1"])
    monkeypatch.setattr(cli, "ENCODING_VERSION", cli.ENCODING_VERSION + 1)
    with pytest.raises(SystemExit) as refused:
        finetune([*argv, "--max-steps", "2", "--resume"])
    assert refused.value.code == 2
    assert f"encoding code version {cli.ENCODING_VERSION - 1} -> {cli.ENCODING_VERSION}" in capsys.readouterr().err


def test_a_dense_start_from_an_mlm_checkpoint_loads_the_same_weights_every_time(tiny_bert_dir):
    """An MLM checkpoint has no pooler: loading it as a dense encoder draws one, which fine-tuning saves. Drawn from
    whatever the global generator held, two runs of one seed saved different bytes (every index keyed by the
    weights' digests was encoded again, a later stage's start was another start)."""
    from retromae_ir.finetune.model import hf_model, load_encoder
    from tiny import tiny_card

    def pooler(draws: int) -> torch.Tensor:
        torch.rand(draws)  # the global generator wherever the caller left it
        return hf_model(load_encoder(tiny_card(tiny_bert_dir, kind="retromae"), seed=7)).pooler.dense.weight.detach()

    assert torch.equal(pooler(1), pooler(5))
