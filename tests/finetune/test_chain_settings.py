"""A chain's finished stages record the settings that made them; a re-run with other settings for a finished
stage is refused (the stale-cache guard of retromae_ir/chain/settings.py)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from retromae_ir.chain.config import ChainConfig
from retromae_ir.chain.settings import ChainSettingsError, check_settings, stage_settings

INPUTS = {"dataset": "scifact", "data_sha256": "d1", "model": None, "bf16": False, "pretrained": None,
          "model_weights": None, "pretrained_weights": None}


def test_a_stage_carries_its_own_settings_and_every_earlier_stages():
    config = ChainConfig()
    stage1 = stage_settings(config, "1-stage1", INPUTS)
    stage2 = stage_settings(config, "2-stage2", INPUTS)
    assert stage1["stage1_lr"] == 5e-5 and stage1["stage1_epochs"] == 1.5 and "group" not in stage1
    assert "lr" not in stage1 and "epochs" not in stage1  # what stage 1 ran with, not stage 2's settings
    assert stage2 == {**stage1, "negatives": 15, "max_rank": 200, "group": 8, "epochs": 2.0, "lr": 5e-5}
    assert stage_settings(config, "baseline-bm25", INPUTS) == {"pretrain": False, "dataset": "scifact",
                                                               "data_sha256": "d1", "corpus_docs": 0,
                                                               "dev_queries": 100, "bf16": False}
    # stages this configuration skips contribute nothing: pre-training, BM25 negatives for an in-batch stage 1
    assert "pretrain_steps" not in stage2 and "pretrain_steps" in stage_settings(
        ChainConfig(pretrain=True), "2-stage2", INPUTS)
    with pytest.raises(KeyError, match="9-nothing: not a stage"):
        stage_settings(config, "9-nothing", INPUTS)


def test_a_changed_setting_is_refused_only_for_stages_it_shaped():
    config = ChainConfig()
    results = {name: {"settings": stage_settings(config, name, INPUTS)}
               for name in ("baseline-bm25", "0-start", "1-stage1", "2-mined-negatives", "2-stage2")}
    check_settings(results, config, INPUTS, "out/results.json")
    check_settings(results, ChainConfig(distill=True, distill_lr=1e-4), INPUTS, "out/results.json")  # distillation's
    with pytest.raises(ChainSettingsError, match=r"out/results.json: stage 2-stage2 .*\(group 8 -> 4\)"):
        check_settings(results, ChainConfig(group=4), INPUTS, "out/results.json")
    # a given teacher changes the soft labels and distillation, not the cross-encoder the chain trained
    distilled = ChainConfig(distill=True)  # what records the teacher's and distillation's stages
    results["4-cross-encoder"] = {"settings": stage_settings(distilled, "4-cross-encoder", INPUTS)}
    check_settings(results, ChainConfig(teacher="my/reranker", distill=True), INPUTS, "out/results.json")
    results["5-soft-labels"] = {"settings": stage_settings(distilled, "5-soft-labels", INPUTS)}
    with pytest.raises(ChainSettingsError, match=r"stage 5-soft-labels .*\(teacher '' -> 'my/reranker'\)"):
        check_settings(results, ChainConfig(teacher="my/reranker", distill=True), INPUTS, "out/results.json")
    with pytest.raises(ChainSettingsError, match=r"stage 0-start .*\(model None -> 'other/model'\)"):
        check_settings(results, config, {**INPUTS, "model": "other/model"}, "out/results.json")


def test_a_local_start_or_pretraining_trained_again_in_place_is_refused():
    """A --model or --pretrained folder keeps its path when trained again in place: its weight files' digests key
    the stages too (the path alone let a re-run report the old stages as the new weights' and exit 0). The
    baselines are encoded under the chain's bf16, so it keys them as well."""
    inputs = {**INPUTS, "model": "/m", "model_weights": {"model.safetensors": "a1"}, "pretrained": "/p",
              "pretrained_weights": {"model.safetensors": "b1"}}
    config = ChainConfig(pretrain=True)
    results = {name: {"settings": stage_settings(config, name, inputs)}
               for name in ("baseline-bm25", "0-pretrain", "1-stage1")}
    check_settings(results, config, inputs, "out/results.json")
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain .*pretrained_weights .*'b1'.* -> .*'b2'"):
        check_settings(results, config, {**inputs, "pretrained_weights": {"model.safetensors": "b2"}}, "out")
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain .*model_weights"):
        check_settings(results, config, {**inputs, "model_weights": {"model.safetensors": "a2"}}, "out")
    ablation = {"0-start": {"settings": stage_settings(ChainConfig(), "0-start", inputs)}}
    with pytest.raises(ChainSettingsError, match=r"stage 0-start .*model_weights"):
        check_settings(ablation, ChainConfig(), {**inputs, "model_weights": {"model.safetensors": "a2"}}, "out")
    with pytest.raises(ChainSettingsError, match=r"stage baseline-bm25 .*bf16 False -> True"):
        check_settings(results, config, {**inputs, "bf16": True}, "out")


def test_a_stage_without_recorded_settings_or_an_unknown_entry_is_refused():
    with pytest.raises(ChainSettingsError, match="stage 1-stage1 has no recorded settings"):
        check_settings({"1-stage1": {"wall_s": 1.0}}, ChainConfig(), INPUTS, "out/results.json")
    with pytest.raises(ChainSettingsError, match="'notes' is not a stage"):
        check_settings({"notes": {}}, ChainConfig(), INPUTS, "out/results.json")


def test_steps_with_more_passages_than_a_chunk_go_through_gradient_caching():
    from retromae_ir.chain.stages import grad_cache_flags

    config = ChainConfig(batch=32, chunk_passages=64)
    assert grad_cache_flags(config, 1) == [] and grad_cache_flags(config, 2) == []  # 32 and 64 passages fit
    assert grad_cache_flags(config, 8) == ["--grad-cache-chunk", "8"]  # 256 passages: 8 queries x 8 at a time
    assert grad_cache_flags(ChainConfig(batch=32, chunk_passages=4), 8) == ["--grad-cache-chunk", "1"]


def test_stage_one_may_train_its_own_epochs_and_learning_rate():
    same = ChainConfig(epochs=2.0, epochs_stage1=0, lr=2e-5, lr_stage1=0)
    assert same.stage_epochs("1") == same.stage_epochs("2") == 2.0 and same.stage_lr("1") == same.stage_lr("2") == 2e-5
    config = ChainConfig(epochs=2.0, epochs_stage1=1.5, lr=2e-5, lr_stage1=5e-5, distill=True, distill_lr=1e-5)
    assert (config.stage_epochs("1"), config.stage_epochs("2"), config.stage_epochs("distill")) == (1.5, 2.0, 2.0)
    assert (config.stage_lr("1"), config.stage_lr("2"), config.stage_lr("distill")) == (5e-5, 2e-5, 1e-5)


@pytest.mark.parametrize("field, value, recorded", [
    ("epochs_stage1", 2.0, "stage1_epochs"), ("lr_stage1", 2e-5, "stage1_lr"), ("dense_loss_weight", 0.0, None),
    ("attention_dropout", 0.1, None), ("lr_stage1", 1e-4, "stage1_lr")])
def test_stage_one_recipe_fields_refuse_a_finished_stage_one(field, value, recorded):
    config = ChainConfig()
    results = {name: {"settings": stage_settings(config, name, INPUTS)} for name in ("0-start", "1-stage1")}
    with pytest.raises(ChainSettingsError, match=rf"stage 1-stage1 .*\({recorded or field} "):
        check_settings(results, ChainConfig(**{field: value}), INPUTS, "out/results.json")


def test_stage_two_epochs_and_lr_reuse_a_finished_stage_one():
    config = ChainConfig()
    results = {name: {"settings": stage_settings(config, name, INPUTS)}
               for name in ("0-start", "1-stage1", "2-mined-negatives")}
    check_settings(results, ChainConfig(lr=2e-5, epochs=3.0), INPUTS, "out/results.json")
    # with stage 1 following them (its own values 0), they are stage 1's too
    with pytest.raises(ChainSettingsError, match=r"stage 1-stage1 .*stage1_lr 5e-05 -> 0.0001"):
        check_settings(results, ChainConfig(lr=1e-4, lr_stage1=0.0), INPUTS, "out/results.json")


@pytest.mark.parametrize("fields", [{"attention_dropout": 1.0}, {"dense_loss_weight": -1.0}])
def test_bad_stage_one_settings_are_refused_before_anything_runs(fields):
    with pytest.raises(ValueError, match="chain settings: attention_dropout must be < 1"):
        ChainConfig(**fields)
    with pytest.raises(ValueError, match="chain settings"):
        ChainConfig().replace([f"{key}={value}" for key, value in fields.items()])


def test_a_sub_corpus_above_the_corpus_is_refused_naming_the_setting(tmp_path):
    """It was the whole corpus, titled as a corpus_docs-document judged sub-corpus (exit 0)."""
    import json

    from retromae_ir.chain.stages import chain_corpus
    from retromae_ir.data.readers import DataFormatError

    folder = tmp_path / "scifact"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": str(i)}) + "\n" for i in range(6)))
    for split in ("train", "test"):
        (folder / "qrels" / f"{split}.tsv").write_text(f"query-id\tcorpus-id\tscore\n{split}\td0\t1\n")
    with pytest.raises(ValueError, match=r"corpus_docs=10: sub-corpus size 10 is above the 6 documents "
                                         r".*\(corpus_docs=0\)"):
        chain_corpus(folder, tmp_path / "out", ChainConfig(corpus_docs=10))
    assert not (tmp_path / "out" / "corpus-10.jsonl").exists()
    (folder / "corpus.jsonl").write_text("not json\n")  # another error keeps its own words and type
    with pytest.raises(DataFormatError, match=r"^\S*corpus.jsonl:1: malformed JSON") as refused:
        chain_corpus(folder, tmp_path / "out", ChainConfig(corpus_docs=3))
    assert "corpus_docs" not in str(refused.value)


@pytest.mark.parametrize("ratio", [1.0, -0.1])
def test_a_warm_up_ratio_outside_zero_to_one_is_refused_before_anything_runs(ratio):
    """--set warmup_ratio=1 ran the baselines, then stopped at the first training stage."""
    with pytest.raises(ValueError, match=rf"chain settings: warmup_ratio must be in \[0, 1\), got {ratio}"):
        ChainConfig().replace([f"warmup_ratio={ratio}"])


def test_the_pretrain_entry_carries_the_start_settings_its_evaluation_used():
    """With pre-training, 0-pretrain holds the start's OT weight and metrics: k, lengths and bf16 shaped them."""
    config = ChainConfig(pretrain=True)
    results = {"0-pretrain": {"settings": stage_settings(config, "0-pretrain", INPUTS)}}
    for fields, named in [({"k": 128}, "k 384 -> 128"), ({"passage_length": 128}, "passage_length"),
                          ({"query_k": 16}, "query_k")]:
        with pytest.raises(ChainSettingsError, match=rf"stage 0-pretrain .*{named}"):
            check_settings(results, ChainConfig(pretrain=True, **fields), INPUTS, "out/results.json")
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain .*bf16 False -> True"):
        check_settings(results, config, {**INPUTS, "bf16": True}, "out/results.json")


def test_an_interrupted_stage_is_not_resumed_with_another_schedule(tmp_path):
    """Stage 1 starts (started.json), is interrupted; a re-run with other epochs is refused before anything runs,
    the same settings continue it."""
    from retromae_ir.chain.stages import Chain

    folder = tmp_path / "scifact"
    (folder / "qrels").mkdir(parents=True)
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(10)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nt0\td0\t1\n")
    (folder / "queries.jsonl").write_text("".join(f'{{"_id": "q{i}", "text": "query {i}"}}\n' for i in range(10)))
    chain = Chain(folder, folder / "corpus.jsonl", tmp_path / "out", ChainConfig(dev_queries=2), None, False)

    def interrupted():
        raise KeyboardInterrupt

    def interrupted_after_a_checkpoint():
        (tmp_path / "out" / "1-stage1" / "checkpoint-50").mkdir(parents=True)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        chain.timed("2-mined-negatives", tmp_path / "out" / "2-mined-negatives.jsonl", interrupted)
    with pytest.raises(KeyboardInterrupt):
        chain.timed("1-stage1", tmp_path / "out" / "1-stage1" / "card.yaml", interrupted_after_a_checkpoint)
    assert "1-stage1" not in chain.results
    with pytest.raises(ChainSettingsError, match=r"started.json: stage 1-stage1 was started with other settings "
                                                 r"\(stage1_epochs 1.5 -> 3.0\)"):
        Chain(folder, folder / "corpus.jsonl", tmp_path / "out", ChainConfig(dev_queries=2, epochs_stage1=3.0),
              None, False)
    Chain(folder, folder / "corpus.jsonl", tmp_path / "out", ChainConfig(dev_queries=2), None, False)
    # started under an older run identity (no version): it will be started afresh, so other settings are no reason
    # to refuse the re-run
    started = json.loads((tmp_path / "out" / "started.json").read_text())
    del started["1-stage1"]["version"]
    (tmp_path / "out" / "started.json").write_text(json.dumps(started))
    Chain(folder, folder / "corpus.jsonl", tmp_path / "out", ChainConfig(dev_queries=2, epochs_stage1=3.0), None,
          False)
    # its folder removed, nothing is resumed: the new settings start it afresh (an atomic output, such as mined
    # negatives, never holds a part to resume and is not recorded)
    import shutil

    shutil.rmtree(tmp_path / "out" / "1-stage1")
    Chain(folder, folder / "corpus.jsonl", tmp_path / "out", ChainConfig(dev_queries=2, epochs_stage1=3.0,
                                                                          max_rank=50), None, False)


def test_another_dataset_under_the_same_folder_name_is_refused_and_gets_its_own_sub_corpus(tmp_path):
    """The chain records the data's digest, not only the folder's name; the judged sub-corpus is made again."""
    import json

    from retromae_ir.chain.stages import Chain, chain_corpus

    config, subs = ChainConfig(dev_queries=1, corpus_docs=4), []
    for variant in ("one", "two"):
        folder = tmp_path / variant / "scifact"
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"{variant} {i}"}) + "\n"
                                                     for i in range(6)))
        for split in ("train", "test"):  # q0-q2 train, t0-t2 test
            (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
                f"{'t' if split == 'test' else 'q'}{i}\td{i}\t1\n" for i in range(3)))
        (folder / "queries.jsonl").write_text("".join(f'{{"_id": "q{i}", "text": "query {i}"}}\n' for i in range(3)))
        sub = chain_corpus(folder, tmp_path / "out", config)
        subs.append(sub.read_text())
        if variant == "one":
            Chain(folder, sub, tmp_path / "out", config, None, False).record("baseline-bm25", sparse={"ndcg@10": 0.5})
    assert '"text": "two 0"' in subs[1] and subs[0] != subs[1]
    with pytest.raises(ChainSettingsError, match=r"stage baseline-bm25 was made with other settings \(data_sha256 "):
        Chain(folder, sub, tmp_path / "out", config, None, False)


def test_an_interrupted_pretraining_resumes_whatever_the_start_evaluation_settings():
    """started.json holds 0-pretrain to the pre-training's settings only: another k or OT weight (which shape only
    the start's evaluation) may resume it; another pre-training length may not."""
    config = ChainConfig(pretrain=True)
    started = {"0-pretrain": {"settings": stage_settings(config, "0-pretrain", INPUTS, started=True)}}
    check_settings(started, ChainConfig(pretrain=True, k=128, sparse_weight=0.5), INPUTS, "started.json", "started")
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain was started with other settings \(pretrain_steps"):
        check_settings(started, ChainConfig(pretrain=True, pretrain_steps=7), INPUTS, "started.json", "started")
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain was started .*warmup_ratio 0.1 -> 0.05"):
        check_settings(started, ChainConfig(pretrain=True, warmup_ratio=0.05), INPUTS, "started.json", "started")
    old = {"1-stage1": {"settings": {k: v for k, v in stage_settings(ChainConfig(), "1-stage1", INPUTS).items()
                                     if k != "data_sha256"}}}
    with pytest.raises(ChainSettingsError, match=r"data_sha256 not recorded \(an older retromae_ir\) -> 'd1'"):
        check_settings(old, ChainConfig(), INPUTS, "results.json")


def test_a_stage_output_without_a_record_is_made_again(tmp_path):
    """A stage whose output exists but results.json does not record it (killed between writing the output and the
    record, e.g. mined negatives) is run again, under this run's settings, instead of being reused unchecked. A
    recorded one is made again from scratch, its old entry dropped, when its output was changed by hand or an input
    it read was made again; otherwise it is reused."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import Chain

    done, source = tmp_path / "2-mined-negatives.jsonl", tmp_path / "stage1.jsonl"
    done.write_text("negatives mined with other settings\n")
    source.write_text("stage 1\n")
    runs = []
    chain = SimpleNamespace(output=tmp_path, results={}, results_path=tmp_path / "results.json", made=set(),
                            record=lambda name, **values: chain.results.setdefault(name, {}).update(values),
                            stale=lambda *args: Chain.stale(chain, *args),
                            discard=lambda *args: Chain.discard(chain, *args), save_results=lambda: None)

    def mine(text):
        return lambda: runs.append(done.write_text(text))

    Chain.timed(chain, "2-mined-negatives", done, mine("mined\n"), inputs=(source,))
    assert len(runs) == 1 and done.read_text() == "mined\n" and "wall_s" in chain.results["2-mined-negatives"]
    Chain.timed(chain, "2-mined-negatives", done, mine("again\n"), inputs=(source,))  # recorded now: reused
    assert len(runs) == 1
    chain.results["2-mined-negatives"]["dense"] = {"ndcg@10": -1.0}  # a metric of the old output
    done.write_text("edited by hand\n")
    Chain.timed(chain, "2-mined-negatives", done, mine("mined\n"), inputs=(source,))
    assert len(runs) == 2 and "dense" not in chain.results["2-mined-negatives"]
    source.write_text("stage 1 trained again\n")
    assert Chain.stale(chain, "2-mined-negatives", done, {"stage1.jsonl": "x"}) == "made from other stage1.jsonl"
    Chain.timed(chain, "2-mined-negatives", done, mine("mined from the new stage 1\n"), inputs=(source,))
    assert len(runs) == 3 and done.read_text() == "mined from the new stage 1\n"
    Chain.timed(chain, "2-mined-negatives", done, mine("again\n"), inputs=(source,))
    assert len(runs) == 3
    # an entry recorded before the digests existed is adopted as it stands, never deleted and made again
    chain.results["2-mined-negatives"] = {"wall_s": 1.0, "dense": {"ndcg@10": 0.5}}
    Chain.timed(chain, "2-mined-negatives", done, mine("again\n"), inputs=(source,))
    assert len(runs) == 3 and done.read_text() == "mined from the new stage 1\n"
    assert chain.results["2-mined-negatives"]["dense"] == {"ndcg@10": 0.5}
    assert chain.results["2-mined-negatives"]["output"] == chain_digest(done)


def chain_digest(path):
    from retromae_ir.chain.stages import artifact_digest

    return artifact_digest(path)


def test_an_unrecorded_stage_trained_from_other_inputs_starts_afresh(tmp_path):
    """A training stage interrupted before its record resumes from its checkpoints, unless the inputs it started
    from were made again since (the trainer would refuse to resume them, and the chain could not go on)."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import Chain, identity_version

    source, folder = tmp_path / "negatives.jsonl", tmp_path / "2-stage2"
    source.write_text("old\n")
    (folder / "checkpoints").mkdir(parents=True)
    seen = []

    def train():
        seen.append((folder / "checkpoints").exists())
        folder.mkdir(exist_ok=True)
        (folder / "card.yaml").write_text("kind: dupmae\n")

    chain = SimpleNamespace(output=tmp_path, results={}, config=ChainConfig(), inputs=INPUTS, made=set(),
                            started_path=tmp_path / "started.json",
                            record=lambda name, **values: chain.results.setdefault(name, {}).update(values),
                            stale=lambda *args: Chain.stale(chain, *args))
    made_from = {"negatives.jsonl": chain_digest(source)}
    chain.started = {"2-stage2": {"folder": "2-stage2", "made_from": made_from, "version": 2}}
    Chain.timed(chain, "2-stage2", folder / "card.yaml", train, inputs=(source,))
    assert seen == [True]  # same inputs: resumed from its checkpoints
    chain.results.clear()
    (folder / "card.yaml").unlink()
    source.write_text("mined again\n")
    Chain.timed(chain, "2-stage2", folder / "card.yaml", train, inputs=(source,))
    assert seen == [True, False] and chain.started["2-stage2"]["made_from"] == {"negatives.jsonl":
                                                                                chain_digest(source)}
    # checkpoints started under an older run identity (no version: before the fine-tuning identity keyed the
    # encoding code) are started afresh: the command's --resume refuses them, and the chain stopped there every run
    assert chain.started["2-stage2"]["version"] == identity_version("2-stage2") == 2
    for forget in (lambda: chain.started["2-stage2"].pop("version"), lambda: chain.started.pop("2-stage2")):
        chain.results.clear()
        (folder / "card.yaml").unlink()
        (folder / "checkpoints").mkdir()
        forget()  # an entry from before the version, or none (a folder from before started.json)
        Chain.timed(chain, "2-stage2", folder / "card.yaml", train, inputs=(source,))
        assert seen[-1] is False and chain.started["2-stage2"]["version"] == 2
    assert len(seen) == 4
    # a stage whose command's identity gained nothing resumes an entry without a version
    assert identity_version("4-cross-encoder") == identity_version("0-pretrain") == 1


def test_results_are_saved_in_pipeline_order(tmp_path):
    """A stage made again is recorded last; results.json (and so the report and its plot) keep pipeline order."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import Chain

    chain = SimpleNamespace(results={"baseline-bm25": {}, "2-stage2": {}, "1-stage1": {}, "0-pretrain": {}},
                            results_path=tmp_path / "results.json")
    Chain.save_results(chain)
    assert list(json.loads((tmp_path / "results.json").read_text())) == ["baseline-bm25", "0-pretrain", "1-stage1",
                                                                         "2-stage2"]


def test_a_given_pretraining_is_started_from_and_never_trained(tmp_path):
    """--pretrained skips the pre-training stage: the chain starts from that folder and never runs pre-training
    into it (the record check of ``timed`` must not take its missing 0-pretrain entry for an unfinished stage)."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import Chain

    def never(*args, **kwargs):
        raise AssertionError("pre-training ran for a given --pretrained")

    chain = SimpleNamespace(config=ChainConfig(pretrain=True), pretrained=tmp_path / "pretrained", timed=never,
                            start_card=lambda name, checkpoint: (name, checkpoint))
    assert Chain.start(chain) == ("0-pretrain", (tmp_path / "pretrained").resolve())


def test_a_setting_added_later_reads_as_its_old_behaviour_in_older_records():
    """mask_false_negatives came after outputs were recorded: an older stage 1 (no such field) was made without
    masking, so it is reused at the default and refused when masking is asked for."""
    config = ChainConfig()
    old = {k: v for k, v in stage_settings(config, "1-stage1", INPUTS).items() if k != "mask_false_negatives"}
    check_settings({"1-stage1": {"settings": old}}, config, INPUTS, "out")
    with pytest.raises(ChainSettingsError, match="mask_false_negatives False -> True"):
        check_settings({"1-stage1": {"settings": old}}, dataclasses.replace(config, mask_false_negatives=True),
                       INPUTS, "out")


def test_a_finished_pretraining_is_not_reused_under_another_warm_up():
    """Pre-training runs with --warmup-ratio: a finished 0-pretrain is refused when it changes (it was reused, and
    every later stage recorded the new value as if pre-training had run with it). An older record without the
    field reads as the default."""
    pretrain = ChainConfig(pretrain=True)
    results = {"0-pretrain": {"settings": stage_settings(pretrain, "0-pretrain", INPUTS)}}
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain was made .*warmup_ratio 0.1 -> 0.05"):
        check_settings(results, dataclasses.replace(pretrain, warmup_ratio=0.05), INPUTS, "out")
    results["0-pretrain"]["settings"].pop("warmup_ratio")
    check_settings(results, pretrain, INPUTS, "out")
    # an older run made with --set warmup_ratio=0.05: its stage 1 recorded the warm-up pre-training ran with too
    older = dataclasses.replace(pretrain, warmup_ratio=0.05)
    results["1-stage1"] = {"settings": stage_settings(older, "1-stage1", INPUTS)}
    check_settings(results, older, INPUTS, "out")
    with pytest.raises(ChainSettingsError, match=r"stage 0-pretrain was made .*warmup_ratio 0.05 -> 0.1"):
        check_settings(results, pretrain, INPUTS, "out")


@pytest.mark.parametrize("absent", ["queries.jsonl", "qrels/train.tsv"])
def test_a_folder_without_a_file_the_chain_reads_is_refused_by_name_before_any_output(tmp_path, capsys, absent):
    from retromae_ir.chain.__main__ import main

    folder = tmp_path / "data"
    (folder / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        (folder / name).write_text("")
    (folder / absent).unlink()
    with pytest.raises(SystemExit) as exit_:
        main(["--folder", str(folder), "--output", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert f"missing {absent}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("group", [1, 4])
def test_stage_one_is_keyed_on_the_file_it_trains_on(tmp_path, group):
    """With a group above one stage 1 trains on the BM25 negatives: a remade negatives file must make it stale."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import Chain

    negatives, recorded = tmp_path / "1-bm25-negatives.jsonl", {}
    chain = SimpleNamespace(config=ChainConfig(group_stage1=group), output=tmp_path, corpus=tmp_path / "corpus.jsonl",
                            train=["--queries", "q.jsonl", "--qrels", "train.tsv"],
                            train_files=(tmp_path / "q.jsonl", tmp_path / "train.tsv"),
                            bm25_negatives=lambda: negatives, flags=lambda *args: [], log_file=None,
                            timed=lambda name, done, run, inputs=(), code=None: recorded.setdefault(name, inputs))
    Chain.finetune(chain, "1-stage1", "1", tmp_path / "0-start.yaml", Chain.stage1_data(chain), group)
    expected = (negatives,) if group > 1 else chain.train_files
    assert recorded["1-stage1"] == (tmp_path / "0-start.yaml", chain.corpus, *expected)


def test_a_given_pretraining_on_a_chain_that_does_not_pretrain_is_refused(tmp_path, capsys):
    """scifact-quick has pretrain: false: --pretrained DIR was recorded as the start while MiniLM was, exit 0."""
    from retromae_ir.chain.__main__ import main

    folder, pretrained = tmp_path / "data", tmp_path / "pt"
    (folder / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"):
        (folder / name).write_text("")
    pretrained.mkdir()
    (pretrained / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        main(["--chain", "scifact-quick", "--folder", str(folder), "--pretrained", str(pretrained),
              "--output", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "does not pre-train (pretrain: false)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_trained_and_mined_stages_are_keyed_on_the_code_versions_their_outputs_depend_on(tmp_path):
    """A fine-tuning stage trains the representation the encoding code versions, and a card's negatives come from
    its index and search: a release that changes either makes them again, as it re-evaluates (BM25's negatives
    depend on neither, but on the Lucene index: Pyserini's version and the collection written for it)."""
    from types import SimpleNamespace

    from retromae_ir.bm25 import index_code
    from retromae_ir.chain.stages import Chain
    from retromae_ir.encode.representation import ENCODING_VERSION
    from retromae_ir.finetune.data import MASKING_VERSION
    from retromae_ir.mine import MINING_VERSION
    from retromae_ir.search.exact_hybrid import SEARCH_VERSION

    codes = {}
    chain = SimpleNamespace(config=ChainConfig(), output=tmp_path, corpus=tmp_path / "corpus.jsonl", model=None,
                            train=["--queries", "q.jsonl", "--qrels", "train.tsv"], index_root=tmp_path / "indexes",
                            train_files=(tmp_path / "q.jsonl", tmp_path / "train.tsv"), bf16=False, lucene=True,
                            flags=lambda *args: [], log_file=None,
                            timed=lambda name, done, run, inputs=(), code=None: codes.setdefault(name, code))
    Chain.finetune(chain, "2-stage2", "2", tmp_path / "1-stage1.yaml", tmp_path / "negatives.jsonl", 4)
    Chain.mine(chain, "2-mined-negatives", str(tmp_path / "1-stage1.yaml"), "index")
    Chain.mine(chain, "1-bm25-negatives", "bm25")
    Chain.cross_encoder(chain, tmp_path / "negatives.jsonl")
    Chain.finetune(chain, "1-stage1", "1", tmp_path / "0-start.yaml", chain.train, 1)
    assert codes.pop("1-stage1") == {"encoding": ENCODING_VERSION}  # from qrels, unmasked: no twin rule acts
    chain.config = ChainConfig(mask_false_negatives=True)  # the masking rule keys a stage that masks
    Chain.finetune(chain, "1-stage1", "1", tmp_path / "0-start.yaml", chain.train, 1)
    assert codes.pop("1-stage1") == {"encoding": ENCODING_VERSION, "masking": MASKING_VERSION}
    # the twin rule drops a training file's listed negatives that are a twin's positive: it keys those stages too
    assert codes == {"2-stage2": {"encoding": ENCODING_VERSION, "masking": MASKING_VERSION},
                     "4-cross-encoder": {"masking": MASKING_VERSION},
                     "2-mined-negatives": {"mining": MINING_VERSION, "encoding": ENCODING_VERSION,
                                           "search": SEARCH_VERSION},
                     "1-bm25-negatives": {"mining": MINING_VERSION, **index_code()}}
    assert set(index_code()) == {"pyserini", "collection"}


def test_list_prints_each_chain_with_the_settings_it_changes(capsys):
    from retromae_ir.chain.__main__ import main

    main(["--list"])
    out = capsys.readouterr().out.splitlines()
    quick = out.index(next(line for line in out if line.startswith("scifact-quick (scifact): ")))
    assert out[quick + 1].split() == ["settings:", "passage_length=128", "epochs=1.0", "group=2", "negatives=3",
                                      "max_rank=100", "corpus_docs=1000"]
    short = out.index(next(line for line in out if line.startswith("scifact-short (scifact): ")))
    assert out[short + 1] == "    settings: the defaults"


def test_list_refuses_the_options_of_a_run(capsys):
    """--list printed the file's chains and ignored --set, --output and the rest: the listing read as if they
    applied (exit 0)."""
    from retromae_ir.chain.__main__ import main

    for extra, says in ((["--set", "epochs=3"], "--set applies"), (["--output", "o", "--no-lucene"],
                                                                    "--output, --no-lucene apply")):
        with pytest.raises(SystemExit) as exit_:
            main(["--list", *extra])
        assert exit_.value.code == 2
        assert f"--list prints the chains as the file defines them; {says} to a run" in capsys.readouterr().err


def test_the_scifact_driver_lists_the_chains(capsys):
    """eval/chain_scifact.py --list (and make chain CHAIN_ARGS=--list) passed its own --chain and --data-dir on."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "eval" / "chain_scifact.py"
    spec = importlib.util.spec_from_file_location("chain_scifact", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["--list"])
    assert "scifact-quick (scifact): " in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:  # --config picks a run's chain: ignored by a listing
        script.main(["--list", "--config", "full"])
    assert exit_.value.code == 2 and "--list prints every chain; --config picks" in capsys.readouterr().err


def test_the_scifact_driver_reads_the_data_the_user_names(monkeypatch, tmp_path):
    """The shared copy beside the checkout was passed as --data-dir whenever it existed, so $RETROMAE_IR_DATA
    (which the README and the Makefile say wins) was never read: the chain ran on the shared scifact (exit 0)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "eval" / "chain_scifact.py"
    spec = importlib.util.spec_from_file_location("chain_scifact", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "SHARED_BEIR", tmp_path)  # a shared copy exists
    monkeypatch.delenv("RETROMAE_IR_DATA", raising=False)
    assert script.data_source(set()) == ["--data-dir", str(tmp_path)]
    assert script.data_source({"--data-dir"}) == script.data_source({"--folder"}) == []
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "mine"))
    assert script.data_source(set()) == []


def test_recorded_stages_a_configuration_does_not_run_are_not_held_to_it():
    """A chain distilled with its own teacher's ce_* settings, then run with distillation off (where ce_* are refused,
    so the configuration holds their defaults): the kept records of the teacher and distillation are not checked
    until those stages run again."""
    made = ChainConfig(distill=True, ce_steps=2, ce_batch=2)
    results = {name: {"settings": stage_settings(made, name, INPUTS)}
               for name in ("0-start", "1-stage1", "2-mined-negatives", "2-stage2", "4-cross-encoder",
                            "5-soft-labels", "3-distill")}
    check_settings(results, made, INPUTS, "out/results.json")
    check_settings(results, ChainConfig(), INPUTS, "out/results.json")  # distillation off: not run
    with pytest.raises(ChainSettingsError, match=r"stage 4-cross-encoder .*ce_steps 2 -> 200"):
        check_settings(results, ChainConfig(distill=True), INPUTS, "out/results.json")  # runs again: held
    given = ChainConfig(distill=True, teacher="my/reranker")  # the own teacher is not used
    with pytest.raises(ChainSettingsError, match=r"stage 5-soft-labels .*\(teacher '' -> 'my/reranker'\)"):
        check_settings(results, given, INPUTS, "out/results.json")


def test_a_given_pretraining_records_none_of_the_chains_own_pretraining_settings():
    config = ChainConfig(pretrain=True)
    assert "pretrain_steps" in stage_settings(config, "1-stage1", INPUTS)
    given = stage_settings(config, "1-stage1", {**INPUTS, "pretrained": "/runs/pretrained"})
    assert not {"pretrain_steps", "pretrain_batch", "pretrain_length"} & set(given) and given["pretrained"]
