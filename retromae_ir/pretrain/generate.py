"""MASTER side texts: doc2query queries (DOR) and GPT-2 continuations (GOR) for every passage of a corpus.

The MASTER authors released the generated texts but not the generation step; this module is that step.
``python -m retromae_ir.pretrain.generate --corpus corpus.jsonl --output side.jsonl`` writes one JSON line
per document, ``{"id": ..., "queries": [...], "continuation": "..."}`` (a key is left out when its
generator is switched off with ``none``), which ``--master-side-texts`` of pre-training reads. With
``--segment-max-length N`` it writes one line per pre-training segment instead (``"segment": i``), generated
from the text of that segment as pre-training at ``--max-length N`` cuts it (MASTER pairs a passage with texts
generated from that passage; a document longer than one segment otherwise gives every segment its texts).

Generation is long, so it is resumable: finished batches are appended (flushed and fsynced) to
``OUTPUT.partial``; a rerun skips the documents (or segments) already there, dropping a torn last line, and the
partial file is renamed onto OUTPUT only when the whole corpus is done, so OUTPUT is always complete and
duplicate-free.
A partial or finished file is continued only under the same generators, options and seed (``.key.json`` beside
each), and a record only while its passage is unchanged (``text_sha256``); the rest is generated again.
Sampling is seeded per batch from (seed, first id of the batch), so a resumed run writes the same texts as
an uninterrupted one with the same batch size, unless the kill tore a batch's write: its complete records are
kept, and the rest of that batch is sampled in other batches (valid samples, not the same ones).
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import logging
import os
import shutil
import sys
import zlib
from dataclasses import dataclass, fields as dataclass_fields, is_dataclass
from itertools import islice
from pathlib import Path
from typing import Iterable, Iterator, Protocol, Sequence

import torch
from tqdm import tqdm

from retromae_ir.cli import add_debug_flag, check_at_least_one, command
from retromae_ir.io import as_stored, atomic_write, checkpoint_key, claim_output, key_path, read_key, write_key
from retromae_ir.packaged import default_model
from retromae_ir.pretrain.data import iter_documents, segment_texts
from retromae_ir.pretrain.side_texts import is_segment

LOG = logging.getLogger(__name__)
DEFAULT_DOC2QUERY = "castorini/doc2query-t5-base-msmarco"
DEFAULT_GPT2 = "gpt2"


class SideTextGenerator(Protocol):
    """Maps a batch of passages to one JSON value per passage, stored under ``key``."""

    key: str

    def __call__(self, passages: Sequence[str]) -> list: ...


def encode(tokenizer, passages: Sequence[str], max_length: int, device) -> dict[str, torch.Tensor]:
    """Padded ids and attention mask only (a BERT-style tokenizer's token_type_ids would upset generate)."""
    batch = tokenizer(list(passages), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}


@dataclass
class QueryGenerator:
    """doc2query: a seq2seq model samples ``num_queries`` queries per passage (top-k sampling)."""

    model: torch.nn.Module
    tokenizer: object
    num_queries: int = 10
    top_k: int = 10
    max_source_length: int = 512
    max_query_length: int = 64
    key: str = "queries"

    @torch.no_grad()
    def __call__(self, passages: Sequence[str]) -> list[list[str]]:
        inputs = encode(self.tokenizer, passages, self.max_source_length, self.model.device)
        out = self.model.generate(**inputs, do_sample=True, top_k=self.top_k, max_length=self.max_query_length,
                                  num_return_sequences=self.num_queries)
        texts = [t.strip() for t in self.tokenizer.batch_decode(out, skip_special_tokens=True)]
        return [texts[i * self.num_queries:(i + 1) * self.num_queries] for i in range(len(passages))]


@dataclass
class ContinuationGenerator:
    """GPT-2: a causal LM continues the passage (its last ``max_prompt_length`` tokens are the prompt)."""

    model: torch.nn.Module
    tokenizer: object
    top_k: int = 50
    max_prompt_length: int = 256
    max_new_tokens: int = 128
    key: str = "continuation"

    def __post_init__(self):
        # Batched decoder-only generation pads on the left and keeps the end of a long passage.
        self.tokenizer.padding_side = "left"
        self.tokenizer.truncation_side = "left"
        if self.tokenizer.pad_token is None:  # GPT-2 has no pad token; its eos is the usual stand-in
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @torch.no_grad()
    def __call__(self, passages: Sequence[str]) -> list[str]:
        inputs = encode(self.tokenizer, passages, self.max_prompt_length, self.model.device)
        out = self.model.generate(**inputs, do_sample=True, top_k=self.top_k, max_new_tokens=self.max_new_tokens,
                                  pad_token_id=self.tokenizer.pad_token_id)
        new_tokens = out[:, inputs["input_ids"].shape[1]:]
        return [t.strip() for t in self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]


def load_query_generator(name: str, device: str, **options) -> QueryGenerator:
    """A Hugging Face seq2seq model by hub name or local path (e.g. castorini/doc2query-t5-base-msmarco)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(name).to(device).eval()
    return QueryGenerator(model, AutoTokenizer.from_pretrained(name), **options)


def load_continuation_generator(name: str, device: str, **options) -> ContinuationGenerator:
    """A Hugging Face causal LM by hub name or local path (e.g. gpt2)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(name).to(device).eval()
    return ContinuationGenerator(model, AutoTokenizer.from_pretrained(name), **options)


def partial_path(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def text_digest(text: str) -> str:
    """What a record was generated from: a record whose passage changed since is generated again."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def generator_settings(generator) -> dict:
    """A generator's model (by name, and a local folder's weight and tokenizer files by digest: a model trained
    again in place keeps its path) and options (a dataclass's fields but the model objects), for the resume key."""
    if not is_dataclass(generator):
        return {"class": type(generator).__name__, "key": generator.key}
    options = {f.name: getattr(generator, f.name) for f in dataclass_fields(generator)
               if f.name not in ("model", "tokenizer")}
    name = getattr(generator.model, "name_or_path", None)
    weights = {"weights": checkpoint_key(name)} if name and Path(name).is_dir() else {}  # hub names: keys as before
    return {"class": type(generator).__name__, "model": name, **weights, **options}


Unit = tuple[str, "int | None"]  # (document id, segment index; None for a record of the whole document)


def unit_of(record: dict) -> Unit:
    """What a record was generated from: a document, or one of its segments (a TypeError for another segment)."""
    segment = record.get("segment")
    if not is_segment(segment):
        raise TypeError(f"segment {segment!r} is not a segment index")
    return str(record["id"]), segment


@dataclass
class Segmenter:
    """Cuts a document into the segments pre-training makes of it (the model's tokenizer, ``max_length``)."""

    tokenizer: object
    max_length: int

    def settings(self) -> dict:
        from retromae_ir.pretrain.corpus_stats import tokenizer_fingerprint

        return {"tokenizer": tokenizer_fingerprint(self.tokenizer), "max_length": self.max_length}

    def __call__(self, text: str) -> list[str]:
        return segment_texts(text, self.tokenizer, self.max_length)


def load_segmenter(model: str | None, max_length: int | None) -> Segmenter | None:
    """The segmenter of pre-training at ``max_length`` with ``model``'s tokenizer (the packaged MiniLM when None);
    None without a max length (a record per document)."""
    if max_length is None:
        return None
    if max_length < 3:
        raise ValueError(f"--segment-max-length {max_length} leaves no room for text between [CLS] and [SEP]")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model or default_model())
    if not tokenizer.is_fast:
        raise ValueError(f"--segment-tokenizer {model}: {type(tokenizer).__name__} is no fast tokenizer, and cutting "
                         f"text into segments needs its character offsets")
    return Segmenter(tokenizer, max_length)


def read_done(path: Path) -> tuple[dict[Unit, str | None], set[Unit]]:
    """``{unit: text digest}`` of the complete records in ``path`` (a later record of a unit replaces an earlier
    one: the passage changed and was generated again) and the units that occur more than once; a torn or
    undecodable tail is cut off the file."""
    if not path.exists():
        return {}, set()
    done, repeated, good_end = {}, set(), 0
    with open(path, "rb+") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
                unit = unit_of(record)
            except (ValueError, KeyError, TypeError, AttributeError):
                break
            if unit in done:
                repeated.add(unit)
            done[unit] = record.get("text_sha256")
            good_end += len(line)
        if good_end < handle.seek(0, os.SEEK_END):
            LOG.warning("dropping a torn record at the end of %s (byte %d)", path, good_end)
            handle.truncate(good_end)
    return done, repeated


def batch_seed(seed: int, first: Unit) -> int:
    """A stable per-batch seed, so a resumed run samples what the uninterrupted run would have."""
    docid, segment = first
    name = docid if segment is None else f"{docid}\t{segment}"
    return zlib.crc32(f"{seed}\t{name}".encode())


class Pending:
    """The ``(unit, text, digest)`` triples still to generate, in corpus order and in batches: documents (or their
    segments, with a ``segmenter``) without a record, or whose record was generated from another text of the
    document (``replaced``; ``digest`` is the whole document's). ``prune`` then drops the records no longer
    wanted: units gone from the corpus, and all but the last record of a unit generated again (now, or by an
    interrupted run before). An id repeated in the corpus is an error."""

    def __init__(self, docs: Iterable[tuple[str, str]], done: dict[Unit, str | None], repeated: set[Unit],
                 segmenter: Segmenter | None = None):
        self.docs, self.done, self.segmenter = docs, done, segmenter
        self.documents: set[str] = set()
        self.seen: set[Unit] = set()
        self.replaced: set[Unit] = set(repeated)

    def units(self, docid: str, text: str) -> list[tuple[Unit, str]]:
        if self.segmenter is None:
            return [((docid, None), text)]
        return [((docid, index), span) for index, span in enumerate(self.segmenter(text))]

    def batches(self, batch_size: int) -> Iterator[list[tuple[Unit, str, str]]]:
        def todo():
            for docid, text in self.docs:
                if docid in self.documents:
                    raise ValueError(f"document id {docid!r} occurs twice in the corpus")
                self.documents.add(docid)
                digest = text_digest(text)
                for unit, span in self.units(docid, text):
                    self.seen.add(unit)
                    if self.done.get(unit, digest) != digest:
                        self.replaced.add(unit)
                    if self.done.get(unit) != digest:
                        yield unit, span, digest

        stream = todo()
        while batch := list(islice(stream, batch_size)):
            yield batch

    def prune(self, path: Path) -> None:
        """Rewrite ``path`` without the records of units gone from the corpus and keeping only the last record of
        each unit generated again."""
        gone = set(self.done) - self.seen
        if not gone and not self.replaced:
            return
        LOG.info("%s: dropping the records of %d passages no longer in the corpus and the older records of %d "
                 "passages generated again", path, len(gone), len(self.replaced))
        last = {}
        with open(path, encoding="utf-8") as source:
            for number, line in enumerate(source):
                unit = unit_of(json.loads(line))
                if unit in self.replaced:
                    last[unit] = number
        with open(path, encoding="utf-8") as source, atomic_write(path) as out:
            for number, line in enumerate(source):
                unit = unit_of(json.loads(line))
                if unit not in gone and last.get(unit, number) == number:
                    out.write(line)


def generate_side_texts(docs: Iterable[tuple[str, str]], output: str | os.PathLike,
                        generators: Sequence[SideTextGenerator], batch_size: int = 16, seed: int = 42,
                        total: int | None = None, segmenter: Segmenter | None = None) -> int:
    """Generate the records missing from ``output`` and publish it once complete; returns how many were written.
    Continues only a file made under the same generators, seed and segmenting (``OUTPUT.key.json``,
    ``OUTPUT.partial.key.json``; one of other settings is refused, never deleted), and a record only while its
    document is unchanged (each record's ``text_sha256``); anything else is generated again. With a ``segmenter``
    a record is made for each segment of a document (``"segment": i``) from that segment's text."""
    if not generators:
        raise ValueError("no generator selected: give a doc2query model, a GPT-2 model or both")
    with claim_output(output):  # one writer: a second one appended the same records, then into the published file
        return _generate(docs, Path(output), generators, batch_size, seed, total, segmenter)


def _generate(docs: Iterable[tuple[str, str]], output: Path, generators: Sequence[SideTextGenerator],
              batch_size: int, seed: int, total: int | None, segmenter: Segmenter | None) -> int:
    """:func:`generate_side_texts` with ``output``'s lock held."""
    partial = partial_path(output)
    if not partial.exists() and output.exists() and not key_path(output).exists() and key_path(partial).exists():
        # killed between publishing's two renames: OUTPUT is the finished file and its key is the partial's
        os.replace(key_path(partial), key_path(output))
    key = as_stored({"seed": seed, "generators": [generator_settings(g) for g in generators],
                     **({"segments": segmenter.settings()} if segmenter is not None else {})})
    continued = partial if partial.exists() else output if output.exists() else None
    if continued is not None:
        _check_key(continued, key)  # generated texts can be days of GPU time: refused, never deleted
        if continued == output:
            shutil.copyfile(output, partial)  # continue a finished file when the corpus has grown or changed
    partial.parent.mkdir(parents=True, exist_ok=True)
    write_key(partial, key)
    done, repeated = read_done(partial)
    LOG.info("%d records already generated in %s", len(done), partial)
    pending, written = Pending(docs, done, repeated, segmenter), 0
    unit = "doc" if segmenter is None else "segment"
    with open(partial, "a", encoding="utf-8") as sink, tqdm(total=total if segmenter is None else None,
                                                              initial=len(done), unit=unit, desc="generate") as bar:
        for batch in pending.batches(batch_size):
            torch.manual_seed(batch_seed(seed, batch[0][0]))
            records = [{"id": docid, **({} if segment is None else {"segment": segment}), "text_sha256": digest}
                       for (docid, segment), _, digest in batch]
            passages = [text for _, text, _ in batch]
            for generator in generators:
                for record, value in zip(records, generator(passages)):
                    record[generator.key] = value
            sink.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            sink.flush()
            os.fsync(sink.fileno())
            written += len(records)
            bar.update(len(records))
    pending.prune(partial)
    key_path(output).unlink(missing_ok=True)  # between the two renames OUTPUT has no key: never continued from
    os.replace(partial, output)
    os.replace(key_path(partial), key_path(output))
    LOG.info("wrote %d new records; %s holds %d (%d documents)", written, output, len(pending.seen),
             len(pending.documents))
    return written


def _check_key(path: Path, key: dict) -> None:
    """Refuse to continue ``path`` unless it was generated under ``key`` (generators, options, seed)."""
    recorded = read_key(path)
    if recorded == key:
        return
    how = ("by an older retromae_ir (no key file), so its settings are unknown" if recorded is None else
           f"with other settings ({json.dumps(recorded, sort_keys=True)}; this run: {json.dumps(key, sort_keys=True)})")
    raise ValueError(f"{path} was generated {how}: run with the same settings to continue it, or move it away "
                     f"to generate afresh")


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def build_parser() -> argparse.ArgumentParser:
    p = add_debug_flag(argparse.ArgumentParser(prog="python -m retromae_ir.pretrain.generate",
                                               description=__doc__.split("\n\n")[0]))
    p.add_argument("--corpus", required=True, type=Path,
                   help="the pre-training corpus (BEIR corpus.jsonl, {text} JSONL or plain text): same doc ids")
    p.add_argument("--output", required=True, type=Path, help="JSONL of {id, queries, continuation}")
    p.add_argument("--doc2query-model", default=DEFAULT_DOC2QUERY, help="seq2seq model name or path; 'none' skips DOR")
    p.add_argument("--gpt2-model", default=DEFAULT_GPT2, help="causal LM name or path; 'none' skips GOR")
    p.add_argument("--num-queries", type=int, default=10)
    p.add_argument("--query-top-k", type=int, default=10)
    p.add_argument("--max-source-length", type=int, default=512, help="passage tokens given to doc2query")
    p.add_argument("--max-query-length", type=int, default=64)
    p.add_argument("--gpt2-top-k", type=int, default=50)
    p.add_argument("--max-prompt-length", type=int, default=256, help="last passage tokens given to GPT-2")
    p.add_argument("--max-new-tokens", type=int, default=128, help="length of the GPT-2 continuation")
    p.add_argument("--segment-max-length", type=int,
                   help="a record per pre-training segment at this --max-length (the value pre-training runs with), "
                        "generated from that segment's text; default: a record per document")
    p.add_argument("--segment-tokenizer", default=None,
                   help="the model to be pre-trained, whose tokenizer cuts the segments (default: the packaged "
                        "MiniLM, pre-training's default model); only with --segment-max-length")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--log-file", type=Path, help="default: OUTPUT.log")
    return p


def setup_logging(log_file: Path) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=[logging.FileHandler(log_file), logging.StreamHandler()], force=True)


@command
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # --batch-size 0 batched nothing: every record counted as gone and pruned, an empty output published (exit 0)
    # (the top-k's are not sizes: 0 samples without a top-k filter, as transformers' generate reads it)
    check_at_least_one(args, "batch_size", "num_queries", "max_source_length", "max_query_length",
                       "max_prompt_length", "max_new_tokens", "segment_max_length")
    if not args.corpus.is_file():
        raise FileNotFoundError(errno.ENOENT, "corpus not found", str(args.corpus))
    if args.doc2query_model.lower() == "none" and args.gpt2_model.lower() == "none":
        raise ValueError("no generator selected: give a doc2query model, a GPT-2 model or both")
    for model, flags in GENERATOR_FLAGS.items():  # a switched-off generator's options were logged as if used
        changed = [flag for flag in flags if getattr(args, flag) != parser.get_default(flag)]
        if changed and getattr(args, model).lower() == "none":
            raise ValueError(f"{', '.join('--' + f.replace('_', '-') for f in changed)}: options of "
                             f"--{model.replace('_', '-')}, which is none")
    if args.segment_tokenizer is not None and args.segment_max_length is None:
        raise ValueError("--segment-tokenizer cuts segments at --segment-max-length: give both, or neither for a "
                         "record per document")
    segmenter = load_segmenter(args.segment_tokenizer, args.segment_max_length)
    with claim_output(args.output):  # before the models load and the log opens: a second writer stops at once
        setup_logging(args.log_file or args.output.with_name(args.output.name + ".log"))
        LOG.info("arguments: %s", vars(args))
        generators = load_generators(args)
        _generate(iter_documents(args.corpus), args.output, generators, args.batch_size, args.seed,
                  count_lines(args.corpus), segmenter)
    return 0


GENERATOR_FLAGS = {"doc2query_model": ("num_queries", "query_top_k", "max_source_length", "max_query_length"),
                   "gpt2_model": ("gpt2_top_k", "max_prompt_length", "max_new_tokens")}


def load_generators(args: argparse.Namespace) -> list[SideTextGenerator]:
    """The generators ``args`` select (doc2query, GPT-2 or both)."""
    generators: list[SideTextGenerator] = []
    if args.doc2query_model.lower() != "none":
        generators.append(load_query_generator(
            args.doc2query_model, args.device, num_queries=args.num_queries, top_k=args.query_top_k,
            max_source_length=args.max_source_length, max_query_length=args.max_query_length))
    if args.gpt2_model.lower() != "none":
        generators.append(load_continuation_generator(
            args.gpt2_model, args.device, top_k=args.gpt2_top_k, max_prompt_length=args.max_prompt_length,
            max_new_tokens=args.max_new_tokens))
    return generators


if __name__ == "__main__":
    sys.exit(main())
