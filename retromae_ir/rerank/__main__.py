"""``python -m retromae_ir.rerank train --train NEG.jsonl --corpus C --output DIR [...]`` trains the cross-encoder
on the stage-2 groups; ``python -m retromae_ir.rerank score --model DIR --input NEG.jsonl --corpus C --output
SCORED.jsonl`` adds its soft labels for ``python -m retromae_ir.finetune --stage distill``. Either output is locked
against a second writer while the command runs."""
from __future__ import annotations

import argparse
import dataclasses

from retromae_ir.cli import add_debug_flag, command, dataclass_parser
from retromae_ir.io import output_lock
from retromae_ir.logs import setup_logging

PROG = "python -m retromae_ir.rerank"
COMMANDS = {"train": "train the cross-encoder on the stage-2 groups",
            "score": "add the cross-encoder's soft labels to a negatives file"}


def train(argv: list[str]):
    from retromae_ir.finetune.arguments import DataArguments, FinetuneTrainingArguments
    from retromae_ir.finetune.data import MASKING_VERSION
    from retromae_ir.io import start_key
    from retromae_ir.packaged import default_model
    from retromae_ir.rerank.model import CrossEncoderArguments, trained_max_length
    from retromae_ir.training.trainer import exclusive_run, run_identity

    model_args, data, training = dataclass_parser([CrossEncoderArguments, DataArguments, FinetuneTrainingArguments],
                                                  f"{PROG} train").parse_args_into_dataclasses(argv)
    defaults = {field.name: field.default for field in dataclasses.fields(DataArguments)}
    for name in ("max_query_length", "max_passage_length"):  # DataArguments' bi-encoder lengths (default None),
        # however spelled or abbreviated (--max-passage 32): the cross-encoder would accept and ignore them
        if getattr(data, name) != defaults[name]:
            raise ValueError(f"--{name.replace('_', '-')} does not apply to the cross-encoder: it reads a query "
                             f"and a passage as one input, cut at --max-length")
    if data.group_size < 2:
        raise ValueError(f"the cross-encoder trains on groups of a positive and mined negatives (it has no in-batch "
                         f"negatives): --group-size must be >= 2, got {data.group_size} (a group of one passage has "
                         f"a softmax of 1: loss 0, nothing trained)")
    if model_args.max_length is None:  # the run is keyed by the length it trains at, however it was given
        model_args = dataclasses.replace(model_args, max_length=trained_max_length(model_args.model or default_model()))
    # the start's weights, not only its path: a --model folder trained again in place is another start; the twin
    # rule, which drops listed negatives that are a same-text query's positive
    identity = run_identity({"method": "cross-encoder", "start_weights": start_key(model_args.model or
                                                                                         default_model()),
                             "masking": MASKING_VERSION}, model_args, data, training)
    with exclusive_run(training, identity):
        return _train(model_args, data, training, identity)


def _train(model_args, data, training, identity: dict):
    from retromae_ir.finetune.data import load_examples
    from retromae_ir.finetune.trainer import FinetuneTrainer
    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments
    from retromae_ir.training.trainer import check_inputs_read

    examples = load_examples(data, in_batch=False)
    check_inputs_read(identity, data)
    model = CrossEncoder.load(model_args, data.group_size, training.seed)

    def reload(checkpoint):
        return CrossEncoder.load(CrossEncoderArguments(str(checkpoint), model.args.max_length), data.group_size)

    metadata = {"model": model_args.model or "packaged all-MiniLM-L6-v2", "train": data.train}
    return FinetuneTrainer(model, examples, training, metadata, reload, identity).train()


def score(argv: list[str]):
    from retromae_ir.rerank.model import CrossEncoder, CrossEncoderArguments
    from retromae_ir.rerank.score import ScoreArguments, score_file

    model_args, args = dataclass_parser([CrossEncoderArguments, ScoreArguments],
                                        f"{PROG} score").parse_args_into_dataclasses(argv)
    if model_args.model is None:
        raise ValueError("score needs --model: a cross-encoder trained with `python -m retromae_ir.rerank train`")
    model = CrossEncoder.load(model_args, trained=True)
    import torch

    model.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))  # as --device's help says
    with output_lock(args.output):
        return score_file(model, args)


@command  # bad arguments or input (DataFormatError, TrainerError): one line, exit 2
def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog=PROG, description="the cross-encoder reranker: train it, or score with it",
                                     epilog=f"`{PROG} COMMAND --help` lists a command's options")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in COMMANDS.items():  # each command's own parser reads its options (and its --help)
        commands.add_parser(name, help=summary, add_help=False)
    add_debug_flag(parser)
    args, options = parser.parse_known_args(argv)
    setup_logging()
    return {"train": train, "score": score}[args.command](options)


if __name__ == "__main__":
    main()
