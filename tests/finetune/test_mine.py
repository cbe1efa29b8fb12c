"""Mining drops the positives, samples only from the rank window, is seeded, and writes the training JSONL."""
import json
import logging
import random

import pytest

from retromae_ir.data.readers import DataFormatError
from retromae_ir.finetune.data import read_jsonl_examples
from retromae_ir.mine import MiningArguments, mine, sample_negatives

RANKING = [f"d{i}" for i in range(1, 21)]  # d1 is rank 1 ... d20 rank 20


def serve(monkeypatch, retrieve) -> None:
    """Mining's searcher answers each block of queries with ``retrieve(args, queries)``."""
    import retromae_ir.mine as mining

    monkeypatch.setattr(mining, "searcher", lambda args: lambda queries: retrieve(args, queries))


def test_window_and_positives():
    positives = {"d4", "d6", "d1"}
    for seed in range(30):
        picked = sample_negatives(RANKING, positives, 3, 10, 4, random.Random(seed))
        assert len(picked) == 4
        assert not positives & set(picked)
        assert all(3 <= int(d[1:]) <= 10 for d in picked)
        assert picked == sorted(picked, key=lambda d: int(d[1:]))


def test_small_window_returns_everything_left():
    assert sample_negatives(RANKING, {"d3"}, 2, 5, 10, random.Random(0)) == ["d2", "d4", "d5"]
    assert sample_negatives(RANKING[:2], set(), 3, 200, 5, random.Random(0)) == []


def test_mine_records_seeded_and_readable(tmp_path):
    run = {"q1": {d: 100.0 - i for i, d in enumerate(RANKING)}, "q2": {"d1": 5.0, "d2": 4.0}}
    args = MiningArguments("bm25", "c.jsonl", "q.jsonl", "r.tsv", str(tmp_path / "neg.jsonl"),
                           min_rank=2, max_rank=15, negatives=5, seed=7)
    positives = {"q1": {"d2", "d9"}, "q2": {"d1", "d2"}}
    records = mine(run, {"q1": "first", "q2": "second"}, positives, args)
    assert [r["qid"] for r in records] == ["q1"]  # q2 has nothing left in its window
    assert records == mine(run, {"q1": "first", "q2": "second"}, positives, args)
    negatives = records[0]["negatives"]
    assert len(negatives) == 5 and not {"d2", "d9"} & set(negatives) and "d1" not in negatives
    corpus = {d: f"text {d}" for d in RANKING}
    (tmp_path / "neg.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    example = read_jsonl_examples(tmp_path / "neg.jsonl", corpus)[0]
    assert example.query == "first" and example.positives == ["text d2", "text d9"] and len(example.negatives) == 5


def test_a_twin_querys_positives_are_never_its_negatives(tmp_path):
    """Two queries of one text (case, spacing and punctuation aside) judged differently: neither gets the other's
    positive as a negative (a record held d3 as a positive and its twin d3 as a hard negative)."""
    run = {q: {d: 100.0 - i for i, d in enumerate(RANKING)} for q in ("q1", "q2", "q3")}
    args = MiningArguments("bm25", "c.jsonl", "q.jsonl", "r.tsv", str(tmp_path / "neg.jsonl"),
                           min_rank=1, max_rank=6, negatives=10, seed=7)
    queries = {"q1": "Stem cells?", "q2": "stem  CELLS", "q3": "another"}
    records = mine(run, queries, {"q1": {"d1", "d3"}, "q2": {"d1"}, "q3": {"d1"}}, args)
    assert {r["qid"]: r["negatives"] for r in records} == {"q1": ["d2", "d4", "d5", "d6"], "q2": ["d2", "d4", "d5", "d6"],
                                                          "q3": ["d2", "d3", "d4", "d5", "d6"]}
    assert records[1]["positives"] == ["d1"]  # its own judgements stay its own


def test_bad_window():
    with pytest.raises(ValueError, match="min-rank"):
        MiningArguments("bm25", "c", "q", "r", "o", min_rank=5, max_rank=4)
    with pytest.raises(ValueError, match="--min-relevance must be >= 1, got 0"):  # 0: judged non-relevant
        MiningArguments("bm25", "c", "q", "r", "o", min_relevance=0)


@pytest.mark.parametrize("flags, named", [({"mode": "dense"}, "--mode"), ({"dtype": "fp32"}, "--dtype"),
                                          ({"no_lucene": True, "dtype": "auto"}, "--dtype, --no-lucene")])
def test_card_only_flags_with_bm25_are_refused(flags, named):
    """BM25 mining reads none of them: they were accepted, ignored and written to OUTPUT.args.json as if used."""
    with pytest.raises(ValueError, match=f"^{named} go with an encoder-card --retriever, not bm25"):
        MiningArguments("bm25", "c", "q", "r", "o", **flags)
    MiningArguments("card.yaml", "c", "q", "r", "o", **flags)  # a card reads them
    assert MiningArguments("card.yaml", "c", "q", "r", "o").dtype == "auto"  # recorded as used
    assert MiningArguments("bm25", "c", "q", "r", "o").dtype is None


def test_documents_judged_relevant_below_min_relevance_are_no_negatives(tmp_path, monkeypatch):
    """Graded qrels and --min-relevance 2: a document judged 1 is not a positive, and it is not a hard negative
    either (evaluation counts it relevant); it was sampled as one, and training pushed the query away from it."""
    from retromae_ir import mine as mining

    topics = tmp_path / "queries.tsv"
    topics.write_text("q1\tstem cells\nq2\tStem  cells\nq3\tother\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 2\nq1 0 d2 1\nq2 0 d3 1\nq3 0 d1 2\nq3 0 d4 0\n")
    run = {q: {d: 100.0 - i for i, d in enumerate(RANKING)} for q in ("q1", "q3")}
    serve(monkeypatch, lambda args, queries: {q: run[q] for q in queries})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("")
    args = MiningArguments("bm25", str(corpus), str(topics), str(qrels), str(tmp_path / "neg.jsonl"),
                           min_rank=1, max_rank=5, negatives=10, seed=7, min_relevance=2)
    mining._mine_into(args)
    from retromae_ir.io import file_digest

    made = json.loads((tmp_path / "neg.jsonl.args.json").read_text())  # what check_made_from reads
    assert (made["qrels_sha256"], made["corpus_sha256"]) == (file_digest(qrels), file_digest(corpus))
    assert made["qrels_here"] == "qrels.txt"  # beside the mined file: found from its folder wherever it is
    records = {r["qid"]: r for r in map(json.loads, (tmp_path / "neg.jsonl").read_text().splitlines())}
    # q1: d2 (its own label 1) and d3 (its twin q2's label 1) left out; q3: d4, judged 0, is a fair negative
    assert {q: (r["positives"], r["negatives"]) for q, r in records.items()} == {
        "q1": (["d1"], ["d4", "d5"]), "q3": (["d1"], ["d2", "d3", "d4", "d5"])}


def test_no_earlier_record_is_left_beside_new_negatives_and_the_corpus_may_not_change_meanwhile(tmp_path, monkeypatch):
    """A `rerank score` key left beside the output (the file it scored replaced by mining) was read as the new file's
    record whenever mining died before its own; and a corpus replaced during a long mining run had its new bytes
    recorded for negatives found in the old one (exit 0)."""
    from retromae_ir import mine as mining
    from retromae_ir.finetune.data import made_from
    from retromae_ir.io import file_digest, key_path

    topics, qrels, corpus = tmp_path / "queries.tsv", tmp_path / "qrels.txt", tmp_path / "corpus.jsonl"
    topics.write_text("q1\tstem cells\n")
    qrels.write_text("q1 0 d1 1\n")
    corpus.write_text('{"_id": "d1", "text": "a"}\n')
    output = tmp_path / "neg.jsonl"
    key_path(output).write_text(json.dumps({"corpus_sha256": "another corpus's"}))
    serve(monkeypatch, lambda args, queries: {"q1": {d: 100.0 - i for i, d in enumerate(RANKING)}})
    args = MiningArguments("bm25", str(corpus), str(topics), str(qrels), str(output), min_rank=1, max_rank=5)
    mining._mine_into(args)
    assert not key_path(output).exists() and made_from(output)["corpus_sha256"] == file_digest(corpus)
    # the record names its file: one that is not the file beside it (replaced, or mining killed between writing
    # the record and publishing the negatives, the record being written first) is refused, not trusted
    assert made_from(output)["output_sha256"] == file_digest(output)
    output.write_text(output.read_text() + output.read_text())
    with pytest.raises(DataFormatError, match=r"neg.jsonl is not the file neg.jsonl.args.json records"):
        made_from(output)

    def replacing_the_corpus(args, queries):
        corpus.write_text('{"_id": "d1", "text": "b"}\n')
        return {"q1": {d: 100.0 - i for i, d in enumerate(RANKING)}}

    serve(monkeypatch, replacing_the_corpus)
    with pytest.raises(ValueError, match="corpus.jsonl changed while mining"):
        mining._mine_into(args)


def test_mining_logs_beside_its_output_and_a_refused_run_leaves_no_log(tmp_path, monkeypatch, caplog):
    """A long job logs to a file (OUTPUT.log, appended by a rerun); one that is refused leaves no log behind."""
    from retromae_ir import mine as mining
    caplog.set_level(logging.INFO)  # the level a command sets up
    topics, qrels, corpus = tmp_path / "queries.tsv", tmp_path / "qrels.txt", tmp_path / "corpus.jsonl"
    topics.write_text("q1\tstem cells\n")
    qrels.write_text("q1 0 d1 1\n")
    corpus.write_text('{"_id": "d1", "text": "a"}\n')
    serve(monkeypatch, lambda args, queries: {"q1": {d: 100.0 - i for i, d in enumerate(RANKING)}})
    output = tmp_path / "neg.jsonl"
    refused = MiningArguments("bm25", str(corpus), str(topics), str(qrels), str(output), min_rank=30, max_rank=40)
    with pytest.raises(ValueError, match="no query kept a negative"):
        mining._mine_into(refused)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "qrels.txt", "queries.tsv"]
    args = MiningArguments("bm25", str(corpus), str(topics), str(qrels), str(output), min_rank=1, max_rank=5)
    mining._mine_into(args)
    mining._mine_into(args)
    log = (tmp_path / "neg.jsonl.log").read_text()
    assert log.count("neg.jsonl: 1 queries, 4.0 negatives each (ranks 1-5, bm25)") == 2
    with pytest.raises(ValueError, match="no query kept a negative"):  # a log of earlier runs is kept, and told
        mining._mine_into(refused)
    assert (tmp_path / "neg.jsonl.log").read_text().startswith(log)

    def crashing(args, queries):
        raise RuntimeError("a bug, not a refusal")

    (tmp_path / "neg.jsonl.log").unlink()
    serve(monkeypatch, crashing)
    with pytest.raises(RuntimeError, match="a bug, not a refusal"):
        mining._mine_into(args)
    assert (tmp_path / "neg.jsonl.log").is_file()  # a crash keeps its log, to be read


def test_queries_are_searched_and_mined_a_block_at_a_time(tmp_path, monkeypatch):
    """The run of every query was held at once (11.4 GB for MS MARCO's train queries at 200 hits); blocks of
    ``MINING_BLOCK`` queries are searched and mined in turn, into the same file as one block."""
    from retromae_ir import mine as mining

    topics, qrels = tmp_path / "queries.tsv", tmp_path / "qrels.txt"
    topics.write_text("".join(f"q{i}\tquery {i}\n" for i in range(5)))
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(5)))
    (tmp_path / "corpus.jsonl").write_text("")
    blocks = []

    def retrieve(args, queries):
        blocks.append(sorted(queries))
        return {q: {d: 100.0 - i for i, d in enumerate(RANKING)} for q in queries}

    serve(monkeypatch, retrieve)
    written = {}
    for block in (8192, 2):
        monkeypatch.setattr(mining, "MINING_BLOCK", block)
        output = tmp_path / f"neg-{block}.jsonl"
        mining._mine_into(MiningArguments("bm25", str(tmp_path / "corpus.jsonl"), str(topics), str(qrels),
                                          str(output), min_rank=1, max_rank=5, negatives=2, seed=7))
        written[block] = output.read_text()
    assert blocks == [["q0", "q1", "q2", "q3", "q4"], ["q0", "q1"], ["q2", "q3"], ["q4"]]
    assert written[2] == written[8192] and len(written[2].splitlines()) == 5


def test_the_topics_file_is_named_as_every_other_command_names_it():
    from retromae_ir.cli import dataclass_parser

    parser = dataclass_parser([MiningArguments], "python -m retromae_ir.mine")
    common = ["--retriever", "bm25", "--corpus", "c", "--qrels", "r", "--output", "o"]
    (by_topics,) = parser.parse_args_into_dataclasses(common + ["--topics", "t.tsv"])
    (by_queries,) = parser.parse_args_into_dataclasses(common + ["--queries", "t.tsv"])
    assert by_topics == by_queries and by_topics.queries == "t.tsv"
