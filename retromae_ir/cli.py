"""The command-line convention every ``python -m retromae_ir.*`` command follows: ``prog`` is the command a user
types, and ``--help`` shows dashed flags (``--max-steps``) only.

``transformers.HfArgumentParser`` registers each dataclass field ``max_steps`` as ``--max_steps`` and
``--max-steps`` (and a ``True``-default bool's complement as ``--no_x`` and ``--no-x``). ``dataclass_parser`` keeps
both spellings accepted but names only the dashed one in usage, help and error messages.
"""
from __future__ import annotations

from typing import Iterable


def dataclass_parser(dataclass_types: Iterable[type], prog: str, **kwargs):
    """An ``HfArgumentParser`` over ``dataclass_types`` called ``prog``, its underscore flags hidden aliases."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(list(dataclass_types), prog=prog, **kwargs)
    for action in parser._actions:
        dashed = [option for option in action.option_strings if not (option.startswith("--") and "_" in option)]
        if dashed:  # the underscore spellings stay in parser._option_string_actions, so they still parse
            action.option_strings = dashed
    return parser
