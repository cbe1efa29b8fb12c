"""The dev split: disjoint from training, seeded, rewritten when its source or settings change."""
import json

import pytest

from retromae_ir.data.readers import load_qrels
from retromae_ir.data.splits import carve_dev_split


@pytest.fixture
def qrels(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\nq{i}\td{i}b\t1\n" for i in range(10)))
    return path


def test_dev_queries_leave_training_and_keep_their_labels(qrels, tmp_path):
    train, dev = carve_dev_split(qrels, 3, tmp_path / "split", seed=0)
    train_labels, dev_labels, source = load_qrels(train), load_qrels(dev), load_qrels(qrels)
    assert len(dev_labels) == 3 and len(train_labels) == 7
    assert not set(train_labels) & set(dev_labels)
    assert {**train_labels, **dev_labels} == source


def test_same_seed_same_split_other_seed_other_split(qrels, tmp_path):
    _, dev_a = carve_dev_split(qrels, 3, tmp_path / "a", seed=0)
    _, dev_b = carve_dev_split(qrels, 3, tmp_path / "b", seed=0)
    _, dev_c = carve_dev_split(qrels, 3, tmp_path / "c", seed=1)
    assert dev_a.read_text() == dev_b.read_text() != dev_c.read_text()


def test_a_changed_source_rewrites_the_split(qrels, tmp_path):
    carve_dev_split(qrels, 3, tmp_path / "s")
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"x{i}\td{i}\t1\n" for i in range(5)))
    train, dev = carve_dev_split(qrels, 2, tmp_path / "s")
    assert set(load_qrels(train)) | set(load_qrels(dev)) == {f"x{i}" for i in range(5)}


@pytest.mark.parametrize("size", [0, 10, 11])
def test_a_dev_split_must_leave_training_queries(qrels, tmp_path, size):
    with pytest.raises(ValueError, match="needs 0 < size < 10"):
        carve_dev_split(qrels, size, tmp_path / "s")
    assert not (tmp_path / "s" / "train.tsv").exists()


def test_a_rewrite_interrupted_between_its_files_is_not_taken_as_the_old_split(qrels, tmp_path, monkeypatch):
    """Seed 0 is carved, a seed-1 rewrite dies after train.tsv; asking for seed 0 again must not return seed 1's
    training queries beside seed 0's record (dev queries would leak into training)."""
    import retromae_ir.data.splits as splits

    first_train, first_dev = (p.read_text() for p in carve_dev_split(qrels, 3, tmp_path / "s", seed=0))
    real = splits.atomic_write

    def dies_at_dev(path, *args, **kwargs):
        if path.name == "dev.tsv":
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(splits, "atomic_write", dies_at_dev)
    with pytest.raises(KeyboardInterrupt):
        carve_dev_split(qrels, 3, tmp_path / "s", seed=1)
    monkeypatch.undo()
    train, dev = carve_dev_split(qrels, 3, tmp_path / "s", seed=0)
    assert (train.read_text(), dev.read_text()) == (first_train, first_dev)


def test_a_training_query_with_a_dev_or_test_query_text_leaves_training(tmp_path):
    """scifact's train split holds a dev-size sample's twin (85/86) and two test queries again under other ids
    (871 = test 870, 1291 = test 1292), with the same positives: trained on, they would score what they learnt."""
    qrels, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    test.write_text("query-id\tcorpus-id\tscore\nt0\td0\t1\nq9\td9\t1\n")  # q9: a test query in train too
    texts = {f"q{i}": f"query {i}" for i in range(10)} | {"t0": "test query"}
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in texts.items()))
    _, plain = carve_dev_split(qrels, 3, tmp_path / "plain", seed=0, queries=queries)
    dev_ids = set(load_qrels(plain))
    first = sorted(dev_ids)[0]
    twin, test_twin = [q for q in sorted(texts) if q.startswith("q") and q not in dev_ids and q != "q9"][:2]
    # a dev and a test query's text, case, spacing and punctuation aside
    texts |= {twin: f"  QUERY {first[1:]}? ", test_twin: "Test   query."}
    queries.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in texts.items()))
    train, dev = carve_dev_split(qrels, 3, tmp_path / "twins", seed=0, queries=queries, evaluated=(test,))
    dev_now = set(load_qrels(dev))  # the same seeded sample, but q9 (a test query) drawn again
    assert len(dev_now) == 3 and "q9" not in dev_now and dev_ids - {"q9"} < dev_now
    assert set(load_qrels(train)) == {f"q{i}" for i in range(10)} - dev_now - {twin, test_twin, "q9"}
    test.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    with pytest.raises(ValueError, match="needs 3 training queries .* there are 0"):  # every one is a test query
        carve_dev_split(qrels, 3, tmp_path / "none", seed=0, queries=queries, evaluated=(test,))


def test_dev_never_draws_an_evaluated_query_or_its_twin_and_keeps_its_size(tmp_path):
    """scifact at 300 dev queries (seed 0) drew 871, test query 870's twin: settings were chosen on a test query."""
    qrels, test, queries = tmp_path / "train.tsv", tmp_path / "test.tsv", tmp_path / "queries.jsonl"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    _, plain = carve_dev_split(qrels, 3, tmp_path / "plain", seed=0)
    first, second = sorted(load_qrels(plain))[:2]
    test.write_text(f"query-id\tcorpus-id\tscore\nt0\td0\t1\n{second}\td9\t1\n")  # `second`: a test query itself
    texts = {f"q{i}": f"query {i}" for i in range(10)} | {"t0": "test query", first: "Test  Query"}  # first: a twin
    queries.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in texts.items()))
    train, dev = carve_dev_split(qrels, 3, tmp_path / "twins", seed=0, queries=queries, evaluated=(test,))
    dev_ids, train_ids = set(load_qrels(dev)), set(load_qrels(train))
    assert len(dev_ids) == 3 and not dev_ids & {first, second}
    assert set(load_qrels(plain)) - {first, second} < dev_ids  # the rest of the seeded sample is kept
    assert train_ids == {f"q{i}" for i in range(10)} - dev_ids - {first, second}
    with pytest.raises(ValueError, match="needs 9 training queries that are not evaluated .* there are 8"):
        carve_dev_split(qrels, 9, tmp_path / "big", seed=0, queries=queries, evaluated=(test,))
    with pytest.raises(ValueError, match="no training query is left"):  # 8 drawn: dev takes every other query
        carve_dev_split(qrels, 8, tmp_path / "all", seed=0, queries=queries, evaluated=(test,))


def test_the_default_scifact_split_is_unchanged_and_300_avoids_the_test_twins(shared_data, tmp_path):
    import random

    folder = shared_data / "beir" / "scifact"
    if not (folder / "qrels" / "train.tsv").is_file():
        pytest.skip("scifact is not beside the checkout")
    source = folder / "qrels" / "train.tsv"
    args = dict(queries=folder / "queries.jsonl", evaluated=(folder / "qrels" / "test.tsv",))
    _, dev = carve_dev_split(source, 100, tmp_path / "100", **args)
    assert set(load_qrels(dev)) == set(random.Random(0).sample(sorted(load_qrels(source)), 100))  # as before
    train, dev = carve_dev_split(source, 300, tmp_path / "300", **args)
    assert not set(load_qrels(dev)) & {"871", "1291"} and len(load_qrels(dev)) == 300
    assert not set(load_qrels(train)) & {"871", "1291"}


def test_dev_never_draws_a_query_judged_only_non_relevant(tmp_path):
    """A query whose every label is 0 scores 0 under every setting the dev split compares: drawn into dev it only
    shrank the split; it is replaced by another draw (and stays in training, where it harms nothing)."""
    qrels = tmp_path / "train.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10)))
    _, plain = carve_dev_split(qrels, 3, tmp_path / "plain", seed=0)
    drawn = sorted(load_qrels(plain))
    zero = drawn[0]
    qrels.write_text(qrels.read_text().replace(f"{zero}\td{zero[1:]}\t1", f"{zero}\td{zero[1:]}\t0"))
    train, dev = carve_dev_split(qrels, 3, tmp_path / "zero", seed=0)
    dev_now = set(load_qrels(dev))
    assert len(dev_now) == 3 and zero not in dev_now and set(drawn[1:]) < dev_now
    assert zero in load_qrels(train)


def test_same_queries_are_the_same_text_up_to_case_spacing_and_the_punctuation_around_words():
    from retromae_ir.data.splits import normalized_query

    assert normalized_query("  What causes X?") == normalized_query("what causes  x") == "what causes x"
    assert normalized_query('"Stem cells" (in mice).') == "stem cells in mice"
    assert normalized_query("what is c++") != normalized_query("what is c")  # inside a word, it stays
    assert normalized_query("किताब") != normalized_query("कातिब")  # vowel signs are part of the word
    assert normalized_query("ｒéｓｕｍé") == normalized_query("RÉSUMÉ")  # width and composed forms (NFKC)
