"""python -m retromae_ir.chain: run a named chain of retromae_ir/repro/chains.yaml (or of your own YAML file).

    python -m retromae_ir.chain --list
    python -m retromae_ir.chain --chain scifact-quick                 # the README's main job (make chain)
    python -m retromae_ir.chain --chain scifact-short --set epochs=2  # any setting overridden
    python -m retromae_ir.chain --chain my-chain --chains my-chains.yaml --data-dir DIR

Writes under --output (default outputs/chain-<name>): a folder per stage, results.json, results.md, chain.png,
chain.log and commands.log. Finished stages are skipped on a rerun.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

from retromae_ir.cli import Repeatable, add_debug_flag, command

log = logging.getLogger("retromae_ir.chain")


RUN_OPTIONS = ("chain", "folder", "data_dir", "model", "output", "pretrained", "bf16", "no_lucene", "set")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m retromae_ir.chain", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--chain", default="scifact-quick", help="a chain's name (default: %(default)s)")
    parser.add_argument("--chains", type=Path, default=None,
                        help="the YAML file of chains (default: retromae_ir/repro/chains.yaml)")
    parser.add_argument("--list", action="store_true",
                        help="print the chains and the settings each changes from ChainConfig's defaults, then exit")
    parser.add_argument("--folder", type=Path, default=None,
                        help="a BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/train.tsv, qrels/test.tsv) "
                             "instead of the chain's dataset")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where the chain's BEIR dataset is (default: $RETROMAE_IR_DATA, the cache, download; "
                             "an incomplete copy in one of them is an error)")
    parser.add_argument("--model", default=None, help="starting encoder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--output", type=Path, default=None, help="default: outputs/chain-<name> (git-ignored)")
    parser.add_argument("--pretrained", type=Path, default=None,
                        help="an existing DupMAE pre-training output to start from (skips the pre-training stage)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast for training and encoding (default: where the hardware runs it natively, "
                             "see retromae_ir/hardware.py; AVX2-only CPUs emulate bf16 and run it several times slower)")
    parser.add_argument("--no-lucene", action="store_true",
                        help="a host without Java: indexes without their Lucene impact index, no BM25 baseline "
                             "(every stage is still searched by the exact hybrid searcher)")
    parser.add_argument("--set", nargs="*", action=Repeatable, default=[], metavar="FIELD=VALUE",
                        help="override settings of retromae_ir/chain/config.py::ChainConfig")
    return add_debug_flag(parser)


@command
def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.folder is not None and args.data_dir is not None:
        parser.error("--data-dir and --folder do not combine: --folder replaces the chain's dataset")
    if args.list:  # it prints the file's chains: a run's options were ignored, the listing read as if they applied
        given = [f"--{name.replace('_', '-')}" for name in RUN_OPTIONS
                 if getattr(args, name) != parser.get_default(name)]
        if given:
            parser.error(f"--list prints the chains as the file defines them; {', '.join(given)} "
                         f"{'applies' if len(given) == 1 else 'apply'} to a run")
    from retromae_ir.chain.config import CHAINS_FILE, ChainConfig, load_chains
    from retromae_ir.data.beir import DatasetUnavailable
    from retromae_ir.io import command_errors
    from retromae_ir.chain.stages import StageFailed

    with command_errors(ValueError, StageFailed, DatasetUnavailable):
        chains = load_chains(args.chains or CHAINS_FILE)
        if args.list:
            defaults = ChainConfig()
            for spec in chains.values():
                changed = {f.name: getattr(spec.config, f.name) for f in dataclasses.fields(ChainConfig)
                           if getattr(spec.config, f.name) != getattr(defaults, f.name)}
                print(f"{spec.name} ({spec.dataset}): {spec.description}\n    settings: "
                      f"{' '.join(f'{k}={v}' for k, v in changed.items()) or 'the defaults'}")
            return
        if args.chain not in chains:
            raise ValueError(f"--chain {args.chain}: not in {args.chains or CHAINS_FILE} "
                             f"(chains: {', '.join(chains)})")
        run(chains[args.chain], args)


def run(spec, args) -> None:
    """Resolve the dataset and settings, hold the output, run every stage, print the report."""
    import torch

    from retromae_ir.chain.report import report
    from retromae_ir.chain.stages import check_chain_inputs, corpus_title, run_chain
    from retromae_ir.data.beir import resolve_beir
    from retromae_ir.hardware import bf16_is_fast
    from retromae_ir.io import output_lock
    from retromae_ir.logs import setup_logging

    config = spec.config.replace(args.set, pretrained=args.pretrained is not None)
    folder = args.folder or resolve_beir(spec.dataset, args.data_dir)
    check_chain_inputs(Path(folder), config, args.pretrained, args.model)
    output = args.output or Path("outputs") / f"chain-{spec.name}"
    bf16 = args.bf16 if args.bf16 is not None else bf16_is_fast("cuda" if torch.cuda.is_available() else "cpu")
    with output_lock(output):
        setup_logging(output / "chain.log")
        log.info("chain %s over %s: %s; bf16 %s", spec.name, folder, config, bf16)
        chains = run_chain(Path(folder), output, config, args.model, bf16, args.pretrained, not args.no_lucene)
        print(report(chains, output, corpus_title(Path(folder), config)))


if __name__ == "__main__":
    sys.exit(main())
