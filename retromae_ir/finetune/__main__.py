"""Fine-tune a retriever (DupMAE Eq. 13-15): ``python -m retromae_ir.finetune --stage {1,2,distill}
--encoder CARD (--train FILE | --queries Q --qrels R) --corpus C --output DIR [...]``.

A thin CLI over ``FinetuneTrainer``: the flags are the fields of ``arguments.py``; inputs and the output directory
are checked before the model loads, and the output is locked against a second writer for the whole run. Under
``torchrun --nproc-per-node N`` it trains data-parallel with in-batch
negatives gathered across processes. The result, ``DIR/card.yaml``, is an encoder card for encode / search / mine.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from retromae_ir.cli import command, dataclass_parser
from retromae_ir.encode.cards import load_card
from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.finetune.arguments import DataArguments, FinetuneTrainingArguments, LossArguments, ModelArguments
from retromae_ir.finetune.calibration import calibrated_teacher_temperature
from retromae_ir.finetune.data import MASKING_VERSION, load_examples, twin_rule_acts
from retromae_ir.finetune.model import BiEncoder, load_encoder
from retromae_ir.finetune.trainer import FinetuneTrainer
from retromae_ir.io import start_key
from retromae_ir.logs import setup_logging
from retromae_ir.training.trainer import check_inputs_read, exclusive_run, run_identity


def parse(argv: list[str] | None = None):
    parser = dataclass_parser([ModelArguments, DataArguments, LossArguments, FinetuneTrainingArguments],
                              "python -m retromae_ir.finetune", description=__doc__.splitlines()[0])
    return parser.parse_args_into_dataclasses(argv)


def run(model_args: ModelArguments, data: DataArguments, loss: LossArguments,
        training: FinetuneTrainingArguments) -> Path:
    if loss.distill and data.group_size < 2:
        raise ValueError(f"--stage distill needs --group-size >= 2, got {data.group_size}: the teacher's soft labels "
                         f"rank each query's group, and a group of one passage has nothing to rank (its softmax is 1, "
                         f"the distillation term 0: the teacher teaches nothing; in-batch training is --stage 2)")
    overrides = {key: value for key, value in (("checkpoint", model_args.model), ("dims", model_args.dims))
                 if value is not None}
    card = load_card(model_args.encoder, **overrides)
    # the start's weight and tokenizer files too: a stage trained again in place keeps its card but is another start;
    # the encoding code (the representation trained: the chain keys its stages by it too); the twin rule wherever it
    # acts (masking, or a --train file's listed negatives that are a twin's positive)
    twins = twin_rule_acts(loss.mask_false_negatives, data.train is not None)
    identity = run_identity(model_args, data, loss, training,
                            {"card": card.fingerprint(), "start_weights": start_key(card.checkpoint_path()),
                             "encoding": ENCODING_VERSION, **({"masking": MASKING_VERSION} if twins else {})})
    with exclusive_run(training, identity):
        return _train(card, model_args, data, loss, training, identity)


def _train(card, model_args: ModelArguments, data: DataArguments, loss: LossArguments,
           training: FinetuneTrainingArguments, identity: dict) -> Path:
    examples = load_examples(data, need_scores=loss.distill, in_batch=not loss.distill)
    check_inputs_read(identity, data)
    model = BiEncoder(load_encoder(card, training.seed, model_args.attention_dropout), data, loss)
    if loss.distill and loss.calibrate_teacher:
        loss = dataclasses.replace(model.loss_args, calibrate_teacher=False,  # done: the temperature it set
                                   teacher_temperature=calibrated_teacher_temperature(model, examples))
        model.loss_args = loss

    def reload(checkpoint: Path) -> BiEncoder:
        return BiEncoder(load_encoder(dataclasses.replace(card, checkpoint=str(checkpoint)),
                                      attention_dropout=model_args.attention_dropout), data, loss)

    metadata = {"encoder": model_args.encoder, "start_checkpoint": card.checkpoint}
    return FinetuneTrainer(model, examples, training, metadata, reload, identity).train()


@command  # bad arguments or input (DataFormatError, CardError, TrainerError): one line, exit 2
def main(argv: list[str] | None = None) -> None:
    setup_logging()
    run(*parse(argv))


if __name__ == "__main__":
    main()
