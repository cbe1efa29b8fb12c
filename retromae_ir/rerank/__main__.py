"""``python -m retromae_ir.rerank train --train NEG.jsonl --corpus C --output DIR [...]`` trains the cross-encoder
on the stage-2 groups; ``python -m retromae_ir.rerank score --model DIR --input NEG.jsonl --corpus C --output
SCORED.jsonl`` adds its soft labels for ``python -m retromae_ir.finetune --stage distill``. Either output is locked
against a second writer while the command runs."""
from __future__ import annotations

import sys

from retromae_ir.io import command_errors, output_lock
from retromae_ir.logs import setup_logging

COMMANDS = ("train", "score")


def train(argv: list[str]):
    from transformers import HfArgumentParser

    from retromae_ir.finetune.arguments import DataArguments, FinetuneTrainingArguments
    from retromae_ir.pretrain.trainer import exclusive_run, run_identity
    from retromae_ir.rerank.model import CrossEncoderArguments

    model_args, data, training = HfArgumentParser(
        [CrossEncoderArguments, DataArguments, FinetuneTrainingArguments]).parse_args_into_dataclasses(argv)
    identity = run_identity({"method": "cross-encoder"}, model_args, data, training)
    with exclusive_run(training, identity):
        return _train(model_args, data, training, identity)


def _train(model_args, data, training, identity: dict):
    from retromae_ir.finetune.data import load_examples
    from retromae_ir.finetune.trainer import FinetuneTrainer
    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments

    examples = load_examples(data)
    model = CrossEncoder.load(model_args, data.group_size, training.seed)

    def reload(checkpoint):
        return CrossEncoder.load(CrossEncoderArguments(str(checkpoint), model_args.max_length), data.group_size)

    metadata = {"model": model_args.model or "packaged all-MiniLM-L6-v2", "train": data.train}
    return FinetuneTrainer(model, examples, training, metadata, reload, identity).train()


def score(argv: list[str]):
    from transformers import HfArgumentParser

    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments
    from retromae_ir.rerank.score import ScoreArguments, score_file

    model_args, args = HfArgumentParser([CrossEncoderArguments, ScoreArguments]).parse_args_into_dataclasses(argv)
    if model_args.model is None:
        raise SystemExit("score needs --model: a cross-encoder trained with `python -m retromae_ir.rerank train`")
    model = CrossEncoder.load(model_args)
    if args.device:
        model.to(args.device)
    with output_lock(args.output):
        return score_file(model, args)


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        raise SystemExit(f"usage: python -m retromae_ir.rerank {{{','.join(COMMANDS)}}} [options] (-h for help)\n\n"
                         + __doc__)
    setup_logging()
    with command_errors(ValueError):  # bad arguments or input (DataFormatError, TrainerError)
        return {"train": train, "score": score}[argv[0]](argv[1:])


if __name__ == "__main__":
    main()
