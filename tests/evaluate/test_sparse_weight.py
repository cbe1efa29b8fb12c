"""The OT-weight sweep's runs: each query's best documents, ties at the depth cut by docid."""
import numpy as np

from retromae_ir.evaluate.sparse_weight import best_weight, top_run


def test_a_tie_at_the_cut_keeps_the_first_docid_whatever_the_rows():
    """Two documents with one score at ranks 3 and 4 (duplicate texts give equal vectors): the depth-3 run keeps
    the one first by docid, wherever the two sit among the rows (argpartition's choice went either way)."""
    docids = [f"d{i:02d}" for i in range(40)]
    rng = np.random.default_rng(0)
    for trial in range(50):
        scores = rng.random(40) * 0.5
        first, second = sorted(rng.choice(40, size=2, replace=False), key=lambda j: docids[j])
        top = rng.choice([j for j in range(40) if j not in (first, second)], size=2, replace=False)
        scores[top] = [0.9, 0.8]
        scores[[first, second]] = 0.7
        run = top_run(scores[None, :], ["q"], docids, 3)["q"]
        assert set(run) == {docids[top[0]], docids[top[1]], docids[first]}, trial
        assert run[docids[first]] == 0.7


def test_the_best_weight_takes_the_smaller_on_a_tie():
    assert best_weight({0.1: {"ndcg@10": 0.5}, 0.01: {"ndcg@10": 0.5}, 1.0: {"ndcg@10": 0.4}}) == 0.01


def test_the_sweep_drops_a_hit_named_as_its_query(monkeypatch):
    """A corpus document under a query's id (ArguAna, Quora, fiqa's 1198) is not that query's hit, as in the suite."""
    import types

    import scipy.sparse

    from retromae_ir.encode import manifest
    from retromae_ir.evaluate import sparse_weight
    from retromae_ir.search import index as index_module

    index = types.SimpleNamespace(dense=np.eye(3, dtype=np.float32), sparse=scipy.sparse.csr_matrix(np.eye(3)),
                                  docids=["q1", "d2", "d3"], manifest={})
    monkeypatch.setattr(index_module, "HybridIndex", lambda *args: index)
    monkeypatch.setattr(manifest, "check_precision", lambda *args: None)
    query = types.SimpleNamespace(dense=np.array([[1.0, 0.5, 0.0]], dtype=np.float32),
                                  sparse=scipy.sparse.csr_matrix(np.zeros((1, 3))))
    model = types.SimpleNamespace(card=types.SimpleNamespace(sparse_weight=1.0), encode_query=lambda texts: query)
    table = sparse_weight.sweep_sparse_weight("unused", model, {"q1": "text"}, {"q1": {"d2": 1}}, weights=[1.0],
                                              metrics=("ndcg@10",))
    assert table[1.0]["ndcg@10"] == 1.0  # d2 first once q1's own document is gone (0.63 with it)
