"""Readers for the three training formats (JSONL, qrels, MS MARCO triples), bad input, group sampling, collation."""
import json

import pytest
import torch

from retromae_ir.data.readers import DataFormatError
from retromae_ir.finetune.arguments import DataArguments
from retromae_ir.finetune.data import (GroupCollator, TrainExample, check_teacher_spread, load_examples,
                                       read_jsonl_examples, read_qrels_examples, read_triples, sample_group)

CORPUS = {"d1": "alpha text", "d2": "beta text", "d3": "gamma text"}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_jsonl_ids_inline_passages_and_scores(tmp_path):
    path = write_lines(tmp_path / "train.jsonl", [
        json.dumps({"qid": "q1", "query": "what", "positives": ["d1"], "negatives": ["d2", {"title": "T", "text": "x"}],
                    "positive_scores": [3], "negative_scores": [1.5, -2]}),
        "",
        json.dumps({"query": "who", "positives": [{"text": "inline"}]}),
    ])
    first, second = read_jsonl_examples(path, CORPUS)
    assert first == TrainExample("what", ["alpha text"], ["beta text", "T x"], [3.0], [1.5, -2.0], "q1")
    assert first.scored and not second.scored
    assert second.positives == ["inline"] and second.negatives == []


@pytest.mark.parametrize("line, message", [
    ("{not json", r"train.jsonl:2: invalid JSON"),
    (json.dumps({"positives": ["d1"]}), r"train.jsonl:2: expected an object with a non-empty string 'query'"),
    (json.dumps({"query": "q", "positives": []}), r"train.jsonl:2: 'positives' is empty"),
    (json.dumps({"query": "q", "positives": "d1"}), r"train.jsonl:2: 'positives' must be a list"),
    (json.dumps({"query": "q", "positives": ["d9"]}),
     r"train.jsonl:2: positives: document id 'd9' is not in the corpus"),
    (json.dumps({"query": "q", "positives": [{"title": "t"}]}), r"train.jsonl:2: positives: an inline passage needs"),
    (json.dumps({"query": "q", "positives": ["d1"], "negatives": ["d2"], "negative_scores": [1, 2]}),
     r"train.jsonl:2: 'negative_scores' must be a list of 1 numbers"),
])
def test_jsonl_bad_input_names_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "train.jsonl", [json.dumps({"query": "ok", "positives": ["d1"]}), line])
    with pytest.raises(DataFormatError, match=message):
        read_jsonl_examples(path, CORPUS)


def test_jsonl_ids_need_a_corpus(tmp_path):
    path = write_lines(tmp_path / "train.jsonl", [json.dumps({"query": "q", "positives": ["d1"]})])
    with pytest.raises(DataFormatError, match="needs --corpus"):
        read_jsonl_examples(path)


def test_qrels_examples_on_scifact_train(shared_data):
    from retromae_ir.finetune.data import load_passages

    folder = shared_data / "beir" / "scifact"
    corpus = load_passages(folder / "corpus.jsonl")
    examples = read_qrels_examples(folder / "queries.jsonl", folder / "qrels" / "train.tsv", corpus)
    assert len(examples) == 809
    assert all(e.positives and not e.negatives for e in examples)
    assert all(p in corpus.values() for e in examples[:20] for p in e.positives)


def test_qrels_examples_msmarco_tsv_and_errors(tmp_path):
    queries = write_lines(tmp_path / "queries.train.tsv", ["1\tfirst query", "2\tsecond query"])
    qrels = write_lines(tmp_path / "qrels.train.tsv", ["1 0 d1 1", "1 0 d2 1", "2 0 d3 0"])
    examples = read_qrels_examples(queries, qrels, CORPUS)
    assert [(e.qid, e.query, e.positives) for e in examples] == [("1", "first query", ["alpha text", "beta text"])]
    write_lines(qrels, ["1 0 d1 1", "3 0 d2 1"])
    with pytest.raises(DataFormatError, match="query '3' is judged but not in"):
        read_qrels_examples(queries, qrels, CORPUS)
    write_lines(qrels, ["1 0 d7 1"])
    with pytest.raises(DataFormatError, match=r"documents \['d7'\] missing from the corpus"):
        read_qrels_examples(queries, qrels, CORPUS)


def test_triples_grouped_by_query_and_bad_columns(tmp_path):
    path = write_lines(tmp_path / "triples.tsv", ["q1\tp1\tn1", "q2\tp2\tn2", "q1\tp1\tn3", "q1\tp4\tn1"])
    examples = read_triples(path)
    assert [(e.query, e.positives, e.negatives) for e in examples] == [
        ("q1", ["p1", "p4"], ["n1", "n3"]), ("q2", ["p2"], ["n2"])]
    # a passage named by several triples is one string (a string a row: a copy of a passage for every row naming it)
    write_lines(path, ["q1\tpassage one\tpassage two", "q2\tpassage two\tpassage one"])
    first, second = read_triples(path)
    assert first.positives[0] is second.negatives[0] and first.negatives[0] is second.positives[0]
    write_lines(path, ["q1\tp1\tn1", "q2\tp2"])
    with pytest.raises(DataFormatError, match=r"triples.tsv:2: expected 'query<TAB>positive<TAB>negative'"):
        read_triples(path)



def test_a_negative_that_is_also_a_positive_of_its_query_is_dropped(tmp_path, caplog):
    """By id, by the same text inline, or in triples (a negative of q1 on one line, its positive on another):
    training would push the query away from a passage that answers it. Teacher scores stay aligned."""
    path = write_lines(tmp_path / "train.jsonl", [
        json.dumps({"query": "q", "positives": ["d1", "d2"], "negatives": ["d3", "d2"], "positive_scores": [1, 2],
                    "negative_scores": [3, 4]}),
        json.dumps({"query": "r", "positives": ["d1"], "negatives": [{"text": CORPUS["d1"]}, "d2"]})])
    with caplog.at_level("WARNING"):
        first, second = read_jsonl_examples(path, CORPUS)
    assert (first.negatives, first.negative_scores) == (["gamma text"], [3.0])
    assert second.negatives == ["beta text"]
    assert "dropped 2 negative(s)" in caplog.text
    triples = write_lines(tmp_path / "triples.tsv", ["q1\tp1\tn1", "q2\tp2\tn2", "q1\tn1\tn3"])
    assert [(e.positives, e.negatives) for e in read_triples(triples)] == [
        (["p1", "n1"], ["n3"]), (["p2"], ["n2"])]


def test_load_examples_checks_negatives_and_teacher_scores(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    write_lines(corpus, [json.dumps({"_id": k, "title": "", "text": v}) for k, v in CORPUS.items()])
    train = write_lines(tmp_path / "train.jsonl", [json.dumps({"query": "q", "positives": ["d1"]})])
    with pytest.raises(DataFormatError, match=r"no negatives but --group-size is 4: .* or use --group-size 1"):
        load_examples(DataArguments(train=str(train), corpus=str(corpus), group_size=4))
    with pytest.raises(DataFormatError, match=r"retromae_ir\.mine\)$"):  # no group of one for a model without
        load_examples(DataArguments(train=str(train), corpus=str(corpus), group_size=4), in_batch=False)  # in-batch
    assert len(load_examples(DataArguments(train=str(train), corpus=str(corpus), group_size=1))) == 1
    with pytest.raises(DataFormatError, match="lack teacher scores"):
        load_examples(DataArguments(train=str(train), corpus=str(corpus), group_size=1), need_scores=True)


def test_data_arguments_need_one_source():
    with pytest.raises(ValueError, match="either --train"):
        DataArguments()
    with pytest.raises(ValueError, match="needs --queries, --qrels and --corpus"):
        DataArguments(qrels="q.tsv")


def test_sample_group_positive_first_distinct_negatives_scores_aligned():
    example = TrainExample("q", ["p0", "p1"], ["n0", "n1", "n2", "n3"], [10.0, 11.0], [0.0, 1.0, 2.0, 3.0])
    for seed in range(20):
        group = sample_group(example, 4, torch.Generator().manual_seed(seed))
        assert group.passages[0] in ("p0", "p1") and len(set(group.passages[1:])) == 3
        assert group.scores == [float(p[1]) + (10.0 if p[0] == "p" else 0.0) for p in group.passages]
    short = TrainExample("q", ["p"], ["n"])
    assert sample_group(short, 3, torch.Generator().manual_seed(0)).passages == ["p", "n", "n"]


def test_collator_layout(minilm_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    examples = [TrainExample("first query", ["pos a"], ["neg a1", "neg a2"], [2.0], [1.0, 0.0]),
                TrainExample("second", ["pos b"], ["neg b1", "neg b2"], [5.0], [4.0, 3.0])]
    batch = GroupCollator(tokenizer, 3, 8, 16, teacher=True)(examples, torch.Generator().manual_seed(0))
    assert batch["size"] == 2
    assert batch["query_input_ids"].shape[0] == 2 and batch["passage_input_ids"].shape[0] == 6
    decoded = tokenizer.batch_decode(batch["passage_input_ids"], skip_special_tokens=True)
    assert decoded[0] == "pos a" and decoded[3] == "pos b"
    assert batch["teacher"][:, 0].tolist() == [2.0, 5.0]


def test_a_twin_querys_positives_are_masked_like_its_own(minilm_path, tmp_path):
    """Two queries of one text judged differently (scifact's train split has such twins): each one's positive is a
    positive of the other for false-negative masking, not an in-batch negative (mining already treats it so)."""
    from transformers import AutoTokenizer

    from retromae_ir.finetune.data import text_key

    train = write_lines(tmp_path / "train.jsonl", [
        json.dumps({"query": "Stem cells", "positives": ["d1"], "negatives": ["d3"]}),
        json.dumps({"query": "stem  CELLS", "positives": ["d2"], "negatives": ["d3"]}),
        json.dumps({"query": "another", "positives": ["d3"], "negatives": ["d1"]})])
    corpus = write_lines(tmp_path / "corpus.jsonl", [json.dumps({"_id": k, "text": v}) for k, v in CORPUS.items()])
    examples = load_examples(DataArguments(train=str(train), corpus=str(corpus)))
    assert [e.twin_positives for e in examples] == [("beta text",), ("alpha text",), ()]
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    batch = GroupCollator(tokenizer, 2, 8, 16, keys=True)(examples, torch.Generator().manual_seed(0))
    alpha, beta, gamma = (text_key(CORPUS[d]) for d in ("d1", "d2", "d3"))
    assert batch["positive_keys"].tolist() == [[alpha, beta], [beta, alpha], [gamma, -1]]


def test_a_listed_negative_that_is_a_twins_positive_is_dropped_with_its_score(tmp_path, caplog):
    """A hand-made file listing a twin's positive as a hard negative: dropped, as a query's own positive is (masking
    would leave it out of the contrastive pool but distillation would still push the query away from it)."""
    train = write_lines(tmp_path / "train.jsonl", [
        json.dumps({"query": "Stem cells", "positives": ["d1"], "negatives": ["d2", "d3"],
                    "positive_scores": [3.0], "negative_scores": [2.0, 1.0]}),
        json.dumps({"query": "stem cells", "positives": ["d2"], "negatives": ["d3"],
                    "positive_scores": [3.0], "negative_scores": [0.5]})])
    corpus = write_lines(tmp_path / "corpus.jsonl", [json.dumps({"_id": k, "text": v}) for k, v in CORPUS.items()])
    first, second = load_examples(DataArguments(train=str(train), corpus=str(corpus)), need_scores=True)
    assert (first.negatives, first.negative_scores) == (["gamma text"], [1.0])
    assert (second.negatives, second.negative_scores) == (["gamma text"], [0.5])
    assert "dropped 1 negative(s) whose text is a positive of a query of the same text" in caplog.text


def test_load_examples_reads_gzipped_triples(tmp_path):
    import gzip

    path = tmp_path / "triples.train.small.tsv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("q1\tp1\tn1\nq1\tp1\tn2\n")
    (example,) = load_examples(DataArguments(train=str(path), group_size=2))
    assert (example.query, example.positives, example.negatives) == ("q1", ["p1"], ["n1", "n2"])


def test_nearly_uniform_teacher_scores_are_warned_about(caplog):
    flat = [TrainExample("q", ["p"], ["n1", "n2"], [-0.02], [-0.03, -0.01 + 0.01 * i]) for i in range(3)]
    assert check_teacher_spread(flat, "soft.jsonl") == pytest.approx(0.03)  # spreads 0.02, 0.03, 0.04
    assert "teacher scores span only 0.0300" in caplog.text and "soft.jsonl" in caplog.text
    caplog.clear()
    sharp = [TrainExample("q", ["p"], ["n"], [4.0], [-1.0 - i]) for i in range(3)]
    assert check_teacher_spread(sharp, "soft.jsonl") == 6.0
    assert caplog.text == ""


def test_qrels_or_id_triples_given_as_text_triples_are_refused(tmp_path):
    """--train qrels/train.tsv trained on id strings ('0' -> '31715818'), with the header as a query, exit 0."""
    for name, content in [("qrels.tsv", "query-id\tcorpus-id\tscore\n0\t31715818\t1\n"),
                          ("qidpidtriples.tsv", "400296\t1540783\t3518497\n")]:
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(DataFormatError, match=rf"{name}:1: .* holds ids, not texts: .*--queries FILE --qrels"):
            read_triples(path)
