"""``python -m retromae_ir.pretrain --method {retromae,dupmae,master} --corpus PATH --output DIR [...]``.

A thin CLI: the options are the fields of the argument dataclasses (``arguments.py``, the contrastive
options, and the chosen method's own ``Arguments``); everything is validated before any training starts, and the
output is locked against a second writer for the whole run. Under ``torchrun --nproc-per-node N`` it trains
data-parallel (gloo on CPU, nccl on GPU).
"""
from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from retromae_ir.cli import command, dataclass_parser
from retromae_ir.pretrain import METHODS, get_method
from retromae_ir.pretrain.arguments import DataArguments, MaskingArguments, ModelArguments
from retromae_ir.training.arguments import TrainingArguments
from retromae_ir.packaged import default_model
from retromae_ir.pretrain.backbone import check_config
from retromae_ir.pretrain.contrastive import ContrastiveArguments, with_contrastive
from retromae_ir.pretrain.data import check_maskable, load_segments, reader_version
from retromae_ir.io import command_errors, start_key
from retromae_ir.training.trainer import Trainer, check_inputs_read, exclusive_run, run_identity

PROG = "python -m retromae_ir.pretrain"


def parse(argv: list[str] | None = None):
    """(model, data, masking, training, contrastive, method) argument dataclasses and the method class."""
    peek = argparse.ArgumentParser(prog=PROG, add_help=False)
    asks_help = {"-h", "--help"} & set(sys.argv[1:] if argv is None else argv)
    peek.add_argument("--method", choices=sorted(METHODS), required=not asks_help)
    method_name = peek.parse_known_args(argv)[0].method
    method_cls = get_method(method_name) if method_name else None
    groups = [ModelArguments, DataArguments, MaskingArguments, TrainingArguments, ContrastiveArguments]
    if method_cls is not None:
        groups.append(method_cls.Arguments)
    parser = dataclass_parser(groups, PROG, description=__doc__.splitlines()[0])
    return (*parser.parse_args_into_dataclasses(argv), method_cls)


def corpus_reader(corpus: str | None) -> dict | None:
    """How the corpus is read, for the run identity, where that differs from before ``CACHE_VERSION`` 4 (an MS MARCO
    ``.tsv``, a titled ``{"text"}`` JSONL): a run started by older code, or on the same bytes under another name
    (read as plain lines), is then another run, not one to resume. None (nothing added) for the other formats, so
    their runs resume as before."""
    version = reader_version(corpus) if corpus and Path(corpus).is_file() else None
    return {"corpus_reader": version} if version else None


def run(model_args: ModelArguments, data: DataArguments, masking: MaskingArguments, training: TrainingArguments,
        contrastive: ContrastiveArguments, method_args, method_cls) -> None:
    """Validate cheaply (model type, max length, output dir and what it resumes), then load, tokenise and train."""
    model_name = model_args.model or default_model()
    check_config(model_name, data.max_length)
    method_cls.check_start(model_name, method_args)
    # a local start's weight and tokenizer files: one trained again in place is another start
    identity = run_identity(model_args, data, masking, training, contrastive, method_args,
                            {"start_weights": start_key(model_name)}, corpus_reader(data.corpus),
                            method_cls.code_identity(method_args))
    with exclusive_run(training, identity):
        _train(model_name, data, masking, training, contrastive, method_args, method_cls, identity)


def _train(model_name: str, data: DataArguments, masking: MaskingArguments, training: TrainingArguments,
           contrastive: ContrastiveArguments, method_args, method_cls, identity: dict) -> None:
    torch.manual_seed(training.seed)  # fresh decoders / MLM heads initialise the same way every run
    if contrastive.contrastive_weight > 0:
        method_cls = with_contrastive(method_cls, contrastive)
    method_args = method_cls.prepare_arguments(method_args, data.corpus, model_name, data.max_length)  # MASTER
    model = method_cls.from_pretrained(model_name, masking, method_args, data.max_length)
    segments = load_segments(data.corpus, model.tokenizer, data.max_length, data.tokenized_cache)
    check_inputs_read(identity, data, method_args)
    check_maskable(segments, masking.encoder_mask_ratio, data.corpus)
    metadata = {"model": model_name, "corpus": data.corpus, "data": asdict(data),
                "contrastive": asdict(contrastive)}
    Trainer(model, model.make_examples(segments), training, metadata, identity).train()


@command
def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with command_errors(ValueError):  # bad arguments or input (CorpusError, BackboneError, TrainerError...)
        *groups, method_cls = parse(argv)
        run(*groups, method_cls)


if __name__ == "__main__":
    main()
