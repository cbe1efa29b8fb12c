"""Soft labels: the cross-encoder's score of every positive and negative of a training JSONL.

The output is the input with ``positive_scores`` / ``negative_scores`` added (what ``--stage distill`` reads).
Records are appended to ``OUTPUT.partial`` a chunk of queries at a time, and the file is renamed to OUTPUT when
every query is scored. A rerun continues only a partial file of the same inputs (``OUTPUT.partial.key.json``: the
cross-encoder's weight and tokenizer files and max length, the kind of device, the batching, the input and corpus
bytes); any other partial file is started over, so an output never mixes two models', inputs', devices' or
batchings' scores. It continues after the last whole chunk, so every pair is scored in the batch a run without the
interruption would have put it in.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from retromae_ir.cli import check_at_least_one
from retromae_ir.data.readers import iter_lines
from retromae_ir.finetune.data import check_made_from, load_passages, read_jsonl_examples
from retromae_ir.logs import log_beside
from retromae_ir.runs import FLOAT32_MAX
from retromae_ir.io import (InputChangedError, as_stored, cached_checkpoint_key, file_digest, key_path, read_key,
                            write_key)

logger = logging.getLogger(__name__)


@dataclass
class ScoreArguments:
    input: str = field(metadata={"help": "training JSONL (e.g. the stage-2 negatives from python -m retromae_ir.mine)"})
    output: str = field(metadata={"help": "JSONL with positive_scores / negative_scores added"})
    corpus: str | None = field(default=None, metadata={"help": "BEIR corpus.jsonl / MS MARCO collection.tsv for ids"})
    batch_size: int = field(default=64, metadata={"help": "pairs per forward pass"})
    chunk_queries: int = field(default=64, metadata={"help": "queries per resumable chunk"})
    device: str | None = field(default=None, metadata={"help": "cpu / cuda (default: cuda when available)"})

    def __post_init__(self):
        check_at_least_one(self, "batch_size", "chunk_queries")  # below 1: an unscored output was published


def _completed(partial: Path, chunk_queries: int) -> int:
    """Records already in ``partial`` that whole chunks wrote; the rest (a chunk cut short by an interruption, a torn
    last line) is cut off, to be scored again in the batches it had."""
    if not partial.is_file():
        return 0
    text = partial.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # what follows the last newline: nothing, or a torn line
    kept = lines[:len(lines) - len(lines) % chunk_queries]
    complete = "".join(line + "\n" for line in kept)
    if complete != text:
        partial.write_text(complete, encoding="utf-8")
    return len(kept)


def score_key(model, args: ScoreArguments) -> dict:
    """What the scores depend on: the cross-encoder's weight and tokenizer files (a hub name's cached revision) and
    max length, the kind of device (a GPU's kernels round otherwise than a CPU's: a file resumed on the other would
    hold scores of two roundings), the batching (a pair padded to another length rounds otherwise too), the input
    and corpus bytes, and the format (2: every listed negative scored; a partial file of format 1 skipped a negative
    repeating a positive, and its scores would be misaligned with the record)."""
    weights = cached_checkpoint_key(model.args.model)
    if model.weights_key is not None and weights != model.weights_key:  # the scores come from the loaded weights
        raise InputChangedError(f"{model.args.model} changed since it was loaded (trained again in place?): the "
                                "scores would be keyed by other weights than those that made them; run again")
    return {"format": 2, "model_weights": weights,
            "max_length": model.args.max_length, "device": torch.device(model.device).type,
            "batching": {"batch_size": args.batch_size, "chunk_queries": args.chunk_queries},
            "input_sha256": file_digest(args.input),
            "corpus_sha256": file_digest(args.corpus) if args.corpus else None}


def _resume(partial: Path, key: dict, chunk_queries: int) -> int:
    """Records of ``partial`` to keep: its whole chunks' when it was written under ``key``, else none (a partial
    file of another key is deleted); the key of the file to be written is in place before it returns."""
    if partial.is_file() and read_key(partial) != key:
        logger.warning("%s was written under another key (model, device, batching or input): scoring from the start",
                       partial)
        partial.unlink()
    write_key(partial, key)
    return _completed(partial, chunk_queries)


def score_file(model, args: ScoreArguments) -> Path:
    qrels, qrels_digest = check_made_from(args.input, args.corpus)  # passed on to the scored file, as checked
    corpus = load_passages(args.corpus) if args.corpus else None
    examples = read_jsonl_examples(args.input, corpus, drop_positive_negatives=False)  # scores align with the file
    records = [json.loads(line) for _, line in iter_lines(args.input)]
    with log_beside(args.output):
        return _score_into(model, args, examples, records, qrels, qrels_digest)


def check_finite(scores: list[float], pairs: list[tuple[str, str]]) -> None:
    """Refuse a score that is nan or inf (a cross-encoder whose weights diverged) before it is written: the file
    was distillation's input, whose loss was then nan."""
    for (query, _), score in zip(pairs, scores):
        if not abs(score) <= FLOAT32_MAX:
            raise ValueError(f"the cross-encoder scored a pair of query {query!r:.60} {score}: its weights do not "
                             "give finite scores (a diverged training?); nothing of this chunk is written")


def _score_into(model, args: ScoreArguments, examples: list, records: list[dict], qrels: Path | None,
                qrels_digest: str | None) -> Path:
    output = Path(args.output)
    partial = output.with_name(output.name + ".partial")
    done = _resume(partial, as_stored(score_key(model, args)), args.chunk_queries)
    if done:
        logger.info("%s: continuing after %d scored queries", partial, done)
    model.eval()
    with open(partial, "a", encoding="utf-8") as out:
        for start in tqdm(range(done, len(examples), args.chunk_queries), desc="cross-encoder scoring", unit="chunk"):
            chunk = examples[start:start + args.chunk_queries]
            pairs = [(e.query, p) for e in chunk for p in e.positives + e.negatives]
            scores = []
            for first in range(0, len(pairs), args.batch_size):
                batch = pairs[first:first + args.batch_size]
                scores += model.score([q for q, _ in batch], [p for _, p in batch])
            check_finite(scores, pairs)
            offset = 0
            for example, record in zip(chunk, records[start:start + args.chunk_queries]):
                middle, end = offset + len(example.positives), offset + len(example.positives) + len(example.negatives)
                record = {**record, "positive_scores": scores[offset:middle], "negative_scores": scores[middle:end]}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                offset = end
            out.flush()
    source = {"qrels_sha256": qrels_digest,
              "qrels_here": os.path.relpath(qrels, output.resolve().parent) if qrels is not None else None}
    # what check_made_from reads, with the scored file's own digest: written before the file is published, so a
    # kill in between leaves an earlier OUTPUT beside a key that is not its own (refused), never without a key
    Path(f"{output}.args.json").unlink(missing_ok=True)  # a mined file's record, which made_from reads before it
    write_key(output, {**read_key(partial), "corpus": args.corpus, **source, "output_sha256": file_digest(partial)})
    os.replace(partial, output)
    key_path(partial).unlink()
    logger.info("%s: %d queries scored", output, len(examples))
    return output
