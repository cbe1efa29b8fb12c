"""The reproduction matrix: conditions declared in YAML, each a command with the scores it must give.

A condition runs ``eval/beir_all.py`` into its own folder, emptied first, with its indexes inside it, and
compares the results table's scores with the expected ones (within the file's tolerance). Nothing is reused: the
run and index caches are keyed by the data, the model and the encoding code's version, but not by the rest of the
code (search, evaluation) or the libraries, so a reused run could re-score what older code retrieved and a check
of today's code would pass on yesterday's results. The commands
are the ones a user would type, so the generated docs show exactly what was run.
"""
from __future__ import annotations

import math
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from retromae_ir import strict_yaml
from retromae_ir.process import run_child

CONDITIONS_FILE = Path(__file__).with_name("conditions.yaml")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Condition:
    name: str
    dataset: str
    expected: dict[str, float]
    retriever: str | None = None  # "bm25"
    encoder: str | None = None    # an encoder card name or path
    search: str | None = None     # default: the card's (hybrid for DupMAE cards, dense otherwise)
    description: str = ""
    extra_args: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        """The folder eval/beir_all.py writes this condition's results to: the name of the retriever its own code
        makes from the same arguments (bm25 with other --k1/--b, a card with another --search, each their own)."""
        import argparse

        from retromae_ir.evaluate.retrievers import add_retriever_arguments, make_retriever

        parser = argparse.ArgumentParser()
        add_retriever_arguments(parser)
        args, _ = parser.parse_known_args([*self.chooser, *self.extra_args])
        return make_retriever(args).name

    @property
    def chooser(self) -> list[str]:
        """The retriever's arguments of eval/beir_all.py."""
        return (["--retriever", self.retriever] if self.retriever
                else ["--encoder", self.encoder, *(["--search", self.search] if self.search else [])])

    def command(self, runs_root: Path) -> list[str]:
        folder = Path(runs_root) / self.name
        base = [sys.executable, str(REPO / "eval" / "beir_all.py"), "--datasets", self.dataset,
                "--runs-dir", str(folder), "--index-dir", str(folder / "indexes"),
                "--force"]  # the printed command too retrieves anew: a run file left there is never re-scored
        return base + self.chooser + list(self.extra_args)

    def results_csv(self, runs_root: Path) -> Path:
        return runs_root / self.name / self.label / "beir-results.csv"


@dataclass
class Matrix:
    tolerance: float
    conditions: dict[str, Condition]

    @classmethod
    def load(cls, path: Path = CONDITIONS_FILE) -> "Matrix":
        try:
            raw = strict_yaml.load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping with 'conditions', got {type(raw).__name__}")
        unknown = sorted(set(raw) - {"tolerance", "conditions"})
        if unknown:  # a misspelt 'tolerance' fell back to the default, a misspelt 'conditions' checked nothing
            raise ValueError(f"{path}: unknown top-level key(s) {', '.join(map(repr, unknown))}; expected 'tolerance' "
                             "and 'conditions'")
        if not isinstance(raw.get("conditions"), list) or not raw["conditions"]:
            raise ValueError(f"{path}: 'conditions' must be a non-empty list (without one nothing is checked)")
        tolerance = raw.get("tolerance", 0.0005)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < math.inf:
            raise ValueError(f"{path}: 'tolerance' must be a finite number >= 0, got {tolerance!r} (NaN or inf passes "
                             "every score)")
        conditions = {}
        for number, entry in enumerate(raw["conditions"], start=1):
            try:
                condition = Condition(**{**entry, "extra_args": tuple(entry.get("extra_args", ()))})
            except TypeError as exc:
                raise ValueError(f"{path}: condition {number} ({entry.get('name', '?')}): {exc}") from None
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(condition.name)) or condition.name.endswith(".log"):
                raise ValueError(f"{path}: condition {number} name {condition.name!r} must be one folder name "
                                 "(letters, digits, '.', '_', '-', not ending in .log; its runs go to "
                                 "RUNS_ROOT/<name>/, emptied first, its output to RUNS_ROOT/<name>.log)")
            if (condition.retriever is None) == (condition.encoder is None):
                raise ValueError(f"{path}: condition {condition.name!r} needs exactly one of retriever / encoder")
            if condition.retriever is not None and condition.search is not None:  # it was left out of the command
                raise ValueError(f"{path}: condition {condition.name!r}: 'search' is an encoder's search mode; "
                                 f"retriever {condition.retriever!r} has none")
            if not isinstance(condition.expected, dict) or not condition.expected or not all(
                    isinstance(v, (int, float)) and math.isfinite(v) for v in condition.expected.values()):
                raise ValueError(f"{path}: condition {condition.name!r} needs 'expected': a mapping of metric to a "
                                 f"finite score, got {condition.expected!r} (a condition without one checks nothing)")
            if condition.name in conditions:
                raise ValueError(f"{path}: condition {condition.name!r} is declared twice")
            conditions[condition.name] = condition
        return cls(float(tolerance), conditions)


@dataclass
class Outcome:
    condition: Condition
    scores: dict[str, float]
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def measured_scores(condition: Condition, runs_root: Path) -> dict[str, float]:
    """The condition's dataset row of its results CSV, keyed by plain metric name."""
    frame = pd.read_csv(condition.results_csv(runs_root))
    row = frame[frame["dataset"] == condition.dataset]
    if row.empty:
        raise RuntimeError(f"{condition.results_csv(runs_root)} has no row for {condition.dataset}")
    suffix = f" ({condition.label})"
    return {col[: -len(suffix)]: float(row.iloc[0][col]) for col in frame.columns if col.endswith(suffix)}


def compare(condition: Condition, scores: dict[str, float], tolerance: float) -> list[str]:
    failures = []
    for metric, expected in condition.expected.items():
        got = scores.get(metric)
        if got is None or not math.isfinite(got) or abs(got - expected) > tolerance:  # NaN compares as close
            failures.append(f"{metric}: expected {expected:.4f}, got {'nothing' if got is None else repr(got)}")
    return failures


def run_condition(condition: Condition, runs_root: Path, tolerance: float) -> Outcome:
    runs_root = Path(runs_root).resolve()  # the command runs in REPO: it must write where the scores are read
    command = condition.command(runs_root)
    folder = runs_root / condition.name  # one folder name (Matrix.load): never outside runs_root
    if folder.is_symlink():  # rmtree would leave what it points to, and the old runs in it would be re-scored
        return Outcome(condition, {}, [f"{folder} is a symbolic link: remove it, the runner empties a real folder"])
    try:
        shutil.rmtree(folder)  # runs and indexes of this code, none older
    except FileNotFoundError:
        pass
    log_file = runs_root / f"{condition.name}.log"  # beside its folder, which the command starts empty
    runs_root.mkdir(parents=True, exist_ok=True)
    print(f"running {condition.name} (its output: {log_file})", file=sys.stderr, flush=True)
    with open(log_file, "w", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n")

        def to_log(line: str) -> None:
            log.write(line + "\n")
            log.flush()

        result = run_child(command, to_log, cwd=REPO)
        log.write(f"exit {result.returncode}\n")
    if result.returncode != 0:
        return Outcome(condition, {}, [f"command failed (exit {result.returncode}): {shlex.join(command)}\n"
                                       f"{result.stdout[-2000:]}\n(all of it: {log_file})"])
    scores = measured_scores(condition, runs_root)
    return Outcome(condition, scores, compare(condition, scores, tolerance))


def render_docs(matrix: Matrix, runs_root: Path) -> str:
    """docs/reproductions.md: one section per condition with its exact command and expected scores."""
    lines = ["# Reproductions", "",
             "Generated by `python -m retromae_ir.repro --docs docs/reproductions.md` from "
             "`retromae_ir/repro/conditions.yaml`; `python -m retromae_ir.repro --all` re-runs every condition "
             f"and prints OK/FAIL (tolerance {matrix.tolerance}). Each condition starts from an empty folder "
             f"(`{_shown(runs_root)}/<condition>/`, its indexes inside it): no run or index of older code is reused. "
             f"The command's output goes to `{_shown(runs_root)}/<condition>.log` as it runs.",
             "",
             "| condition | dataset | " + " | ".join(_metrics(matrix)) + " |",
             "| --- | --- | " + " | ".join("---" for _ in _metrics(matrix)) + " |"]
    for c in matrix.conditions.values():
        cells = [f"{c.expected[m]:.4f}" if m in c.expected else "–" for m in _metrics(matrix)]
        lines.append(f"| {c.name} | {c.dataset} | " + " | ".join(cells) + " |")
    for c in matrix.conditions.values():
        command = _shown(shlex.join(["python"] + c.command(runs_root)[1:]))
        lines += ["", f"## {c.name}", "", c.description, "", "```bash", command, "```"]
    return "\n".join(lines) + "\n"


def _metrics(matrix: Matrix) -> list[str]:
    return sorted({m for c in matrix.conditions.values() for m in c.expected})


def _shown(text) -> str:
    """``text`` with the repository's path left out, as a user in its root types it."""
    return str(text).replace(str(REPO) + "/", "")
