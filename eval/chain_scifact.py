"""The DupMAE chain on BEIR scifact (`make chain`): a thin driver over ``python -m retromae_ir.chain``.

    .venv/bin/python eval/chain_scifact.py                         # scifact-quick: the 1000-document sub-corpus
    .venv/bin/python eval/chain_scifact.py --config short          # the whole corpus, 1.5 + 2 epochs
    .venv/bin/python eval/chain_scifact.py --config short-pretrain # ... after one pass of DupMAE pre-training
    .venv/bin/python eval/chain_scifact.py --config full           # the GPU configuration
    .venv/bin/python eval/chain_scifact.py --set epochs=2 --output outputs/x  # any option of retromae_ir.chain

``--config NAME`` runs the chain ``scifact-NAME`` of retromae_ir/repro/chains.yaml; scifact is read from
../shared/data/beir beside the checkout when it is there (an explicit --data-dir or --folder, or
$RETROMAE_IR_DATA, wins).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from retromae_ir.cli import add_debug_flag, command

REPO = Path(__file__).resolve().parents[1]
SHARED_BEIR = REPO.parent / "shared" / "data" / "beir"


@command
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="eval/chain_scifact.py", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]) +
                                     "\nOther options are those of python -m retromae_ir.chain (--help there).")
    parser.add_argument("--config", default="quick", choices=["quick", "short", "short-pretrain", "full"])
    add_debug_flag(parser)
    args, rest = parser.parse_known_args(argv)
    given = {arg.split("=", 1)[0] for arg in rest}  # --flag VALUE and --flag=VALUE alike
    if "--chain" in given:
        parser.error("--chain: this driver runs scifact-<--config>; run python -m retromae_ir.chain for another chain")
    from retromae_ir.chain.__main__ import main as chain_main

    if "--list" in given:  # the chains as the file defines them: no run, so none of a run's options
        if args.config != parser.get_default("config"):
            parser.error("--list prints every chain; --config picks the one a run runs")
        return chain_main(rest)
    chain_main(["--chain", f"scifact-{args.config}", *data_source(given), *rest])


def data_source(given: set[str]) -> list[str]:
    """``--data-dir`` at the shared copy beside the checkout, unless the data is named otherwise: by the command
    (``--folder``, ``--data-dir``) or by ``$RETROMAE_IR_DATA``, which the shared copy used to override (the run
    trained and scored on it, exit 0)."""
    if {"--folder", "--data-dir"} & given or os.environ.get("RETROMAE_IR_DATA") or not SHARED_BEIR.is_dir():
        return []
    return ["--data-dir", str(SHARED_BEIR)]


if __name__ == "__main__":
    main()
