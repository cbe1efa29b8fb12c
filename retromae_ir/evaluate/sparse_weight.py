"""Choose Eq. 12's OT weight (the card's ``sparse_weight``, lambda) on a dev split, by brute force over an index.

The dense side of a normalised checkpoint is a cosine (at most 1) while raw OT dots are tens, so the weight
decides whether the hybrid is more than its sparse side. It is chosen per corpus on queries held out of training
(``retromae_ir.data.splits``), never on the test split. The stored OT vectors already carry sqrt(lambda_0) of the
card that built the index, so ``dense + (lambda / lambda_0) * stored dot`` is the hybrid score at weight lambda.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from retromae_ir.evaluate.metrics import evaluate_run
from retromae_ir.runs import remove_self_hits

logger = logging.getLogger(__name__)
GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def top_run(scores: np.ndarray, qids: list[str], docids: list[str], depth: int) -> dict[str, dict[str, float]]:
    """{qid: {docid: score}} of each row's ``depth`` best documents; a tie at the cut goes by docid, as the exact
    searcher's does (``brute_force.top_hits``), so duplicate documents cannot swap which one is kept."""
    from retromae_ir.search.brute_force import top_hits

    return {qid: dict(top_hits(scores[row], docids, depth)) for row, qid in enumerate(qids)}


def sweep_sparse_weight(index_dir: str | os.PathLike, model, queries: dict[str, str], qrels: dict,
                        weights=GRID, depth: int = 100, metrics=("ndcg@10", "recall@100")) -> dict[float, dict]:
    """{lambda: metrics} of the exact hybrid at each weight on ``queries`` (``model``: the index's EncoderModel); a
    hit whose docid is its query's id is dropped, as the BEIR suite and the chain's evaluation drop it."""
    from retromae_ir.encode.manifest import check_precision
    from retromae_ir.search.dense_top import dense_scores
    from retromae_ir.search.index import HybridIndex

    index = HybridIndex(index_dir, model.card)
    check_precision(index.manifest, model, index_dir)
    qids = list(queries)
    encoded = model.encode_query([queries[q] for q in qids])
    dense = dense_scores(index.dense, encoded.dense)  # row by row, as the searchers: duplicates tie exactly
    stored = (encoded.sparse @ index.sparse.T).toarray()
    base = model.card.sparse_weight
    return {w: evaluate_run(remove_self_hits(top_run(dense + (w / base) * stored, qids, index.docids, depth + 1),
                                             depth), qrels, metrics) for w in weights}


def best_weight(table: dict[float, dict], metric: str = "ndcg@10") -> float:
    """The weight with the best ``metric`` (the smaller weight on a tie)."""
    return max(sorted(table), key=lambda w: table[w][metric])
