"""MASTER's DOR/GOR side texts as pre-training reads them: generate.py's JSONL, checked against the corpus.

A file holds a record per document, or (``generate --segment-max-length``) a record per pre-training segment,
``"segment": i``, generated from that segment's text. Per-document texts are given to every segment of their
document; per-segment texts only to their segment, and only when pre-training cuts the corpus as generation did
(same tokenizer and max length, recorded in the file's key).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from retromae_ir.data.readers import DataFormatError, is_json_id
from retromae_ir.io import read_key
from retromae_ir.pretrain.collate import Segment

log = logging.getLogger(__name__)


class SideTextError(ValueError):
    """A side-text file that does not fit the corpus or the pre-training run."""


@dataclass
class SideTexts:
    """``{(docid, segment index or None): {"dor": queries joined by [SEP], "gor": continuation}}``."""

    texts: dict[tuple[str, int | None], dict[str, str]]
    per_segment: bool = False

    def of(self, segment: Segment) -> dict[str, str]:
        return self.texts.get((segment.docid, segment.index if self.per_segment else None), {})

    def has(self, task: str) -> bool:
        return any(task in entry for entry in self.texts.values())

    def __len__(self) -> int:
        return len(self.texts)

    def warn_shared(self, segments: Sequence[Segment]) -> None:
        """Per-document texts over documents cut into several segments: each segment rebuilds texts generated
        from the whole document (MASTER pairs a passage with its own); say how many and what to do."""
        if self.per_segment:
            return
        counts: dict[str, int] = {}
        for segment in segments:
            counts[segment.docid] = counts.get(segment.docid, 0) + 1
        shared = [docid for docid, n in counts.items() if n > 1 and (docid, None) in self.texts]
        if shared:
            log.warning("side texts: %d documents with texts span more than one segment (first: %r), and each of "
                        "their segments is trained to rebuild the whole document's texts; generate them per segment "
                        "(python -m retromae_ir.pretrain.generate --segment-max-length = this --max-length) for "
                        "MASTER's pairing", len(shared), shared[0])


def is_segment(value) -> bool:
    """A record's ``segment``: None (a record of the whole document) or a segment index."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def load_side_texts(path: str | Path, sep_token: str) -> SideTexts:
    """The texts of generate.py's JSONL; a malformed line, or a file mixing records per document and per segment,
    is refused."""
    path = Path(path)
    if not path.is_file():
        raise SideTextError(f"side-text file not found: {path}")
    texts: dict[tuple[str, int | None], dict[str, str]] = {}
    lines: dict[tuple[str, int | None], int] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                unit, entry = _side_entry(line, sep_token)
                if entry is None:
                    raise DataFormatError(f"{path}:{number}: expected {{\"id\": str, [\"segment\": int,] \"queries\": "
                                          f"[str], \"continuation\": str}} (generate.py output)")
                if unit in lines:  # the last record won, the first one's texts lost (1 and "1" are one id)
                    raise DataFormatError(f"{path}:{number}: a second record of id {unit[0]!r}"
                                          f"{'' if unit[1] is None else f', segment {unit[1]}'} (the first on line "
                                          f"{lines[unit]}); one record a document or segment")
                lines[unit] = number
                texts[unit] = entry
    kinds = {segment is None for _, segment in texts}
    if len(kinds) > 1:
        raise DataFormatError(f"{path}: mixes records per document and per segment (\"segment\"); generate it again "
                              f"with one setting")
    return SideTexts(texts, per_segment=kinds == {False})


def _side_entry(line: str, sep_token: str) -> tuple[tuple[str, int | None], dict[str, str] | None]:
    """One side-text record as ((docid, segment), {task: text}), or (_, None) when it is malformed."""
    try:
        record = json.loads(line)
    except ValueError:
        return ("", None), None
    if not isinstance(record, dict):
        return ("", None), None
    queries, continuation, segment = record.get("queries", []), record.get("continuation", ""), record.get("segment")
    docid = record.get("id")
    if (not is_json_id(docid) or not isinstance(continuation, str)
            or not isinstance(queries, list)
            or not all(isinstance(q, str) for q in queries)
            or not is_segment(segment)):
        return ("", None), None
    entry = {}
    if any(q.strip() for q in queries):
        entry["dor"] = f" {sep_token} ".join(q.strip() for q in queries if q.strip())
    if continuation.strip():
        entry["gor"] = continuation.strip()
    return (str(docid), segment), entry


def check_side_texts(path: str | Path, corpus: str | Path, model: str | None = None,
                     max_length: int | None = None) -> None:
    """Refuse side texts generated from other passages than ``corpus`` holds under their ids (the corpus edited
    since, or another corpus whose ids coincide, as line numbers do): DOR and GOR would teach a passage to rebuild
    another one's queries and continuation. Each generate.py record names its document by ``text_sha256``; records
    of ids the corpus lacks are never looked up; a record without a digest cannot be checked (a warning counts them).
    Records none of whose ids the corpus has (another id scheme: BEIR ids against a plain text file's line
    numbers) are refused too: every DOR/GOR target would be empty; a partial cover is counted in a warning.
    Per-segment texts are refused unless they were cut by ``model``'s tokenizer at ``max_length``: segment i
    would be another span of its document."""
    from retromae_ir.pretrain.data import iter_documents
    from retromae_ir.pretrain.generate import text_digest

    if not Path(path).is_file():
        raise SideTextError(f"side-text file not found: {path}")
    recorded, per_segment = {}, False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line) if line.strip() else None
            except ValueError:
                continue  # load_side_texts names the malformed line
            if isinstance(record, dict) and "id" in record:
                recorded[str(record["id"])] = record.get("text_sha256")
                per_segment = per_segment or record.get("segment") is not None  # as load_side_texts reads it
    if per_segment:
        _check_segmenting(path, model, max_length)
    stale, unchecked, covered, documents, first = [], 0, 0, 0, None
    for docid, text in iter_documents(corpus):
        if per_segment and not text.strip():
            continue  # no token, no segment: nothing to pair with texts
        documents += 1
        if first is None:
            first = docid
        if docid in recorded:
            covered += 1
            if recorded[docid] is None:
                unchecked += 1
            elif recorded[docid] != text_digest(text):
                stale.append(docid)
    if stale:
        raise SideTextError(
            f"{path}: {len(stale)} side-text record(s) were generated from other text than {corpus} holds under "
            f"their id (first: {stale[0]!r}); DOR/GOR would train on another passage's queries. Generate them again "
            f"(python -m retromae_ir.pretrain.generate --corpus {corpus} --output {path} with the options that made "
            f"it: unchanged records are kept)")
    if recorded and not covered:
        raise SideTextError(
            f"{path}: none of its {len(recorded)} record ids (first: {next(iter(recorded))!r}) is a document id of "
            f"{corpus} (first: {first!r}); DOR/GOR would train on empty texts. Generate the side texts from this "
            f"corpus (python -m retromae_ir.pretrain.generate --corpus {corpus} --output {path})")
    if covered < documents:
        log.warning("%s: side texts for %d of the %d documents of %s; DOR/GOR learn nothing from the other %d",
                    path, covered, documents, corpus, documents - covered)
    if unchecked:
        log.warning("%s: %d side-text record(s) carry no text_sha256 (not written by retromae_ir.pretrain.generate): "
                    "not checked against %s", path, unchecked, corpus)


def _check_segmenting(path: str | Path, model: str | None, max_length: int | None) -> None:
    """Per-segment texts fit a run only when it cuts segments as generation did (its key's ``segments``)."""
    from retromae_ir.pretrain.generate import load_segmenter

    made = (read_key(Path(path)) or {}).get("segments")
    if made is None:
        raise SideTextError(f"{path}: per-segment side texts without a key naming how the segments were cut "
                            f"({Path(path).name}.key.json, written by retromae_ir.pretrain.generate beside it): "
                            f"segment i may be another span than this run's; copy the key with the file, or generate "
                            f"again")
    if model is None or max_length is None:
        raise SideTextError(f"{path}: per-segment side texts need the run's model and max length to be checked")
    run = load_segmenter(model, max_length).settings()
    if made != run:
        other = ("another tokenizer" if made.get("tokenizer") != run["tokenizer"] else
                 f"--segment-max-length {made.get('max_length')}")
        raise SideTextError(
            f"{path}: its texts were generated per segment cut by {other}, and this run cuts its segments with the "
            f"model's tokenizer at --max-length {max_length}: segment i would rebuild another span's texts. Generate "
            f"them with --segment-tokenizer MODEL --segment-max-length {max_length}")
