"""MASTER: one deep encoder, five shallow task decoders (MASTER section 4, loss Eq. 8).

Every decoder is ``--master-decoder-layers`` (default 2) plain BERT layers with bidirectional self-attention.
Its input is the encoder's [CLS] vector h followed by the embeddings (the encoder's embedding layer) of the
decoder's own masked text; predictions go through the encoder's tied MLM head, so embeddings and head are
shared with the encoder. Decoders are freshly initialised (``random``, default) or copies of the encoder's
last layers (``copy``). The tasks (``--master-tasks``, any subset, for the paper's ablations):

* MKP: the decoder recovers the passage with keyword-weighted whole-word masking (keywords.py).
* CMP: a second encoder pass with its own whole-word mask S; the decoder masks exactly the ordinary tokens
  NOT in S (it sees the words the encoder lost, and must recover the ones the encoder saw).
* NPR: the decoder recovers the neighbouring span with keyword masking, from h of the span before it:
  ``segments`` pairs segment i with segment i+1 of the same document (h from the main encoder pass);
  ``halves`` (the authors' code) encodes the first half of a segment in its own pass, the second is the target.
* DOR / GOR: the decoder recovers the doc2query queries (joined with [SEP]) / the GPT-2 continuation of the
  document or of the segment (side texts from generate.py, side_texts.py), whole-word random masking. Off when
  the texts are absent.

A decoder's masked words are hidden 80/10/10 like BERT's ([MASK], a random token, unchanged: the authors' code;
``--master-decoder-corruption mask``: all [MASK]). Loss = sum of the encoder MLM losses (main pass, CMP pass, NPR
pass in ``halves`` mode) and the decoder losses, each the mean cross-entropy over its masked tokens (Eq. 8 with
per-task token means, as in the authors' code). A row without the text a task needs adds nothing to it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.bert.modeling_bert import BertLayer

from retromae_ir.pretrain.arguments import MaskingArguments
from retromae_ir.pretrain.base import EncoderOutput, PretrainModel, token_cross_entropy
from retromae_ir.pretrain.collate import EncoderMLMCollator, Segment, TokenTables, pad_batch
from retromae_ir.pretrain.data import SegmentExamples, document_runs
from retromae_ir.pretrain.keywords import (KEYWORD_MASKING_VERSION, WEIGHTINGS, CorpusStats, KeywordMasker,
                                           KeywordWeighting)
from retromae_ir.pretrain.masking import IGNORE_INDEX, mlm_corrupt, sample_whole_words
from retromae_ir.pretrain.side_texts import SideTexts, check_side_texts, load_side_texts

log = logging.getLogger(__name__)

TASKS = ("mkp", "cmp", "npr", "dor", "gor")
SIDE_KEYS = {"dor": "queries", "gor": "continuation"}


class MasterSetupError(ValueError):
    """Inconsistent MASTER options (unknown task, missing corpus statistics or side texts)."""


@dataclass
class MasterArguments:
    master_tasks: str = field(default="mkp,cmp,npr,dor,gor", metadata={
        "help": "comma-separated decoder tasks out of mkp,cmp,npr,dor,gor (ablations: leave some out)"})
    master_corpus_stats: str | None = field(default=None, metadata={
        "help": "word statistics for MKP/NPR keyword masking (python -m retromae_ir.pretrain.corpus_stats --output "
                "FILE). Default: counted from --corpus on first use and reused after, found by a digest of the "
                "corpus and the tokenizer beside the corpus or under $RETROMAE_IR_CACHE/corpus_stats"})
    master_keyword_weighting: str = field(default="icf", metadata={
        "help": "icf: 1/corpus frequency (authors' code); tfidf: tf x smoothed idf (paper's wording)"})
    master_side_texts: str | None = field(default=None, metadata={
        "help": "JSONL {id, queries, continuation} from python -m retromae_ir.pretrain.generate; "
                "without it DOR and GOR are off"})
    master_side_max_length: int = field(default=128, metadata={"help": "tokens of a DOR/GOR decoder text"})
    master_npr_pairs: str = field(default="segments", metadata={
        "help": "segments: segment i -> segment i+1 of a document; halves: first -> second half of a segment"})
    master_decoder_layers: int = field(default=2, metadata={"help": "BERT layers per decoder"})
    master_decoder_init: str = field(default="random", metadata={
        "help": "random: fresh decoder layers; copy: copies of the encoder's last layers"})
    master_decoder_corruption: str = field(default="bert", metadata={
        "help": "how the decoders' texts hide their masked words. bert: 80%% [MASK], 10%% a random token, 10%% "
                "unchanged (the authors' code); mask: all [MASK] (the paper's 'masked text')"})
    master_cmp_mask_ratio: float = field(default=0.5, metadata={
        "help": "CMP: the share of words its encoder pass masks; its decoder masks the rest. 0.5: the authors' "
                "code (complementary masks cannot give both the paper's alpha and its beta >= 0.5)"})


@dataclass(frozen=True)
class MasterExample:
    """A training segment and its NPR pair: ``npr_source`` is None when the segment itself is the source."""

    segment: Segment
    npr_source: tuple[int, ...] | None = None
    npr_target: tuple[int, ...] | None = None


class MasterExamples(SegmentExamples):
    """Each segment with its NPR pair (``pairs``: "segments", the next segment of its document; "halves", its own
    two halves; None, no pair)."""

    def __init__(self, segments: Sequence[Segment], pairs: str | None, continuation: torch.Tensor):
        super().__init__(segments)
        self.pairs, self.continuation = pairs, continuation
        self.run_of = document_runs(segments)[0] if pairs == "segments" else None

    def example(self, row: int, segment: Segment) -> MasterExample:
        if self.pairs == "halves":
            return MasterExample(segment, *(split_halves(segment.input_ids, self.continuation) or (None, None)))
        if self.pairs == "segments" and self._has_next(row):
            return MasterExample(segment, None, self.segments[row + 1].input_ids)
        return MasterExample(segment)

    def paired(self, row: int) -> bool:
        """Whether ``row`` has an NPR target (without building its example when the pairs are segments)."""
        if self.pairs == "segments":
            return self._has_next(row)
        return self.pairs == "halves" and self[row].npr_target is not None

    def _has_next(self, row: int) -> bool:
        """The next row is the same document's next segment (a document's segments are consecutive rows, in
        order: ``data.document_runs``)."""
        return row + 1 < len(self) and self.run_of[row + 1] == self.run_of[row]


def check_arguments(args: MasterArguments) -> None:
    """Refuse inconsistent options (cheap: the command runs it before counting any corpus statistics), and inputs
    that no task of ``--master-tasks`` reads (accepted and ignored, the run looked as if it used them)."""
    tasks = parse_tasks(args.master_tasks)
    if args.master_npr_pairs not in ("segments", "halves"):
        raise MasterSetupError(f"--master-npr-pairs must be segments or halves, got {args.master_npr_pairs!r}")
    if args.master_decoder_init not in ("random", "copy"):
        raise MasterSetupError(f"--master-decoder-init must be random or copy, got {args.master_decoder_init!r}")
    if args.master_decoder_corruption not in ("bert", "mask"):
        raise MasterSetupError(f"--master-decoder-corruption must be bert or mask, got "
                               f"{args.master_decoder_corruption!r}")
    if args.master_side_max_length < 3:
        raise MasterSetupError(f"--master-side-max-length {args.master_side_max_length} leaves no room for text "
                               f"between [CLS] and [SEP]")
    if not 0.0 < args.master_cmp_mask_ratio < 1.0:
        raise MasterSetupError(f"--master-cmp-mask-ratio must be in (0, 1), got {args.master_cmp_mask_ratio}")
    if args.master_keyword_weighting not in WEIGHTINGS:
        raise MasterSetupError(f"--master-keyword-weighting must be one of {', '.join(WEIGHTINGS)}, got "
                               f"{args.master_keyword_weighting!r}")
    check_read(args, tasks)


READ_BY = {  # a MASTER option -> the tasks that read it
    "master_corpus_stats": ("mkp", "npr"),
    "master_keyword_weighting": ("mkp", "npr"),
    "master_npr_pairs": ("npr",),
    "master_side_texts": ("dor", "gor"),
    "master_side_max_length": ("dor", "gor"),
    "master_cmp_mask_ratio": ("cmp",),
}
DECODER_RATIO_READERS = ("mkp", "npr", "dor", "gor")  # CMP's decoder masks what its encoder pass left


def check_read(args: MasterArguments, tasks: Sequence[str]) -> None:
    """Refuse an option set away from its default when no task that reads it is on (DOR and GOR are off without
    side texts): it was accepted, ignored, and written into the run's identity as if used."""
    on = set(tasks) - (set() if args.master_side_texts else {"dor", "gor"})
    defaults = MasterArguments()
    for name, readers in READ_BY.items():
        if getattr(args, name) != getattr(defaults, name) and not on & set(readers):
            off = "" if set(readers) & set(tasks) else f"--master-tasks {args.master_tasks} has none of them"
            raise MasterSetupError(f"--{name.replace('_', '-')} is read by the {' and '.join(readers)} "
                                   f"task{'s' if len(readers) > 1 else ''} only, and "
                                   f"{off or 'they are off without --master-side-texts'}")


def parse_tasks(spec: str) -> tuple[str, ...]:
    tasks = tuple(t.strip().lower() for t in spec.split(",") if t.strip())
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise MasterSetupError(f"unknown MASTER task(s) {unknown}; choose from {','.join(TASKS)}")
    return tuple(t for t in TASKS if t in tasks)


def split_halves(ids: Sequence[int], continuation: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Cut a segment at the word start nearest its middle; None when it has fewer than two words."""
    starts = [i for i in range(1, len(ids)) if not bool(continuation[ids[i]])]
    if not starts:
        return None
    cut = min(starts, key=lambda i: abs(2 * i - len(ids)))
    return tuple(ids[:cut]), tuple(ids[cut:])


def masked_inputs(input_ids: torch.Tensor, selected: torch.Tensor,
                  mask_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder input (selected tokens -> [MASK]) and labels (original ids at selected tokens, -100 elsewhere)."""
    inputs = torch.where(selected, torch.full_like(input_ids, mask_token_id), input_ids)
    return inputs, torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))


class MasterCollator:
    """Builds every encoder and decoder input of a batch; all randomness from the given generator.

    Keys: the main pass (``EncoderMLMCollator``'s), then per task ``{task}_input_ids``, ``{task}_labels`` and,
    for texts other than the segment, ``{task}_attention_mask``; CMP adds ``cmp_encoder_input_ids`` /
    ``cmp_encoder_labels``; NPR in ``halves`` mode adds ``npr_encoder_{input_ids,attention_mask,labels}``.
    """

    def __init__(self, tokenizer, tasks: Sequence[str], encoder_ratio: float, decoder_ratio: float,
                 keywords: KeywordMasker | None = None, side_texts: SideTexts | None = None,
                 side_max_length: int = 128, npr_halves: bool = False, *, cmp_ratio: float, corruption: str):
        self.tables = TokenTables(tokenizer)
        self.encoder_collator = EncoderMLMCollator(tokenizer, encoder_ratio)
        self.tasks, self.encoder_ratio, self.decoder_ratio = tuple(tasks), encoder_ratio, decoder_ratio
        self.keywords, self.side_texts, self.side_max_length = keywords, side_texts or SideTexts({}), side_max_length
        self.npr_halves, self.cmp_ratio, self.corruption = npr_halves, cmp_ratio, corruption

    @property
    def tokenizer(self):
        return self.tables.tokenizer

    def __call__(self, examples: Sequence[MasterExample], generator: torch.Generator) -> dict[str, torch.Tensor]:
        batch = self.encoder_collator([e.segment for e in examples], generator)
        for task in self.tasks:
            batch.update(getattr(self, task)(examples, batch, generator))
        return batch

    def mkp(self, examples, batch, generator):
        selected = self.keywords(batch["input_ids"], self.decoder_ratio, generator)
        inputs, labels = self.decoder_input(batch["input_ids"], selected, generator)
        return {"mkp_input_ids": inputs, "mkp_labels": labels}

    def cmp(self, examples, batch, generator):
        """S = the CMP encoder mask; the decoder masks ordinary tokens outside S (disjoint, together all)."""
        input_ids = batch["input_ids"]
        words = self.tables.words(input_ids)
        encoder_selected = sample_whole_words(words, self.cmp_ratio, generator)
        corrupted, encoder_labels = mlm_corrupt(input_ids, encoder_selected, self.tokenizer.mask_token_id,
                                                self.tables.vocab_size, generator)
        inputs, labels = self.decoder_input(input_ids, (words >= 0) & ~encoder_selected, generator)
        return {"cmp_encoder_input_ids": corrupted, "cmp_encoder_labels": encoder_labels,
                "cmp_input_ids": inputs, "cmp_labels": labels}

    def npr(self, examples, batch, generator):
        input_ids, attention_mask = pad_batch([e.npr_target or () for e in examples], self.tokenizer)
        selected = self.keywords(input_ids, self.decoder_ratio, generator)
        out = self.decoder_text("npr", input_ids, attention_mask, selected, generator)
        if self.npr_halves:  # the first halves get their own encoder pass
            input_ids, attention_mask = pad_batch([e.npr_source or () for e in examples], self.tokenizer)
            selected = sample_whole_words(self.tables.words(input_ids), self.encoder_ratio, generator)
            corrupted, labels = mlm_corrupt(input_ids, selected, self.tokenizer.mask_token_id,
                                            self.tables.vocab_size, generator)
            out.update(npr_encoder_input_ids=corrupted, npr_encoder_attention_mask=attention_mask,
                       npr_encoder_labels=labels)
        return out

    def dor(self, examples, batch, generator):
        return self.side_task("dor", examples, generator)

    def gor(self, examples, batch, generator):
        return self.side_task("gor", examples, generator)

    def side_task(self, task: str, examples, generator):
        texts = [self.side_texts.of(e.segment).get(task, "") for e in examples]
        ids = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=self.side_max_length - 2,
                             verbose=False)["input_ids"]
        input_ids, attention_mask = pad_batch(ids, self.tokenizer)
        selected = sample_whole_words(self.tables.words(input_ids), self.decoder_ratio, generator)
        return self.decoder_text(task, input_ids, attention_mask, selected, generator)

    def decoder_text(self, task: str, input_ids: torch.Tensor, attention_mask: torch.Tensor, selected: torch.Tensor,
                     generator: torch.Generator) -> dict[str, torch.Tensor]:
        inputs, labels = self.decoder_input(input_ids, selected, generator)
        return {f"{task}_input_ids": inputs, f"{task}_attention_mask": attention_mask, f"{task}_labels": labels}

    def decoder_input(self, input_ids: torch.Tensor, selected: torch.Tensor,
                      generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A decoder's text with its ``selected`` words hidden (``--master-decoder-corruption``), and its labels."""
        if self.corruption == "mask":
            return masked_inputs(input_ids, selected, self.tokenizer.mask_token_id)
        return mlm_corrupt(input_ids, selected, self.tokenizer.mask_token_id, self.tables.vocab_size, generator)


class TaskDecoder(nn.Module):
    """A stack of plain BERT layers over [h; embeddings of the masked text]."""

    def __init__(self, config, num_layers: int):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(BertLayer(config, layer_idx=i) for i in range(num_layers))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return hidden


class MASTER(PretrainModel):
    """Encoder MLM + the MKP, CMP, NPR, DOR and GOR decoders (any subset)."""

    name = "master"
    objective_version = 2  # 2: CMP splits the words 50/50, decoder texts corrupted 80/10/10 (2026-11-27)
    Arguments = MasterArguments
    fresh_decoder_options = ("master_decoder_init",)

    def __init__(self, backbone, masking, method_args=None):
        super().__init__(backbone, masking, method_args)
        args = self.method_args
        check_arguments(args)
        self.tables = TokenTables(self.tokenizer)
        self.side_texts = self._side_texts(args)
        self.tasks = self._active_tasks(parse_tasks(args.master_tasks))
        if masking.decoder_mask_ratio != MaskingArguments().decoder_mask_ratio and not (
                set(DECODER_RATIO_READERS) & set(self.tasks)):
            raise MasterSetupError(f"--decoder-mask-ratio is read by the {', '.join(DECODER_RATIO_READERS)} tasks "
                                   "only, and none is on: CMP's decoder masks the words its encoder pass left "
                                   "(--master-cmp-mask-ratio)")
        self.keywords = self._keyword_masker(args) if {"mkp", "npr"} & set(self.tasks) else None
        self.decoders = nn.ModuleDict({task: self._new_decoder(args) for task in self.tasks})

    # ---- set-up ------------------------------------------------------------------------------------------------
    @classmethod
    def prepare_arguments(cls, method_args: MasterArguments | None, corpus: str | Path, model_name: str,
                          max_length: int) -> MasterArguments:
        """Side texts checked against ``corpus`` and, per segment, against the run's segments at ``max_length``
        (:func:`check_side_texts`). With MKP or NPR on and no ``master_corpus_stats``: the statistics of ``corpus``
        under the model's tokenizer, reused when counted before, else counted now
        (``corpus_stats.ensure_corpus_stats``)."""
        args = method_args if method_args is not None else cls.Arguments()
        check_arguments(args)
        if args.master_side_texts is not None:
            check_side_texts(args.master_side_texts, corpus, model_name, max_length)
        if not {"mkp", "npr"} & set(parse_tasks(args.master_tasks)):
            return args
        from transformers import AutoTokenizer

        from retromae_ir.pretrain.corpus_stats import check_stats_file, ensure_corpus_stats

        tokenizer = AutoTokenizer.from_pretrained(model_name)

        if args.master_corpus_stats is not None:
            check_stats_file(args.master_corpus_stats, corpus, tokenizer)
            return args
        return replace(args, master_corpus_stats=str(ensure_corpus_stats(corpus, tokenizer, model_name)))

    @classmethod
    def code_identity(cls, method_args: MasterArguments | None) -> dict:
        """With the objective's version, when MKP or NPR trains, the keyword-masking rule's and the corpus
        statistics' counting (statistics counted anew under another rule are new keyword weights)."""
        from retromae_ir.pretrain.corpus_stats import KEY_VERSION

        tasks = parse_tasks((method_args or cls.Arguments()).master_tasks)
        keywords = ({"keyword_masking": KEYWORD_MASKING_VERSION, "corpus_stats_counting": KEY_VERSION}
                    if {"mkp", "npr"} & set(tasks) else {})
        return {**super().code_identity(method_args), **keywords}

    def _side_texts(self, args: MasterArguments) -> SideTexts:
        if args.master_side_texts is None:
            return SideTexts({})
        texts = load_side_texts(args.master_side_texts, self.tokenizer.sep_token)
        log.info("side texts for %d %s from %s", len(texts), "segments" if texts.per_segment else "documents",
                 args.master_side_texts)
        return texts

    def _active_tasks(self, requested: tuple[str, ...]) -> tuple[str, ...]:
        tasks = []
        for task in requested:
            if task in SIDE_KEYS and not self.side_texts.has(task):
                log.warning("MASTER task %s is off: no %s texts (--master-side-texts)", task.upper(), SIDE_KEYS[task])
                continue
            tasks.append(task)
        if not tasks:
            raise MasterSetupError("no MASTER decoder task left to train (--master-tasks / --master-side-texts)")
        log.info("MASTER tasks: %s", ",".join(tasks))
        return tuple(tasks)

    def _keyword_masker(self, args: MasterArguments) -> KeywordMasker:
        if args.master_corpus_stats is None:
            raise MasterSetupError("MKP and NPR need corpus statistics: the pre-training command counts them "
                                   "itself; building MASTER directly, pass master_corpus_stats (a file from python -m "
                                   "retromae_ir.pretrain.corpus_stats --corpus CORPUS --model MODEL --output STATS, "
                                   "or MASTER.prepare_arguments(args, corpus, model, max_length))")
        weighting = KeywordWeighting(CorpusStats.load(args.master_corpus_stats), args.master_keyword_weighting)
        return KeywordMasker(self.tables, weighting)

    def _new_decoder(self, args: MasterArguments) -> TaskDecoder:
        config = self.encoder.config
        decoder = TaskDecoder(config, args.master_decoder_layers)
        if args.master_decoder_init == "random":
            decoder.apply(self.encoder._init_weights)
        elif args.master_decoder_init == "copy":
            source = self.encoder.bert.encoder.layer
            if args.master_decoder_layers > len(source):
                raise MasterSetupError(f"cannot copy {args.master_decoder_layers} layers from a "
                                       f"{len(source)}-layer encoder")
            for target, layer in zip(decoder.layers, source[-args.master_decoder_layers:]):
                target.load_state_dict(layer.state_dict())
        return decoder

    # ---- data --------------------------------------------------------------------------------------------------
    def make_examples(self, segments: Sequence[Segment]) -> MasterExamples:
        """Attach each segment's NPR pair (next segment of its document, or its own halves)."""
        if {"dor", "gor"} & set(self.tasks):
            self.side_texts.warn_shared(segments)
        pairs = None if "npr" not in self.tasks else self.method_args.master_npr_pairs
        examples = MasterExamples(segments, pairs, self.tables.continuation)
        if pairs is None:
            return examples
        paired = sum(examples.paired(row) for row in range(len(examples)))
        log.info("NPR (%s): %d of %d segments have a neighbouring span", pairs, paired, len(examples))
        if paired == 0:
            log.warning("NPR has no pair in this corpus; try --master-npr-pairs halves")
        return examples

    def make_collator(self) -> MasterCollator:
        args = self.method_args
        return MasterCollator(self.tokenizer, self.tasks, self.masking.encoder_mask_ratio,
                              self.masking.decoder_mask_ratio, self.keywords, self.side_texts,
                              args.master_side_max_length, npr_halves=args.master_npr_pairs == "halves",
                              cmp_ratio=args.master_cmp_mask_ratio, corruption=args.master_decoder_corruption)

    # ---- model -------------------------------------------------------------------------------------------------
    def decode(self, task: str, cls: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``task``'s decoder over its masked tokens (head applied there only)."""
        embedded = self.encoder.bert.embeddings(input_ids=input_ids)
        hidden = self.decoders[task](torch.cat([cls.unsqueeze(1), embedded[:, 1:]], dim=1), attention_mask)
        labelled = labels != IGNORE_INDEX
        return token_cross_entropy(self.encoder.cls(hidden[labelled]), labels[labelled])

    def losses(self, batch: dict, encoded: EncoderOutput) -> dict[str, torch.Tensor]:
        terms = {"mlm": encoded.mlm_loss}
        for task in self.tasks:
            cls = encoded.cls
            if task == "cmp":
                second = self.encode({"encoder_input_ids": batch["cmp_encoder_input_ids"],
                                      "attention_mask": batch["attention_mask"],
                                      "encoder_labels": batch["cmp_encoder_labels"]})
                terms["cmp_mlm"], cls = second.mlm_loss, second.cls
            elif task == "npr" and "npr_encoder_input_ids" in batch:
                first = self.encode({"encoder_input_ids": batch["npr_encoder_input_ids"],
                                     "attention_mask": batch["npr_encoder_attention_mask"],
                                     "encoder_labels": batch["npr_encoder_labels"]})
                terms["npr_mlm"], cls = first.mlm_loss, first.cls
            attention_mask = batch.get(f"{task}_attention_mask", batch["attention_mask"])
            terms[task] = self.decode(task, cls, batch[f"{task}_input_ids"], attention_mask, batch[f"{task}_labels"])
        total = sum(terms.values())
        return {"loss": total, **{name: value.detach() for name, value in terms.items()}}
