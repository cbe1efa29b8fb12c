"""``python -m retromae_ir.repro --list | --condition NAME ... | --all [--dry-run] | --docs FILE``."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from retromae_ir.cli import Repeatable, add_debug_flag, command
from retromae_ir.io import atomic_write
from retromae_ir.repro.matrix import CONDITIONS_FILE, Matrix, render_docs, run_condition


def parse_args(argv=None) -> argparse.Namespace:
    parser = add_debug_flag(argparse.ArgumentParser(prog="python -m retromae_ir.repro", description=__doc__))
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="list the conditions")
    what.add_argument("--condition", nargs="+", action=Repeatable, metavar="NAME", help="run these conditions")
    what.add_argument("--all", action="store_true", help="run every condition")
    what.add_argument("--docs", type=Path, metavar="FILE", help="write the markdown page of the matrix")
    parser.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    parser.add_argument("--conditions-file", type=Path, default=CONDITIONS_FILE)
    parser.add_argument("--runs-root", type=Path, default=Path("runs/repro"))
    return parser.parse_args(argv)


@command
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run and (args.list or args.docs):
        print("error: --dry-run goes with --condition or --all (--list and --docs run nothing)", file=sys.stderr)
        return 2
    matrix = Matrix.load(args.conditions_file)
    if args.list:
        for c in matrix.conditions.values():
            print(f"{c.name:40s} {c.dataset:16s} " + " ".join(f"{m}={v:.4f}" for m, v in c.expected.items()))
        return 0
    if args.docs:
        with atomic_write(args.docs) as handle:
            handle.write(render_docs(matrix, args.runs_root))
        print(f"wrote {args.docs}")
        return 0
    names = list(matrix.conditions) if args.all else args.condition
    unknown = [n for n in names if n not in matrix.conditions]
    if unknown:
        print(f"error: unknown condition(s): {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        condition = matrix.conditions[name]
        if args.dry_run:
            print(shlex.join(condition.command(args.runs_root)))
            continue
        outcome = run_condition(condition, args.runs_root, matrix.tolerance)
        scores = " ".join(f"{m}={v:.4f}" for m, v in sorted(outcome.scores.items()))
        print(f"{'OK  ' if outcome.ok else 'FAIL'} {name} {scores}")
        for failure in outcome.failures:
            print(f"     {failure}")
        failed += not outcome.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
