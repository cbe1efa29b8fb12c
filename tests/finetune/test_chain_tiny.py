"""python -m retromae_ir.chain end to end on a tiny random DupMAE and a 50-document slice of scifact: every stage of both
chains runs through the project's CLIs, the baselines and stages are searched over the same judged sub-corpus,
and a second run skips everything that is done.

The stages' commands run in this process (:func:`in_process`), each module as ``python -m`` runs it: a new
interpreter spent most of each stage importing torch and transformers, about two minutes of this test.
``tests/finetune/test_chain_commands.py`` checks that the chain spawns each in a new interpreter."""
from __future__ import annotations

import json
import logging
import runpy
import shutil
import sys
import warnings
from pathlib import Path
from unittest import mock

import pytest

from retromae_ir.chain import stages as chain
from retromae_ir.chain.__main__ import main as chain_main
from retromae_ir.data.readers import iter_beir_corpus, load_beir_queries, load_qrels
from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.evaluate.metrics import EVALUATION_VERSION
from retromae_ir.io import file_digest, read_key, write_key
from retromae_ir.mine import MINING_VERSION
from retromae_ir.pretrain import get_method
from retromae_ir.search.exact_hybrid import SEARCH_VERSION

TINY = ["pretrain_steps=2", "pretrain_batch=2", "pretrain_length=32", "query_length=16", "passage_length=32",
        "steps=2", "batch=4", "ce_steps=2", "ce_batch=2", "ce_length=32", "negatives=2", "max_rank=20", "k=40",
        "query_k=20", "corpus_docs=40", "ablation=true", "pretrain=true", "epochs=0", "dev_queries=2",
        "group=2", "distill=true", "dense_loss_weight=0.5", "attention_dropout=0", "epochs_stage1=0"]
STAGES = ["1-stage1", "2-stage2", "3-distill"]
CE_ONLY = ("ce_steps=", "ce_batch=", "ce_length=")  # the chain's own teacher's: refused where none is trained


def without_own_teacher(argv: list[str]) -> list[str]:
    return [a for a in argv if not a.startswith(CE_ONLY)]


@pytest.fixture(scope="module")
def folder(shared_data, tmp_path_factory):
    """The documents judged for 12 training queries (8 kept for training, 4 as test queries), padded to 50."""
    source = shared_data / "beir" / "scifact"
    qrels = dict(list(load_qrels(source / "qrels" / "train.tsv").items())[:12])
    docs = list(iter_beir_corpus(source / "corpus.jsonl"))
    judged = {d for labels in qrels.values() for d in labels}
    keep = [doc for doc in docs if doc.docid in judged]
    keep += [doc for doc in docs if doc.docid not in judged][:50 - len(keep)]
    out = tmp_path_factory.mktemp("scifact-tiny")
    (out / "qrels").mkdir()
    (out / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": d.docid, "title": d.title, "text": d.text}) + "\n" for d in keep))
    queries = load_beir_queries(source / "queries.jsonl")
    (out / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in qrels))
    for split, qids in (("train", list(qrels)[:8]), ("test", list(qrels)[8:])):
        (out / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{d}\t{s}\n" for q in qids for d, s in qrels[q].items()))
    return out


def in_process(args: list[str], log_file: Path) -> int:
    """``stages.spawn`` without a new interpreter: ``python -m MODULE ARGS`` as runpy runs it, returning its exit
    status, its argv appended to ``log_file`` (what the test counts), and the logging it set up undone (a
    command's ``setup_logging`` replaces the root handlers, chain.log's among them)."""
    with open(log_file, "a") as handle:
        handle.write(" ".join(args) + "\n")
    loggers = [logging.getLogger(), logging.getLogger("retromae_ir")]
    saved = [(list(logger.handlers), logger.level) for logger in loggers]
    argv = sys.argv
    sys.argv = [args[0], *args[1:]]
    try:
        with warnings.catch_warnings():  # a module the chain imported (retromae_ir.mine) runs again as __main__
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            runpy.run_module(args[0], run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        return 0 if exit_.code is None else exit_.code
    finally:
        sys.argv = argv
        for logger, (handlers, level) in zip(loggers, saved):
            for added in set(logger.handlers) - set(handlers):
                added.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
    return 0


@pytest.fixture(autouse=True)
def stages_in_process(monkeypatch):
    monkeypatch.setattr(chain, "spawn", in_process)


def run_again(argv: list[str], output: Path) -> str:
    """What running the chain with ``argv`` adds to the log of its ``output``."""
    start = (output / "chain.log").stat().st_size
    chain_main(argv)
    with open(output / "chain.log") as log:
        log.seek(start)
        return log.read()


def test_tiny_chain_runs_every_stage_of_both_chains_and_resumes(folder, tiny_bert_dir, tmp_path, capsys):
    output = tmp_path / "chain"
    argv = ["--chain", "scifact-short", "--folder", str(folder), "--model", str(tiny_bert_dir), "--output", str(output), "--no-bf16",
            "--set", *TINY]
    chain_main(argv)

    assert len(list(iter_beir_corpus(output / "corpus-40.jsonl"))) == 40
    main = json.loads((output / "results.json").read_text())
    ablation = json.loads((output / chain.ABLATION / "results.json").read_text())
    assert set(main["baseline-bm25"]) == {"sparse", "dev", "eval_wall_s", "settings", "made_with"}
    assert main["baseline-bm25"]["made_with"]["sparse"]["k1"] == 0.9
    assert set(main["baseline-minilm-mean"]) >= {"dense"}
    for results in (main, ablation):
        for stage in STAGES:
            for mode in chain.MODES:
                assert 0.0 <= results[stage][mode]["ndcg@10"] <= 1.0
                assert 0.0 <= results[stage][mode]["recall@100"] <= 1.0
    # both starts get an OT weight chosen on the 2 dev queries, held out of training
    for results, start in ((main, "0-pretrain"), (ablation, "0-start")):
        assert results[start]["sparse_weight"] in [float(w) for w in results[start]["sparse_weight_sweep"]]
        assert set(results[start]) >= {"dense", "sparse", "hybrid", "dev"}
        assert set(results["1-stage1"]["dev"]) == set(chain.MODES)
    dev = (output / "splits" / "dev.tsv").read_text().splitlines()[1:]
    train = (output / "splits" / "train.tsv").read_text().splitlines()[1:]
    assert len({line.split()[0] for line in dev}) == 2
    assert not {line.split()[0] for line in dev} & {line.split()[0] for line in train}
    # the ablation starts from the tiny model itself and reuses the main chain's teacher
    assert "0-pretrain" in main and "0-pretrain" not in ablation
    # the pre-training objective's version keys the finished pre-training (reused otherwise after a change to it)
    assert main["0-pretrain"]["inputs"]["objective"] == get_method("dupmae").objective_version
    assert not (output / chain.ABLATION / "1-bm25-negatives.jsonl").exists()
    assert not (output / chain.ABLATION / "4-cross-encoder").exists()
    soft = [json.loads(line) for line in (output / chain.ABLATION / "5-soft-labels.jsonl").read_text().splitlines()]
    assert soft and all(len(row["negative_scores"]) == len(row["negatives"]) for row in soft)
    # the ids' corpus is recorded down the chain (mine, then rerank score), for fine-tuning to check
    corpus = file_digest(output / "corpus-40.jsonl")
    assert json.loads((output / "2-mined-negatives.jsonl.args.json").read_text())["corpus_sha256"] == corpus
    assert read_key(output / chain.ABLATION / "5-soft-labels.jsonl")["corpus_sha256"] == corpus
    stage1 = [line for line in (output / "chain.log").read_text().splitlines() if "--stage 1 " in line]
    assert stage1 and all("--dense-loss-weight 0.5 --attention-dropout 0.0" in line and "--max-steps 2 " in line
                          for line in stage1)
    # stage 2's negatives are mined from the index stage 1 was evaluated on, in the chain's precision (mining used
    # to take the hardware's own, re-encoding stage 1's index in bf16 under --no-bf16 on a bf16 CPU)
    mining = [line for line in (output / "chain.log").read_text().splitlines() if "retromae_ir.mine" in line
              and "1-stage1/card.yaml" in line]
    assert mining and all("--dtype fp32" in line for line in mining)
    for manifest in (output / "indexes" / "1-stage1").glob("*/manifest.json"):
        assert json.loads(manifest.read_text())["precision"] == "fp32"
    table = (output / "results.md").read_text()
    assert table.count("| DupMAE pre-training: ") == 4 and table.count("| no pre-training (ablation): ") == 4
    assert "| BM25 flat (Pyserini) |" in table
    # the local --model is keyed by its weight files as well as its path (a folder trained again in place)
    from retromae_ir.io import as_stored, checkpoint_file_digests

    assert ablation["0-start"]["settings"]["model_weights"] == as_stored(checkpoint_file_digests(tiny_bert_dir))

    commands = (output / "commands.log").stat().st_size
    chain_main(argv)  # everything done: nothing runs again, the results are unchanged
    assert (output / "commands.log").stat().st_size == commands
    assert json.loads((output / "results.json").read_text()) == main
    assert main["2-stage2"]["settings"]["group"] == 2 and main["3-distill"]["settings"]["distill_lr"] == 2e-5

    # metrics recorded by other encoding, search or evaluation code (or before it was recorded): measured again,
    # nothing trained again (a re-run after a vector-changing fix used to report the old code's stage rows beside
    # new baselines; after a search or scoring fix, the old figures and the OT weight chosen with them)
    # (and the OT weight chosen on a dev split since carved again by another rule, with its dev rows)

    results = json.loads((output / "results.json").read_text())
    evaluated_on = {"corpus_sha256": file_digest(output / "corpus-40.jsonl"),
                    "dev_qrels_sha256": file_digest(output / "splits" / "dev.tsv")}
    start = {"start": chain.artifact_digest(output / "0-pretrain-unweighted.yaml")}  # keyed as stage 1 keys it
    for stage in ("0-pretrain", *STAGES):
        assert results[stage]["made_with"] == {**evaluated_on, "encoding": ENCODING_VERSION, "search": SEARCH_VERSION,
                                               "evaluation": EVALUATION_VERSION,
                                               **(start if stage == "0-pretrain" else {})}
        results[stage]["hybrid"]["ndcg@10"] = -1.0
        # 1-stage1's record goes below; the others were made on another dev split, or by older code
        made_with = results[stage]["made_with"]
        if stage == "0-pretrain":
            made_with["dev_qrels_sha256"] = "0" * 64
        else:
            made_with[{"2-stage2": "search"}.get(stage, "evaluation")] -= 1
    del results["1-stage1"]["made_with"]
    del results["2-stage2"]["eval_wall_s"], results["2-stage2"]["sparse"]  # interrupted under the other code
    (output / "results.json").write_text(json.dumps(results))
    chain_main(argv)
    assert (output / "commands.log").stat().st_size == commands
    remeasured = json.loads((output / "results.json").read_text())
    for stage in ("0-pretrain", *STAGES):
        assert remeasured[stage] == main[stage] | {"eval_wall_s": mock.ANY}
    main = remeasured
    # a start that is another representation now (its declared pooling, a hub name's new revision: stage 1 keys it
    # so and is trained again): its rows and dev-chosen OT weight are measured again, not kept beside the new stages
    results = json.loads((output / "results.json").read_text())
    results["0-pretrain"]["made_with"]["start"] = {"card": "another", "checkpoint": "another"}
    results["0-pretrain"]["sparse_weight"] = 123.0
    (output / "results.json").write_text(json.dumps(results))
    chain_main(argv)
    assert json.loads((output / "results.json").read_text())["0-pretrain"] == main["0-pretrain"] | {
        "eval_wall_s": mock.ANY}

    # a stage folder deleted by hand: the stage is made again and evaluated again (its old metrics used to stay,
    # reported beside the new weights); stage 2's digest is recorded, so an equal re-made one keeps distillation
    results = json.loads((output / "results.json").read_text())
    results["2-stage2"]["hybrid"]["ndcg@10"] = -1.0  # a mark: an old figure that must not survive
    # and a baseline recorded with another card or checkpoint (the packaged MiniLM upgraded, say) is measured again
    results["baseline-minilm-mean"]["dense"]["ndcg@10"] = -1.0
    results["baseline-minilm-mean"]["made_with"]["dense"]["model.safetensors_sha256"] = "0" * 64
    (output / "results.json").write_text(json.dumps(results))
    shutil.rmtree(output / "2-stage2")
    chain_main(argv)
    again = json.loads((output / "results.json").read_text())
    assert 0.0 <= again["2-stage2"]["hybrid"]["ndcg@10"] <= 1.0
    assert again["baseline-minilm-mean"] == main["baseline-minilm-mean"] | {"eval_wall_s": mock.ANY}
    assert again["2-stage2"]["output"] == main["2-stage2"]["output"]  # same settings, same seed: the same weights
    assert again["3-distill"] == main["3-distill"]
    # an input made again with other contents: every stage that reads it is made again, from scratch
    rows = (output / "5-soft-labels.jsonl").read_text().splitlines()
    (output / "5-soft-labels.jsonl").write_text("\n".join(rows[:-1]) + "\n")
    scored = read_key(output / "5-soft-labels.jsonl")  # as a scoring run that made this file would have keyed it
    write_key(output / "5-soft-labels.jsonl", {**scored, "output_sha256": file_digest(output / "5-soft-labels.jsonl")})
    results = json.loads((output / "results.json").read_text())
    results["5-soft-labels"]["output"] = chain.artifact_digest(output / "5-soft-labels.jsonl")
    results["3-distill"]["hybrid"]["ndcg@10"] = -1.0
    (output / "results.json").write_text(json.dumps(results))
    rerun = run_again(argv, output)
    assert "3-distill is made again: made from other 5-soft-labels.jsonl" in rerun
    assert rerun.count("--stage distill") == 1 and "--stage 2" not in rerun and " score --model" not in rerun
    assert 0.0 <= json.loads((output / "results.json").read_text())["3-distill"]["hybrid"]["ndcg@10"] <= 1.0
    # negatives mined by older mining code (before same-text queries shared their positives): mined again; the
    # same code and seed give the same file here, so the stages reading it stand
    results = json.loads((output / "results.json").read_text())
    assert results["2-mined-negatives"]["inputs"]["mining"] == MINING_VERSION
    results["2-mined-negatives"]["inputs"]["mining"] -= 1
    (output / "results.json").write_text(json.dumps(results))
    rerun = run_again(argv, output)
    assert "2-mined-negatives is made again: made from other mining" in rerun
    assert rerun.count("retromae_ir.mine") == 1 and "--stage 2" not in rerun and "--stage distill" not in rerun
    # distillation switched off: its record stays, its rows leave the report (made from a stage 2 since made
    # again, they would stand beside the new one)
    run_again(without_own_teacher([("distill=false" if a == "distill=true" else a) for a in argv]), output)
    assert "3-distill" in json.loads((output / "results.json").read_text())
    assert "2-stage2" in (output / "results.md").read_text() and "3-distill" not in (output / "results.md").read_text()
    main = json.loads((output / "results.json").read_text())
    commands = (output / "commands.log").stat().st_size

    # other settings for finished stages: refused before anything runs, naming the stage and the field
    with pytest.raises(SystemExit) as refused:
        chain_main([*argv, "lr=1e-4"])
    assert refused.value.code == 2
    assert "stage 2-stage2 was made with other settings (lr 5e-05 -> 0.0001)" in capsys.readouterr().err

    # a given teacher: the chain distils from it and trains no cross-encoder of its own
    given = tmp_path / "given"
    shutil.copytree(output, given)
    # a copied output is whole: its cards name the copy's checkpoints (they named the original's, so the copy's
    # next stage trained from the original folder while its digests followed the copy)
    from retromae_ir.encode.cards import load_card

    for card in ("0-pretrain.yaml", "1-stage1/card.yaml", "2-stage2/card.yaml"):
        assert Path(load_card(given / card).checkpoint_path()).parent == given.resolve()
    for chain_dir in (given, given / chain.ABLATION):
        results = json.loads((chain_dir / "results.json").read_text())
        for stage in ("4-cross-encoder", "5-soft-labels", "3-distill"):
            results.pop(stage, None)
            shutil.rmtree(chain_dir / stage, ignore_errors=True)
        (chain_dir / "5-soft-labels.jsonl").unlink()
        (chain_dir / "results.json").write_text(json.dumps(results))
    teacher = output / "4-cross-encoder"
    log = run_again(without_own_teacher([*argv[:7], str(given), *argv[8:], f"teacher={teacher}"]), given)
    assert not (given / "4-cross-encoder").exists()
    distilled = json.loads((given / "results.json").read_text())
    assert distilled["3-distill"]["settings"]["teacher"] == str(teacher)
    assert f"score --model {teacher} --input {given}/" in log
    assert (output / "commands.log").stat().st_size == commands
    assert json.loads((output / "results.json").read_text()) == main
