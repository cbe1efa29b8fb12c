"""Training examples (a query, its positives, its negatives, optionally teacher scores) from the three formats,
and the collator that samples one group per query.

Formats (bad input raises ``DataFormatError`` naming file and line, before any training starts):
- JSONL, one query a line: ``{"query": text, "qid"?: id, "positives": [...], "negatives"?: [...],
  "positive_scores"?: [...], "negative_scores"?: [...]}``; a passage is a document id (looked up in the
  corpus) or an inline ``{"title"?, "text"}``; scores, when present, align with their list. ``mine`` and
  ``rerank score`` write this format.
- qrels: queries file + qrels file + corpus (BEIR ``qrels/train.tsv`` or MS MARCO ``qrels.train.tsv``):
  positives only.
- MS MARCO text triples ``query<TAB>positive<TAB>negative`` (``.tsv``, ``.tsv.gz``): grouped by query text,
  in file order.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from retromae_ir.data.readers import (DataFormatError, iter_beir_corpus, iter_lines, iter_msmarco_collection, joined,
                                      load_qrels, load_topics)
from retromae_ir.runs import FLOAT32_MAX

logger = logging.getLogger(__name__)
# the twin-query rule: what --mask-false-negatives leaves out of a query's pool, and which listed negatives
# with_twin_positives drops (a twin's positive); bumped when it changes (a run or chain stage made under another rule
# is not resumed or reused): 2, the positives of same-text twin queries too; 3, twins are the same text up to
# punctuation too (2026-11-27)
MASKING_VERSION = 3


def twin_rule_acts(mask_false_negatives: bool, train_file: bool) -> bool:
    """Whether the twin-query rule decides anything in a run (so keys it): it sets what masking leaves out, and
    drops a training file's listed negatives that are a twin's positive; from qrels without masking, nothing."""
    return mask_false_negatives or train_file


@dataclass
class TrainExample:
    """One query with passage texts; scores (teacher) align with positives / negatives when given."""

    query: str
    positives: list[str]
    negatives: list[str]
    positive_scores: list[float] | None = None
    negative_scores: list[float] | None = None
    qid: str = ""
    twin_positives: tuple[str, ...] = ()  # positives of other queries of the same text (``with_twin_positives``)

    @property
    def scored(self) -> bool:
        return self.positive_scores is not None and self.negative_scores is not None


def load_passages(path: str | Path) -> dict[str, str]:
    """``{docid: text}`` from a BEIR corpus.jsonl (title + text) or an MS MARCO collection.tsv."""
    path = Path(path)
    docs = iter_msmarco_collection(path) if ".tsv" in path.suffixes else iter_beir_corpus(path)
    return {doc.docid: doc.contents for doc in docs}


def made_from(path: str | Path) -> dict:
    """What a training file was made from, as its maker recorded it (``mine``'s ``PATH.args.json``, ``rerank
    score``'s ``PATH.key.json``); {} for a file made by hand. A record of another file than ``path`` (its
    ``output_sha256``) is refused."""
    from retromae_ir.io import file_digest, key_path

    sidecar = Path(f"{path}.args.json")
    if not sidecar.is_file():
        sidecar = key_path(path)
    try:
        record = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
    except ValueError as error:
        raise DataFormatError(f"{sidecar}: not the JSON record of what {path} was made from ({error})") from None
    if not isinstance(record, dict):
        return {}
    recorded = record.get("output_sha256")  # absent from records written before 2026-11-27
    if recorded is not None and recorded != file_digest(path):
        raise DataFormatError(f"{path} is not the file {sidecar.name} records (replaced since, or its maker was killed "
                              f"between writing the two): make it again, or remove {sidecar.name} to train on it "
                              f"as a file made by hand")
    return record


def recorded_qrels(path: str | Path, record: dict) -> tuple[Path | None, str | None]:
    """Where the training qrels that the file ``path``'s queries were drawn from lie, and their sha256 then, from
    its ``record`` (:func:`made_from`): relative to the file's folder (``qrels_here``), so a copied chain output
    checks its own split; (None, None) unrecorded."""
    here, digest = record.get("qrels_here"), record.get("qrels_sha256")
    if not here or not digest:
        return None, None
    return Path(path).resolve().parent / here, digest


def check_made_from(path: str | Path, corpus: str | Path | None) -> tuple[Path | None, str | None]:
    """Refuse a training file whose passage ids were taken from another corpus than ``corpus`` (the ids would
    resolve to unrelated passages of this one wherever they exist), or with queries that its training qrels no
    longer hold (a dev split carved again with another size or seed into the same file: they are dev queries now,
    and would be trained on). Judgements added or changed for its queries are no reason to refuse. Files without
    a record (made by hand) are not checked, nor qrels no longer where they were recorded. Returns the recorded
    qrels (:func:`recorded_qrels`), for a file made from this one to record in turn."""
    from retromae_ir.io import file_digest

    record = made_from(path)
    recorded = record.get("corpus_sha256")
    if corpus and recorded and recorded != file_digest(corpus):
        source = record.get("corpus") or f"sha256 {recorded[:12]}"
        raise DataFormatError(f"{path}: its passage ids were taken from another corpus ({source}) than --corpus "
                              f"{corpus}: give the corpus it was made from")
    qrels, digest = recorded_qrels(path, record)
    if qrels is None or not qrels.is_file() or file_digest(qrels) == digest:
        return qrels, digest
    judged = set(load_qrels(qrels))
    gone = sorted({str(json.loads(line).get("qid")) for _, line in iter_lines(path)} - judged)
    if gone:
        raise DataFormatError(f"{path}: {len(gone)} of its queries (e.g. {gone[:3]}) are no longer in {qrels}, which "
                              f"changed since it was made (a dev split carved again?): they may be held out now. Mine "
                              f"(and score) again from the current file, or remove {Path(path).name}'s record of what "
                              f"it was made from to train on it anyway")
    return qrels, digest


def _passage(item, corpus: dict[str, str] | None, where: str) -> str:
    if isinstance(item, dict):
        if not isinstance(item.get("text"), str):
            raise DataFormatError(f"{where}: an inline passage needs a string 'text', got {item!r:.80}")
        return joined(item.get("title"), item["text"])
    if not isinstance(item, (str, int)):
        raise DataFormatError(f"{where}: a passage is a document id or {{'title', 'text'}}, got {item!r:.80}")
    if corpus is None:
        raise DataFormatError(f"{where}: document id {item!r} needs --corpus to look up its text")
    try:
        return corpus[str(item)]
    except KeyError:
        raise DataFormatError(f"{where}: document id {item!r} is not in the corpus") from None


def _scores(record: dict, key: str, expected: int, where: str) -> list[float] | None:
    values = record.get(key)
    if values is None:
        return None
    if (not isinstance(values, list) or len(values) != expected
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
        raise DataFormatError(f"{where}: {key!r} must be a list of {expected} numbers aligned with "
                              f"{key.split('_')[0]}s, got {values!r:.80}")
    # JSON reads NaN and Infinity, and 1e39 is inf in the float32 teacher tensor: distillation's loss was then nan
    # from the first step, and the NaN weights were published
    if not all(abs(v) <= FLOAT32_MAX for v in values):
        raise DataFormatError(f"{where}: {key!r} holds a score that is not a finite float32, got {values!r:.80}")
    return [float(v) for v in values]


def read_jsonl_examples(path: str | Path, corpus: dict[str, str] | None = None,
                        drop_positive_negatives: bool = True) -> list[TrainExample]:
    """Examples from the JSONL format described in the module docstring. A negative whose text is one of its
    query's positives is dropped (with its teacher score) unless ``drop_positive_negatives`` is False: the
    cross-encoder's scorer keeps every listed negative, so the scores it writes align with the record's list."""
    path = Path(path)
    examples, dropped = [], 0
    for number, line in iter_lines(path):
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{where}: invalid JSON ({err.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("query"), str) or not record["query"].strip():
            raise DataFormatError(f"{where}: expected an object with a non-empty string 'query'")
        lists = {}
        for key in ("positives", "negatives"):
            value = record.get(key, [])
            if not isinstance(value, list):
                raise DataFormatError(f"{where}: {key!r} must be a list")
            lists[key] = [_passage(item, corpus, f"{where}: {key}") for item in value]
        if not lists["positives"]:
            raise DataFormatError(f"{where}: 'positives' is empty")
        negatives = lists["negatives"]
        negative_scores = _scores(record, "negative_scores", len(negatives), where)
        if drop_positive_negatives:
            negatives, negative_scores, count = _without(negatives, negative_scores, lists["positives"])
            dropped += count
        examples.append(TrainExample(
            record["query"], lists["positives"], negatives,
            _scores(record, "positive_scores", len(lists["positives"]), where), negative_scores,
            str(record.get("qid", ""))))
    _log_dropped(dropped, path)
    return _nonempty(examples, path)


def read_qrels_examples(queries: str | Path, qrels: str | Path, corpus: dict[str, str],
                        min_relevance: int = 1) -> list[TrainExample]:
    """Positives-only examples: every judged query with at least one document labelled >= ``min_relevance``."""
    topics = load_topics(queries)
    examples = []
    for qid, judged in load_qrels(qrels).items():
        positives = sorted(docid for docid, label in judged.items() if label >= min_relevance)
        if not positives:
            continue
        if qid not in topics:
            raise DataFormatError(f"{qrels}: query {qid!r} is judged but not in {queries}")
        missing = [docid for docid in positives if docid not in corpus]
        if missing:
            raise DataFormatError(f"{qrels}: query {qid!r} judges documents {missing[:5]} missing from the corpus")
        examples.append(TrainExample(topics[qid], [corpus[d] for d in positives], [], qid=qid))
    return _nonempty(examples, qrels)


def read_triples(path: str | Path) -> list[TrainExample]:
    """MS MARCO text triples grouped by query; a positive or negative seen twice for a query is kept once. A passage
    is held once however many rows name it (a string a row was a copy of a passage for each: triples.train.small
    repeats MS MARCO's passages over tens of millions of rows)."""
    path = Path(path)
    by_query: dict[str, TrainExample] = {}
    held: dict[str, str] = {}
    for number, line in iter_lines(path):
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise DataFormatError(f"{path}:{number}: expected 'query<TAB>positive<TAB>negative' (3 non-empty "
                                  f"columns), got {len(fields)} column(s): {line[:80]!r}")
        query, positive, negative = (f.strip() for f in fields)
        if not by_query and (query.lower() in ("query-id", "query_id", "qid")  # a qrels header, or numbers only
                             or all(f.isdigit() for f in (query, positive, negative))):
            raise DataFormatError(f"{path}:{number}: {line.strip()[:80]!r} holds ids, not texts: qrels (or MS MARCO's "
                                  f"id triples) train with --queries FILE --qrels FILE --corpus FILE, not --train")
        example = by_query.setdefault(query, TrainExample(query, [], []))
        positive, negative = held.setdefault(positive, positive), held.setdefault(negative, negative)
        if positive not in example.positives:
            example.positives.append(positive)
        if negative not in example.negatives:
            example.negatives.append(negative)
    dropped = 0
    for example in by_query.values():
        example.negatives[:], _, count = _without(example.negatives, None, example.positives)
        dropped += count
    _log_dropped(dropped, path)
    return _nonempty(list(by_query.values()), path)


def _without(negatives: list[str], scores: list[float] | None,
             positives) -> tuple[list[str], list[float] | None, int]:
    """The ``negatives`` whose text is none of ``positives``, their teacher ``scores`` (None: none), and how many
    were dropped."""
    texts = set(positives)
    keep = [i for i, text in enumerate(negatives) if text not in texts]
    return ([negatives[i] for i in keep], None if scores is None else [scores[i] for i in keep],
            len(negatives) - len(keep))


def _log_dropped(dropped: int, path) -> None:
    """Negatives whose text is one of the same query's positives (a hand-made file, or a corpus holding the same
    text under two ids) are dropped: training would push the query away from a passage that answers it."""
    if dropped:
        logger.warning("%s: dropped %d negative(s) whose text is also a positive of the same query", path, dropped)


def _nonempty(examples: list[TrainExample], path) -> list[TrainExample]:
    if not examples:
        raise DataFormatError(f"{path}: no training examples")
    return examples


def with_twin_positives(examples: list[TrainExample], source=None) -> list[TrainExample]:
    """Each example with the positives of the other queries of its text (case, spacing and punctuation aside:
    scifact's train split has such twins, judged differently), which false-negative masking leaves out of its
    in-batch pool too, and without a listed negative that is one of them (with its teacher score; mining never
    lists one, a hand-made file may)."""
    from retromae_ir.data.splits import normalized_query

    judged: dict[str, list[str]] = {}
    for example in examples:
        judged.setdefault(normalized_query(example.query), []).extend(example.positives)
    twinned, dropped = [], 0
    for example in examples:
        twins = tuple(dict.fromkeys(p for p in judged[normalized_query(example.query)] if p not in example.positives))
        negatives, scores, count = _without(example.negatives, example.negative_scores, twins)
        dropped += count
        twinned.append(dataclasses.replace(example, twin_positives=twins, negatives=negatives,
                                           negative_scores=scores))
    if dropped:
        logger.warning("%s: dropped %d negative(s) whose text is a positive of a query of the same text", source,
                       dropped)
    return twinned


def load_examples(data, need_scores: bool = False, in_batch: bool = True) -> list[TrainExample]:
    """The examples ``DataArguments`` point to, checked against the group size (and teacher scores). ``in_batch``:
    the model also learns from in-batch negatives, so positives alone (``--group-size 1``) are a way to train."""
    if data.train is not None:
        check_made_from(data.train, data.corpus)  # before reading a corpus of millions of passages
    corpus = load_passages(data.corpus) if data.corpus else None
    if data.train is None:
        examples = read_qrels_examples(data.queries, data.qrels, corpus, data.min_relevance)
    elif ".tsv" in Path(data.train).suffixes:
        examples = read_triples(data.train)
    else:
        examples = read_jsonl_examples(data.train, corpus)
    source = data.train or data.qrels
    examples = with_twin_positives(examples, source)
    if data.group_size > 1:
        bare = sum(not e.negatives for e in examples)
        if bare:
            raise DataFormatError(f"{source}: {bare} of {len(examples)} queries have no negatives but --group-size "
                                  f"is {data.group_size}: mine negatives (python -m retromae_ir.mine)"
                                  + (" or use --group-size 1 (in-batch negatives only)" if in_batch else ""))
    if need_scores:
        unscored = sum(not e.scored for e in examples)
        if unscored:
            raise DataFormatError(f"{source}: {unscored} of {len(examples)} queries lack teacher scores "
                                  "(positive_scores / negative_scores): score them with "
                                  "python -m retromae_ir.rerank score")
        check_teacher_spread(examples, source)
    logger.info("%s: %d training queries, %.1f positives and %.1f negatives per query", source, len(examples),
                sum(len(e.positives) for e in examples) / len(examples),
                sum(len(e.negatives) for e in examples) / len(examples))
    return examples


def check_teacher_spread(examples: Sequence[TrainExample], source, min_spread: float = 0.1) -> float:
    """Median over queries of (max - min) teacher score; below ``min_spread`` the soft labels are close to uniform
    and distillation pulls every student score together (measured: the short chain's first teacher, whose loss
    stayed at ln 2, spread 0.026 and the student collapsed, docs/finetuning.md), so warn before training."""
    spreads = sorted(max(e.positive_scores + e.negative_scores) - min(e.positive_scores + e.negative_scores)
                     for e in examples)
    median = spreads[len(spreads) // 2]
    if median < min_spread:
        logger.warning("%s: teacher scores span only %.4f per query (median): the soft labels are nearly uniform "
                       "and distillation will pull the student's scores together; train the teacher further, "
                       "lower --teacher-temperature or add --hard-label-weight", source, median)
    return median


def _pick(count: int, population: int, generator: torch.Generator) -> list[int]:
    """``count`` indices into ``population`` items: without replacement when there are enough, else with."""
    if population >= count:
        return torch.randperm(population, generator=generator)[:count].tolist()
    return torch.randint(population, (count,), generator=generator).tolist()


@dataclass(frozen=True)
class Group:
    """One query's sampled group: texts [d+, d-_1 .. d-_{G-1}] and their teacher scores (or None)."""

    query: str
    passages: list[str]
    scores: list[float] | None


def sample_group(example: TrainExample, group_size: int, generator: torch.Generator) -> Group:
    """One positive and ``group_size - 1`` negatives, drawn with ``generator`` (reproducible per micro-batch)."""
    p = _pick(1, len(example.positives), generator)[0]
    negatives = _pick(group_size - 1, len(example.negatives), generator) if group_size > 1 else []
    passages = [example.positives[p]] + [example.negatives[n] for n in negatives]
    scores = None
    if example.scored:
        scores = [example.positive_scores[p]] + [example.negative_scores[n] for n in negatives]
    return Group(example.query, passages, scores)


def text_key(text: str) -> int:
    """A stable 63-bit key of a passage text (the same in every process, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


class GroupCollator:
    """Examples -> padded query / passage batches (``size`` queries, ``size * G`` passages, query-major); with
    ``keys``, each passage's ``text_key`` [size * G] and each query's positives' keys [size, P] (its own and its
    same-text twins', -1 padded), so the loss can leave them out of its pool."""

    def __init__(self, tokenizer, group_size: int, max_query_length: int, max_passage_length: int,
                 teacher: bool = False, keys: bool = False):
        self.tokenizer = tokenizer
        self.group_size = group_size
        self.max_query_length = max_query_length
        self.max_passage_length = max_passage_length
        self.teacher = teacher
        self.keys = keys

    def tokenize(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        return dict(self.tokenizer(texts, truncation=True, max_length=max_length, padding=True,
                                   return_tensors="pt", return_token_type_ids=False))

    def __call__(self, examples: Sequence[TrainExample], generator: torch.Generator) -> dict:
        groups = [sample_group(e, self.group_size, generator) for e in examples]
        queries = self.tokenize([g.query for g in groups], self.max_query_length)
        passages = self.tokenize([p for g in groups for p in g.passages], self.max_passage_length)
        batch = {"size": len(groups),
                 "query_input_ids": queries["input_ids"], "query_attention_mask": queries["attention_mask"],
                 "passage_input_ids": passages["input_ids"], "passage_attention_mask": passages["attention_mask"]}
        if self.teacher:
            batch["teacher"] = torch.tensor([g.scores for g in groups], dtype=torch.float32)
        if self.keys:
            batch["passage_keys"] = torch.tensor([text_key(p) for g in groups for p in g.passages])
            masked = [e.positives + list(e.twin_positives) for e in examples]  # a twin's positive is one too
            width = max(len(texts) for texts in masked)
            batch["positive_keys"] = torch.tensor([[text_key(p) for p in texts] + [-1] * (width - len(texts))
                                                   for texts in masked])
        return batch
