"""One CLI convention for every command (#14): ``--help`` alone exits 0, its usage line names the command as a user
types it (``python -m retromae_ir.pretrain``, ``eval/beir_all.py``), and it shows no ``--x_y`` underscore flag. Every
``retromae_ir`` command and ``eval/`` script runs its ``main`` under ``retromae_ir.cli.command`` (errors a user can
fix: one ``error:`` line, exit 2; ``--debug`` for the traceback, listed in its help); tests/test_bad_inputs.py
checks what that gives on bad input.

Every command is found, not listed: each ``retromae_ir`` module with a ``__main__`` guard (``pkg/__main__.py`` runs
as ``python -m pkg``) and each script under ``eval/`` and ``benchmarks/``. One process a command, run in parallel:
importing torch dominates each.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAIN_GUARD = re.compile(r'^if __name__ == "__main__":', re.MULTILINE)
UNDERSCORE_FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9]+_[\w-]*")
DECORATED_MAIN = re.compile(r"^@command\b.*\n(?:@.*\n)*def main\(", re.MULTILINE)


def command_files() -> list[tuple[str, list[str], Path]]:
    """(the command as typed, its argv, its source file) for every command-line entry point."""
    found = []
    for path in sorted((REPO / "retromae_ir").rglob("*.py")):
        if MAIN_GUARD.search(path.read_text(encoding="utf-8")):
            parts = path.relative_to(REPO).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__main__" else parts)
            found.append((f"python -m {module}", ["-m", module], path))
    for folder in ("eval", "benchmarks"):
        for path in sorted((REPO / folder).glob("*.py")):
            if MAIN_GUARD.search(path.read_text(encoding="utf-8")):
                script = path.relative_to(REPO).as_posix()
                found.append((script, [script], path))
    return found


def commands() -> list[tuple[str, list[str]]]:
    """(the command as typed, its argv) for every command-line entry point."""
    return [(name, argv) for name, argv, _ in command_files()]


COMMANDS = commands()
# the error convention covers the package's commands and the evaluation scripts (benchmarks are measurements)
CONVENTION = {name: path for name, _, path in command_files() if not name.startswith("benchmarks/")}


def run_help(argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *argv, "--help"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1) * 2) as pool:
        return dict(zip([name for name, _ in COMMANDS], pool.map(run_help, [argv for _, argv in COMMANDS])))


def test_every_command_is_found():
    names = {name for name, _ in COMMANDS}
    assert {"python -m retromae_ir.pretrain", "python -m retromae_ir.rerank", "python -m retromae_ir.mine",
            "eval/beir_all.py", "benchmarks/encode_search.py"} <= names


@pytest.mark.parametrize("name", [name for name, _ in COMMANDS])
def test_help_follows_the_convention(helps, name):
    done = helps[name]
    assert done.returncode == 0, f"{name} --help exited {done.returncode}:\n{done.stderr[-2000:]}"
    assert re.match(rf"usage: {re.escape(name)}(\s|$)", done.stdout), \
        f"{name} --help does not call itself by the command as typed:\n{done.stdout[:300]}"
    assert not UNDERSCORE_FLAG.findall(done.stdout), f"{name} --help shows underscore flags"


@pytest.mark.parametrize("name", sorted(CONVENTION))
def test_errors_follow_the_convention(helps, name):
    assert DECORATED_MAIN.search(CONVENTION[name].read_text(encoding="utf-8")), \
        f"{name}: main is not decorated with retromae_ir.cli.command"
    assert "--debug" in helps[name].stdout, f"{name} --help does not list --debug"


def test_no_message_or_doc_names_an_underscored_flag():
    """Messages, docstrings and docs name flags as ``--help`` shows them (dashed): the MASTER ones were written
    ``--master_tasks`` in an error message and docs/pretraining.md while the help lists ``--master-tasks``."""
    explained = REPO / "retromae_ir" / "cli.py"  # says that HfArgumentParser also registers the underscored form
    files = [p for p in (REPO / "retromae_ir").rglob("*.py") if p != explained]
    files += [*(REPO / "docs").glob("*.md"), REPO / "README.md"]
    found = [f"{path.relative_to(REPO)}:{number}: {match}" for path in files
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for match in UNDERSCORE_FLAG.findall(line)]
    assert not found, found


def test_a_list_flag_given_twice_keeps_both_and_replaces_its_default():
    """`--set epochs=3 --set distill=true` kept only distill=true (argparse's store), exit 0."""
    import argparse

    from retromae_ir.chain.__main__ import build_parser
    from retromae_ir.cli import Repeatable

    assert build_parser().parse_args(["--set", "epochs=3", "--set", "distill=true"]).set == ["epochs=3", "distill=true"]
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", nargs="+", action=Repeatable, default=["a", "b"])
    assert parser.parse_args([]).sets == ["a", "b"]
    assert parser.parse_args(["--sets", "c", "--sets", "d"]).sets == ["c", "d"]


@pytest.mark.parametrize("method", ["retromae", "dupmae", "master"])
def test_each_pretraining_method_help_exits_0(method, capsys):
    """``--method X --help`` adds the method's options to the help; MASTER's had an unescaped ``%`` ("80% [MASK]"),
    and argparse's formatting of it stopped the help with exit 2."""
    from retromae_ir.pretrain.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--method", method, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m retromae_ir.pretrain") and not UNDERSCORE_FLAG.findall(out)
    if method == "master":
        assert "bert: 80% [MASK], 10% a random token" in " ".join(out.split())
