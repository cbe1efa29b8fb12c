"""Query encoding into Pyserini's pre-encoded formats.

    DIR/dense/embedding.pkl  DataFrame(text, embedding) read by ``--encoded-queries DIR/dense`` (faiss, hybrid);
                             plain object-dtype strings, so reading it needs no pyarrow
    DIR/sparse.jsonl         {"id", "contents", "vector": {token: int}} read by LuceneImpactSearcher
                             (``--encoder DIR/sparse.jsonl``), looked up by the query text
    DIR/manifest.json        the card, weight and tokenizer files, encoding code's version and precision that
                             encoded them (``check_queries`` holds the card, those files, the version and the
                             precision against an index's manifest)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from retromae_ir.encode.corpus import precision
from retromae_ir.encode.manifest import MANIFEST, write_manifest
from retromae_ir.encode.representation import impact_dicts
from retromae_ir.io import atomic_dir, atomic_write


def encode_queries(model, topics: dict[str, str], output: str | os.PathLike, batch_size: int = 64) -> Path:
    """Encode ``{qid: text}`` with ``model`` and write the pre-encoded files under ``output``."""
    if not topics:
        raise ValueError("no topics to encode")
    output = Path(output)
    if (output / "dense" / "index").exists() or "documents" in _manifest_fields(output):
        raise ValueError(f"{output} holds an encoded corpus (an index): encoding queries there would replace its "
                         "dense/ and manifest; give another --output")
    qids, texts = list(topics), list(topics.values())
    encoded = model.encode_query(texts, batch_size, progress=True)  # a train topic set is minutes on a CPU
    (output / MANIFEST).unlink(missing_ok=True)  # the files change one by one: until the new manifest, incomplete
    (output / "sparse.jsonl").unlink(missing_ok=True)  # never an earlier run's sparse queries beside new dense ones
    with atomic_dir(output / "dense") as tmp:
        frame = pd.DataFrame({"text": pd.Series(texts, dtype=object),
                              "embedding": pd.Series(list(encoded.dense), dtype=object)})
        frame.to_pickle(tmp / "embedding.pkl")
    if encoded.sparse is not None:
        with atomic_write(output / "sparse.jsonl") as out:
            vectors = impact_dicts(encoded.sparse, model.lucene_terms, model.card.scale, qids)
            for qid, text, vector in zip(qids, texts, vectors):
                out.write(json.dumps({"id": qid, "contents": text, "vector": vector}) + "\n")
    return write_manifest(output, model.card, queries=len(qids), weights=model.checkpoint_digests(),
                          precision=precision(model))


def _manifest_fields(output: Path) -> dict:
    """The manifest already in ``output`` ({} when there is none or it cannot be read)."""
    try:
        return json.loads((output / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
