"""The command-line convention every ``python -m retromae_ir.*`` command and ``eval/*.py`` script follows: ``prog``
is the command a user types, ``--help`` shows dashed flags (``--max-steps``) only, and errors follow one rule
(``command``): an error the user can fix (bad input, a missing or unwritable file, a wrong card, another process
writing the output) prints one ``error: ...`` line naming the file and line or the field, and exits 2, without a
traceback unless ``--debug`` (or ``RETROMAE_IR_DEBUG=1``); an unexpected failure keeps its traceback.

``transformers.HfArgumentParser`` registers each dataclass field ``max_steps`` as ``--max_steps`` and
``--max-steps`` (and a ``True``-default bool's complement as ``--no_x`` and ``--no-x``). ``dataclass_parser`` keeps
both spellings accepted but names only the dashed one in usage, help and error messages.
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
from typing import Callable, Iterable, Sequence

from retromae_ir.io import DEBUG_ENV, command_errors, debug_mode

DEBUG_FLAG = "--debug"
DEBUG_HELP = f"show the traceback of an error (also {DEBUG_ENV}=1)"


class Repeatable(argparse.Action):
    """A list flag (``nargs``) that may be given more than once: ``--set a=1 --set b=2`` means both (argparse's
    ``store`` kept the last one silently, and its ``extend`` adds to a non-empty default instead of replacing it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        earlier = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, earlier + list(values))


def add_debug_flag(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """List ``--debug`` in ``parser``'s help. ``command`` takes the flag out of argv before any parser sees it, so
    it is accepted anywhere on the line (after a subcommand too) and never reaches a parser's namespace."""
    parser.add_argument(DEBUG_FLAG, action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def split_debug(argv: Sequence[str] | None) -> tuple[list[str], bool]:
    """``argv`` (``sys.argv[1:]`` when None) without ``--debug``, and whether it was there."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return [arg for arg in argv if arg != DEBUG_FLAG], DEBUG_FLAG in argv


def command(main: Callable) -> Callable:
    """Decorate a command's ``main(argv)``: ``--debug`` is taken out of ``argv``, and the whole command (its argument
    parsing included) runs inside ``io.command_errors``, so every error a user can fix exits 2 with one line."""
    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None):
        argv, debug = split_debug(argv)
        with debug_mode(debug), command_errors():
            return main(argv)

    run.is_command = True
    return run


def finite_float(text: str) -> float:
    """argparse type of every float option: ``nan`` and ``inf`` parse as floats, and were accepted where a check
    reads ``x <= 0`` (an ``--lr inf`` run published NaN weights, ``--contrastive-weight nan`` switched its term off
    while the run recorded nan)."""
    value = float(text)  # a ValueError: argparse's "invalid float value"
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


finite_float.__name__ = "float"  # argparse names the type in "invalid float value: 'x'"


def dataclass_parser(dataclass_types: Iterable[type], prog: str, **kwargs):
    """An ``HfArgumentParser`` over ``dataclass_types`` called ``prog``, its underscore flags hidden aliases and
    its float fields finite (:func:`finite_float`)."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(list(dataclass_types), prog=prog, **kwargs)
    add_debug_flag(parser)  # SUPPRESS default: never in the namespace, so no extra dataclass-less output
    for action in parser._actions:
        dashed = [option for option in action.option_strings if not (option.startswith("--") and "_" in option)]
        if dashed:  # the underscore spellings stay in parser._option_string_actions, so they still parse
            action.option_strings = dashed
        if action.type is float:
            action.type = finite_float
    return parser


COMPILE_BACKENDS = ("inductor", "openvino", "kernels")  # EncoderModel.compile_backbone's


def check_at_least_one(arguments, *names: str) -> None:
    """Refuse a field of an argument dataclass below 1 (unset, None, passes), named as its flag: a size of 0 that
    trained or scored nothing, or read as unset, exited 0."""
    for name in names:
        value = getattr(arguments, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def add_compile_argument(parser: argparse.ArgumentParser, context: str = "") -> None:
    """``--compile [inductor|openvino|kernels]`` (bare ``--compile``: inductor), the same flag on every command that
    encodes (``encode``, the BEIR/TREC drivers)."""
    parser.add_argument("--compile", nargs="?", const="inductor", default=None, choices=COMPILE_BACKENDS,
                        metavar="{inductor,openvino,kernels}",
                        help=f"{context}compile the transformer for inference. inductor (the default of a bare "
                             f"--compile): torch.compile with its weights frozen (oneDNN kernels on a CPU), about "
                             f"10 s of compilation at the start, any device. openvino: OpenVINO's CPU plugin, CPU "
                             f"only, faster still for the dense pass. kernels: BERT's layers on this package's own "
                             f"AVX2 kernels, no padding; fp32 on an x86-64 CPU with AVX2, BERT checkpoints only. In "
                             f"fp32 the vectors equal eager's to about 1e-6; not with --dtype int8; speed in "
                             f"docs/encoders.md")
