"""MASTER on a tiny random BERT: task switches, CMP complementarity, NPR pairs, side texts, loss, CLI."""
from __future__ import annotations

import json
import re

import pytest
import torch

from retromae_ir.pretrain.arguments import MaskingArguments
from retromae_ir.pretrain.collate import Segment
from retromae_ir.pretrain.keywords import count_corpus
from retromae_ir.pretrain.master import (MASTER, MasterArguments, MasterExample, MasterSetupError,
                                         split_halves)
from retromae_ir.pretrain.masking import IGNORE_INDEX
from retromae_ir.pretrain.side_texts import SideTextError, load_side_texts

TEXTS = {
    "a": "Microstructural development of human newborn cerebral white matter assessed by diffusion tensor imaging.",
    "b": "Alterations of the architecture of cerebral white matter in the developing brain affect cortical growth.",
    "c": "A line scan diffusion weighted magnetic resonance imaging sequence measured the apparent coefficient.",
    "d": "Relative anisotropy was calculated and fiber architecture was delineated in three dimensions here.",
}


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.fixture(scope="module")
def stats_file(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("stats") / "stats.json"
    count_corpus(TEXTS.values(), tokenizer, "tiny").save(path)
    return path


@pytest.fixture(scope="module")
def side_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("side") / "side.jsonl"
    rows = [{"id": "a", "queries": ["what is white matter", "newborn brain imaging"],
             "continuation": "The results show growth."},
            {"id": "b", "queries": ["cortical growth"], "continuation": "Further studies follow."},
            {"id": "c", "queries": ["apparent diffusion coefficient"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def segments(tokenizer):
    """Doc 'a' in two in-order segments (NPR pair), the others whole."""
    ids = {docid: tokenizer(text, add_special_tokens=False)["input_ids"] for docid, text in TEXTS.items()}
    return [Segment("a", 0, tuple(ids["a"][:8])), Segment("a", 1, tuple(ids["a"][8:])),
            *(Segment(d, 0, tuple(ids[d])) for d in "bcd")]


def build(tiny_bert_dir, masking=None, **args) -> MASTER:
    torch.manual_seed(0)
    return MASTER.from_pretrained(str(tiny_bert_dir), masking or MaskingArguments(), MasterArguments(**args))


def collate(model, segments, seed=0):
    return model.make_collator()(model.make_examples(segments), torch.Generator().manual_seed(seed))


def test_dor_gor_are_off_without_side_texts(tiny_bert_dir, stats_file, side_file, segments):
    model = build(tiny_bert_dir, master_corpus_stats=str(stats_file))
    assert model.tasks == ("mkp", "cmp", "npr") and set(model.decoders) == {"mkp", "cmp", "npr"}
    assert not any(k.startswith(("dor_", "gor_")) for k in collate(model, segments))
    model = build(tiny_bert_dir, master_tasks="dor,gor", master_side_texts=str(side_file))
    assert model.tasks == ("dor", "gor")
    batch = collate(model, segments)
    has_labels = lambda key: (batch[key] != IGNORE_INDEX).any(-1).tolist()  # noqa: E731
    assert has_labels("dor_labels") == [True, True, True, True, False]  # a, a, b, c; d has no texts
    assert has_labels("gor_labels") == [True, True, True, False, False]  # c has queries only
    with pytest.raises(MasterSetupError, match="no MASTER decoder task"):
        build(tiny_bert_dir, master_tasks="dor,gor")


def test_side_texts_join_queries_with_sep(side_file):
    texts = load_side_texts(side_file, "[SEP]")
    assert not texts.per_segment
    assert texts.texts[("a", None)] == {"dor": "what is white matter [SEP] newborn brain imaging",
                                        "gor": "The results show growth."}
    assert texts.texts[("c", None)] == {"dor": "apparent diffusion coefficient"}


def test_cmp_masks_are_disjoint_and_cover_the_text(tiny_bert_dir, tokenizer, segments):
    model = build(tiny_bert_dir, master_tasks="cmp", master_decoder_corruption="mask")
    for seed in range(5):
        batch = collate(model, segments, seed)
        specials = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
        ordinary = batch["attention_mask"].bool() & ~specials
        encoder_masked = batch["cmp_encoder_labels"] != IGNORE_INDEX
        decoder_masked = batch["cmp_labels"] != IGNORE_INDEX
        assert not (encoder_masked & decoder_masked).any()
        assert torch.equal(encoder_masked | decoder_masked, ordinary)
        assert encoder_masked.any() and decoder_masked.any()
        # the decoder sees exactly the tokens the encoder lost, and [MASK] wherever the encoder could look
        assert torch.equal(batch["cmp_input_ids"][encoder_masked], batch["input_ids"][encoder_masked])
        assert (batch["cmp_input_ids"][decoder_masked] == tokenizer.mask_token_id).all()
        assert not torch.equal(batch["cmp_encoder_labels"], batch["encoder_labels"])  # its own mask, not the main one


def test_decoder_texts_hide_their_words_as_bert_does_by_default(tiny_bert_dir, stats_file, tokenizer, segments):
    """The authors' code corrupts every decoder text 80/10/10; all-[MASK] (the paper's wording) is the option."""
    bert = build(tiny_bert_dir, master_tasks="mkp,cmp", master_corpus_stats=str(stats_file))
    masked = kept = total = 0
    for seed in range(30):
        batch = collate(bert, segments, seed)
        for task in ("mkp", "cmp"):
            selected = batch[f"{task}_labels"] != IGNORE_INDEX
            assert torch.equal(batch[f"{task}_input_ids"][~selected], batch["input_ids"][~selected])
            total += int(selected.sum())
            masked += int((batch[f"{task}_input_ids"][selected] == tokenizer.mask_token_id).sum())
            kept += int((batch[f"{task}_input_ids"][selected] == batch["input_ids"][selected]).sum())
    assert masked / total == pytest.approx(0.8, abs=0.04) and kept / total == pytest.approx(0.1, abs=0.04)
    plain = build(tiny_bert_dir, master_tasks="mkp", master_corpus_stats=str(stats_file),
                  master_decoder_corruption="mask")
    batch = collate(plain, segments)
    selected = batch["mkp_labels"] != IGNORE_INDEX
    assert (batch["mkp_input_ids"][selected] == tokenizer.mask_token_id).all()
    with pytest.raises(MasterSetupError, match="--master-decoder-corruption must be bert or mask"):
        build(tiny_bert_dir, master_tasks="cmp", master_decoder_corruption="drop")


@pytest.mark.parametrize("ratio", [None, 0.2])
def test_cmp_splits_the_words_at_its_own_ratio(tiny_bert_dir, tokenizer, segments, ratio):
    """CMP's encoder pass masks --master-cmp-mask-ratio of the words (default 0.5, the authors' code), not the
    main pass's --encoder-mask-ratio (0.3): its decoder had 70% of the tokens to recover where theirs has half."""
    model = build(tiny_bert_dir, master_tasks="cmp", **({} if ratio is None else {"master_cmp_mask_ratio": ratio}))
    masked = ordinary = 0
    for seed in range(20):
        batch = collate(model, segments, seed)
        specials = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
        ordinary += int((batch["attention_mask"].bool() & ~specials).sum())
        masked += int((batch["cmp_encoder_labels"] != IGNORE_INDEX).sum())
    assert masked / ordinary == pytest.approx(0.5 if ratio is None else ratio, abs=0.05)


def test_npr_pairs_neighbouring_segments(tiny_bert_dir, stats_file, segments):
    model = build(tiny_bert_dir, master_tasks="npr", master_corpus_stats=str(stats_file))
    examples = model.make_examples(segments)
    assert examples[0] == MasterExample(segments[0], None, segments[1].input_ids)
    assert [e.npr_target for e in examples[1:]] == [None] * 4
    batch = collate(model, segments)
    labelled = batch["npr_labels"] != IGNORE_INDEX
    assert labelled.any(-1).tolist() == [True, False, False, False, False]
    target = batch["npr_input_ids"].new_tensor([model.tokenizer.cls_token_id, *segments[1].input_ids])
    row = labelled[0, :len(target)]
    assert torch.equal(batch["npr_labels"][0, :len(target)][row], target[row])  # segment i+1's words
    assert not labelled[0, len(target):].any()
    assert "npr_encoder_input_ids" not in batch  # h comes from the main pass over segment i


def test_npr_halves_cut_at_a_word_start(tiny_bert_dir, stats_file, tokenizer, segments):
    model = build(tiny_bert_dir, master_tasks="npr", master_corpus_stats=str(stats_file), master_npr_pairs="halves")
    ids = tokenizer("microstructural development of newborn", add_special_tokens=False)["input_ids"]
    first, second = split_halves(ids, model.tables.continuation)
    assert first + second == tuple(ids) and not tokenizer.convert_ids_to_tokens(second[0]).startswith("##")
    assert split_halves(tokenizer("microstructural", add_special_tokens=False)["input_ids"],
                        model.tables.continuation) is None
    batch = collate(model, segments)
    assert (batch["npr_encoder_labels"] != IGNORE_INDEX).any(-1).all()
    assert {"npr_mlm", "npr"} <= set(model(batch))


def test_mkp_masks_about_half_of_the_tokens_never_special(tiny_bert_dir, stats_file, tokenizer, segments):
    model = build(tiny_bert_dir, master_tasks="mkp", master_corpus_stats=str(stats_file),
                  master_decoder_corruption="mask")
    batch = collate(model, segments)
    masked = batch["mkp_labels"] != IGNORE_INDEX
    ordinary = batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
    assert not (masked & ~ordinary).any()
    # whole words up to about half of the tokens (a long rare word drawn early can make a row miss 0.5)
    assert masked.any(-1).all() and 0.4 < masked.sum() / ordinary.sum() < 0.6
    assert (batch["mkp_input_ids"][masked] == tokenizer.mask_token_id).all()


def test_setup_errors(tiny_bert_dir, stats_file):
    with pytest.raises(MasterSetupError, match="corpus statistics"):
        build(tiny_bert_dir, master_tasks="mkp")
    with pytest.raises(MasterSetupError, match="unknown MASTER task"):
        build(tiny_bert_dir, master_tasks="cmp,xyz")
    with pytest.raises(MasterSetupError, match="segments or halves"):
        build(tiny_bert_dir, master_tasks="cmp", master_npr_pairs="thirds")
    with pytest.raises(MasterSetupError, match=r"--master-cmp-mask-ratio must be in \(0, 1\), got 1.0"):
        build(tiny_bert_dir, master_tasks="cmp", master_cmp_mask_ratio=1.0)
    with pytest.raises(MasterSetupError, match="--master-side-max-length 2 leaves no room for text"):
        build(tiny_bert_dir, master_tasks="cmp", master_side_max_length=2)


@pytest.mark.parametrize("given, tasks, says", [
    ({"master_corpus_stats": "stats.json"}, "cmp,dor", "--master-corpus-stats is read by the mkp and npr tasks"),
    ({"master_side_texts": "side.jsonl"}, "mkp,cmp", "--master-side-texts is read by the dor and gor tasks"),
    ({"master_npr_pairs": "halves"}, "mkp", "--master-npr-pairs is read by the npr task only, and --master-tasks "
                                            "mkp has none of them"),
    ({"master_keyword_weighting": "tfidf"}, "cmp", "--master-keyword-weighting is read by the mkp and npr tasks"),
    ({"master_cmp_mask_ratio": 0.3}, "mkp,npr", "--master-cmp-mask-ratio is read by the cmp task only"),
    ({"master_side_max_length": 64}, "cmp", "--master-side-max-length is read by the dor and gor tasks only, and "
                                            "--master-tasks cmp has none of them"),
    # dor and gor chosen, but off without side texts
    ({"master_side_max_length": 64}, "cmp,dor,gor", "--master-side-max-length .* they are off without "
                                                    "--master-side-texts")])
def test_inputs_no_chosen_task_reads_are_refused(given, tasks, says):
    from retromae_ir.pretrain.master import check_arguments

    with pytest.raises(MasterSetupError, match=says):
        check_arguments(MasterArguments(master_tasks=tasks, **given))
    check_arguments(MasterArguments(**{"master_side_texts": "side.jsonl", **given}))  # every task on: read


def test_a_decoder_mask_ratio_no_task_reads_is_refused(tiny_bert_dir):
    """CMP's decoder masks the words its encoder pass left: --decoder-mask-ratio under --master-tasks cmp was
    accepted, ignored, and written into the run's identity."""
    with pytest.raises(MasterSetupError, match="--decoder-mask-ratio is read by the mkp, npr, dor, gor tasks only"):
        build(tiny_bert_dir, master_tasks="cmp", masking=MaskingArguments(decoder_mask_ratio=0.7))
    build(tiny_bert_dir, master_tasks="cmp", masking=MaskingArguments())


def test_decoder_init_is_refused_where_a_continued_checkpoints_decoders_load(tiny_bert_dir, tmp_path, capsys):
    """The start's decoders replaced the fresh ones: --master-decoder-init copy was overridden, yet keyed. A run
    made with it still resumes (its own checkpoints hold the decoders it built)."""
    from retromae_ir.pretrain.__main__ import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in TEXTS.items()))

    def pretrain(model, out, *extra):
        return main(["--method", "master", "--model", str(model), "--corpus", str(corpus), "--output", str(out),
                     "--max-length", "16", "--batch-size", "4", "--logging-steps", "10", "--master-tasks", "cmp",
                     "--master-decoder-init", "copy", *extra])

    pretrain(tiny_bert_dir, tmp_path / "ours", "--max-steps", "1")
    pretrain(tiny_bert_dir, tmp_path / "ours", "--max-steps", "2", "--resume")
    assert json.loads((tmp_path / "ours" / "trainer_state" / "run.json").read_text())["step"] == 2
    with pytest.raises(SystemExit) as refused:
        pretrain(tmp_path / "ours", tmp_path / "continued", "--max-steps", "1")
    assert refused.value.code == 2 and not (tmp_path / "continued").exists()
    assert "--master-decoder-init shapes new decoders, and --model" in capsys.readouterr().err


def test_copy_init_duplicates_the_last_encoder_layers(tiny_bert_dir):
    model = build(tiny_bert_dir, master_tasks="cmp", master_decoder_init="copy")
    source = model.encoder.bert.encoder.layer
    for target, layer in zip(model.decoders["cmp"].layers, source):
        assert all(torch.equal(a, b) for a, b in zip(target.state_dict().values(), layer.state_dict().values()))
    fresh = build(tiny_bert_dir, master_tasks="cmp")
    weight = fresh.decoders["cmp"].layers[0].attention.self.query.weight
    assert abs(weight.std().item() - fresh.encoder.config.initializer_range) < 0.005


def test_all_five_tasks_loss_goes_down(tiny_bert_dir, stats_file, side_file, segments):
    model = build(tiny_bert_dir, master_corpus_stats=str(stats_file), master_side_texts=str(side_file))
    assert model.tasks == ("mkp", "cmp", "npr", "dor", "gor")
    batch = collate(model, segments)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    history = []
    for _ in range(5):
        torch.manual_seed(0)
        terms = model(batch)
        assert set(terms) == {"loss", "mlm", "cmp_mlm", "mkp", "cmp", "npr", "dor", "gor"}
        assert torch.isclose(terms["loss"], sum(v for k, v in terms.items() if k != "loss"))  # Eq. 8
        optimizer.zero_grad()
        terms["loss"].backward()
        optimizer.step()
        history.append({k: v.item() for k, v in terms.items()})
    assert history[-1]["loss"] < 0.85 * history[0]["loss"]  # 72.4 -> 57.3 when measured
    assert all(history[-1][t] < history[0][t] for t in ("mkp", "cmp", "npr", "dor", "gor"))


def test_checkpoint_round_trip_keeps_every_decoder(tmp_path, tiny_bert_dir, stats_file, side_file):
    args = dict(master_corpus_stats=str(stats_file), master_side_texts=str(side_file))
    model = build(tiny_bert_dir, **args)
    with torch.no_grad():
        model.decoders["gor"].layers[1].output.dense.weight.fill_(0.125)
    model.save(tmp_path / "ckpt", {"step": 0})
    again = build(tmp_path / "ckpt", **args)
    assert {k.split(".")[1] for k in again.decoder_state_dict()} == {"mkp", "cmp", "npr", "dor", "gor"}
    assert all(torch.equal(v, again.decoder_state_dict()[k]) for k, v in model.decoder_state_dict().items())


def test_cli_trains_master(tmp_path, tiny_bert_dir, stats_file, side_file, monkeypatch, capsys):
    from retromae_ir.pretrain.__main__ import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in TEXTS.items()))
    out = tmp_path / "run"
    main(["--method", "master", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(out),
          "--max-length", "16", "--batch-size", "4", "--max-steps", "2", "--logging-steps", "10",
          "--master-corpus-stats", str(stats_file), "--master-side-texts", str(side_file), "--master-tasks",
          "mkp,cmp,npr,dor,gor"])
    meta = json.loads((out / "retromae_ir.json").read_text())
    assert meta["method"] == "master" and meta["method_args"]["master_tasks"] == "mkp,cmp,npr,dor,gor"
    header = (out / "loss.csv").read_text().splitlines()[0].split(",")
    assert {"loss", "mkp", "cmp", "npr", "dor", "gor", "cmp_mlm"} <= set(header)
    from retromae_ir.pretrain.keywords import KEYWORD_MASKING_VERSION

    # the keyword-masking rule keys the run: one started under another rule is not resumed under this one
    run = json.loads((out / "trainer_state" / "run.json").read_text())["identity"]
    assert run["keyword_masking"] == KEYWORD_MASKING_VERSION
    from retromae_ir.pretrain.corpus_stats import KEY_VERSION

    assert run["corpus_stats_counting"] == KEY_VERSION  # statistics counted anew under another rule: new weights
    assert MASTER.code_identity(MasterArguments(master_tasks="cmp,dor")) == {"objective": MASTER.objective_version}
    monkeypatch.setattr("retromae_ir.pretrain.master.KEYWORD_MASKING_VERSION", KEYWORD_MASKING_VERSION + 1)
    with pytest.raises(SystemExit) as refused:
        main(["--method", "master", "--model", str(tiny_bert_dir), "--corpus", str(corpus), "--output", str(out),
              "--max-length", "16", "--batch-size", "4", "--max-steps", "3", "--logging-steps", "10",
              "--master-corpus-stats", str(stats_file), "--master-side-texts", str(side_file), "--resume"])
    assert refused.value.code == 2
    assert f"keyword masking rule {KEYWORD_MASKING_VERSION} -> {KEYWORD_MASKING_VERSION + 1}" in capsys.readouterr().err


@pytest.mark.parametrize("line", ['{"queries": ["q"]}', '{"id": "a", "queries": "q"}', '{"id": "a", "queries": [1]}',
                                  '{"id": "a", "continuation": 3}', '["a"]', '{"id": "a", "queries": ["q"',
                                  '{"id": null, "queries": ["q"]}', '{"id": 1.5, "queries": ["q"]}'])
def test_malformed_side_texts_name_the_line(tmp_path, line):
    from retromae_ir.data.readers import DataFormatError

    path = tmp_path / "side.jsonl"
    path.write_text('{"id": "ok", "queries": ["q"]}\n\n' + line + "\n")
    with pytest.raises(DataFormatError, match=r"side.jsonl:3: expected"):
        load_side_texts(path, "[SEP]")


@pytest.mark.parametrize("first, second, says", [
    ('{"id": "a", "queries": ["q1"]}', '{"id": "a", "continuation": "c"}', "a second record of id 'a' (the first"),
    ('{"id": 7, "queries": ["q1"]}', '{"id": "7", "queries": ["q2"]}', "a second record of id '7' (the first"),
    ('{"id": "a", "segment": 0, "queries": ["q"]}', '{"id": "a", "segment": 0, "queries": ["r"]}',
     "a second record of id 'a', segment 0 (the first on line 1)"),
])
def test_a_document_with_two_side_text_records_is_refused(tmp_path, first, second, says):
    """The last record won silently: the first one's queries (or continuation) were lost."""
    from retromae_ir.data.readers import DataFormatError

    path = tmp_path / "side.jsonl"
    path.write_text(f"{first}\n{second}\n")
    with pytest.raises(DataFormatError, match=rf"side.jsonl:2: {re.escape(says)}"):
        load_side_texts(path, "[SEP]")


def test_master_resumes_exactly(tmp_path, tiny_bert_dir, stats_file, side_file, monkeypatch):
    from retromae_ir.training.arguments import TrainingArguments
    from retromae_ir.pretrain.data import load_segments
    from retromae_ir.training.trainer import Trainer

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in TEXTS.items()))

    def trainer(output, resume=False):
        model = build(tiny_bert_dir, master_corpus_stats=str(stats_file), master_side_texts=str(side_file))
        args = TrainingArguments(output=str(output), max_steps=4, batch_size=2, lr=1e-3, save_steps=2,
                                 logging_steps=100, seed=5, device="cpu", resume=resume)
        return Trainer(model, model.make_examples(load_segments(corpus, model.tokenizer, 16)), args, {})

    monkeypatch.setattr("retromae_ir.training.trainer.plot_loss_curves", lambda *a, **k: None)  # ~6 s a plot here
    straight = trainer(tmp_path / "a")
    straight.train()
    interrupted = trainer(tmp_path / "b")
    step = interrupted.train_step

    def crash_at_step_three():
        if interrupted.step == 3:
            raise KeyboardInterrupt
        return step()

    monkeypatch.setattr(interrupted, "train_step", crash_at_step_three)
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    resumed = trainer(tmp_path / "b", resume=True)
    resumed.train()
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a/loss.csv").read_text() == (tmp_path / "b/loss.csv").read_text()


def test_side_texts_of_other_passages_are_refused(tmp_path, caplog):
    """generate.py's records name their passage by digest: a corpus edited since (or another corpus whose ids
    coincide) must not pair a passage with another one's queries."""
    from retromae_ir.pretrain.generate import text_digest

    texts = {"a": "white matter of the newborn brain", "b": "cortical growth in infants"}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in texts.items()))
    side = tmp_path / "side.jsonl"
    rows = [{"id": k, "text_sha256": text_digest(v), "queries": [f"about {k}"], "continuation": ""}
            for k, v in texts.items()] + [{"id": "z", "text_sha256": "0" * 16, "queries": ["not in the corpus"]}]
    side.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = MasterArguments(master_tasks="dor", master_side_texts=str(side))
    assert MASTER.prepare_arguments(args, corpus, "unused", 16) == args  # matching digests; id z is never looked up
    corpus.write_text(corpus.read_text().replace("cortical growth", "jazz history"))
    with pytest.raises(SideTextError, match=r"side.jsonl: 1 side-text record\(s\) .* \(first: 'b'\)"):
        MASTER.prepare_arguments(args, corpus, "unused", 16)
    side.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "text_sha256"}) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="retromae_ir.pretrain.side_texts"):
        MASTER.prepare_arguments(args, corpus, "unused", 16)
    assert "2 side-text record(s) carry no text_sha256" in caplog.text


def test_side_texts_of_another_id_scheme_are_refused_and_a_partial_cover_is_counted(tmp_path, caplog):
    """Side texts generated from the BEIR file (ids a, b) beside the same passages as plain text (ids 1, 2: line numbers): no
    passage has a record, so DOR/GOR trained on empty targets (no labels, loss 0) and the run exited 0."""
    from retromae_ir.pretrain.generate import text_digest

    texts = {"a": "white matter of the newborn brain", "b": "cortical growth in infants"}
    side, plain = tmp_path / "side.jsonl", tmp_path / "corpus.txt"
    side.write_text("".join(json.dumps({"id": k, "text_sha256": text_digest(v), "queries": [f"about {k}"],
                                        "continuation": "more"}) + "\n" for k, v in texts.items()))
    plain.write_text("".join(v + "\n" for v in texts.values()))
    args = MasterArguments(master_tasks="dor", master_side_texts=str(side))
    with pytest.raises(SideTextError, match=r"none of its 2 record ids \(first: 'a'\) is a document id of .*"
                                               r"corpus.txt \(first: '1'\)"):
        MASTER.prepare_arguments(args, plain, "unused", 16)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                              for k, v in {**texts, "c": "a third passage"}.items()))
    with caplog.at_level("WARNING", logger="retromae_ir.pretrain.side_texts"):
        assert MASTER.prepare_arguments(args, corpus, "unused", 16) == args
    assert "side texts for 2 of the 3 documents" in caplog.text


def test_neighbouring_spans_from_the_flat_table_are_the_lookups_pairs(tokenizer, tmp_path):
    """MASTER's examples are made as they are read, each segment paired with the next row when that row is its
    document's next segment; the pairs are those the (docid, index + 1) lookup over every segment gave, on a
    corpus of documents of 4, 1, 2 and 1 segments read in chunks."""
    from retromae_ir.pretrain import data
    from retromae_ir.pretrain.master import MasterExamples

    corpus = tmp_path / "c.jsonl"
    texts = ["one two three four five six seven", "eight", "nine ten eleven twelve", "thirteen fourteen"]
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    table = data.load_segments(corpus, tokenizer, 4)  # 2 tokens a segment
    by_position = {(s.docid, s.index): s for s in table}
    expected = [MasterExample(s, None, getattr(by_position.get((s.docid, s.index + 1)), "input_ids", None))
                for s in table]
    examples = MasterExamples(table, "segments", None)
    assert list(examples) == expected and examples[-1] == expected[-1] and examples[1:3] == expected[1:3]
    assert [examples.paired(row) for row in range(len(examples))] == [e.npr_target is not None for e in expected]
    assert sum(e.npr_target is not None for e in expected) == 4  # d0's three pairs and d2's one
