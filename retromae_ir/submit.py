"""Prepare a TREC submission: ``python -m retromae_ir.submit RUN --topics FILE --tag TAG [--output DIR]``.

Checks everything a TREC submission system rejects, reports every violation at once (one ``error:`` line each,
naming the line and topic, then their count; exit status 2), and only when the run is clean writes ``DIR/TAG.gz``
(the run in canonical form, tagged TAG) and ``DIR/TAG.description.txt``. Nothing is written when a check fails.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import re
import sys
import tempfile
from pathlib import Path

from retromae_ir import __version__
from retromae_ir.cli import add_debug_flag, command
from retromae_ir.data.readers import iter_lines, load_topics
from retromae_ir.io import atomic_write, claim_output, file_digest, make_dir, remove_stale_temporaries_of
from retromae_ir.runs import MAX_DEPTH, run_violations, untied, write_trec_run

TAG_PATTERN = re.compile(r"^[A-Za-z0-9]{1,12}$")


def tag_violations(tag: str) -> list[str]:
    if TAG_PATTERN.match(tag):
        return []
    return [f"tag {tag!r} must be 1 to 12 letters and digits (TREC run tags allow nothing else)"]


def q0_violations(run_path: Path) -> list[str]:
    """The second column must be the literal ``Q0``."""
    bad = []
    for number, line in iter_lines(run_path):
        fields = line.split()
        if len(fields) == 6 and fields[1] != "Q0":
            bad.append(f"{run_path}:{number}: second column is {fields[1]!r}, expected 'Q0' (query {fields[0]!r})")
    return bad


def coverage_violations(run: dict, topics: dict[str, str], topics_path: Path) -> list[str]:
    missing = [qid for qid in topics if qid not in run]
    unknown = [qid for qid in run if qid not in topics]
    out = []
    if missing:
        out.append(f"{len(missing)} topic(s) of {topics_path} have no results: {', '.join(missing[:20])}"
                   + (" ..." if len(missing) > 20 else ""))
    if unknown:
        out.append(f"{len(unknown)} topic(s) in the run are not in {topics_path}: {', '.join(unknown[:20])}"
                   + (" ..." if len(unknown) > 20 else ""))
    return out


def check_submission(run_path: Path, topics_path: Path, tag: str) -> tuple[dict, list[str]]:
    """The parsed run and every violation (empty when the run can be submitted)."""
    run, _, violations = run_violations(run_path, MAX_DEPTH)
    violations += q0_violations(run_path)
    violations += coverage_violations(run, load_topics(topics_path), topics_path)
    violations += tag_violations(tag)
    return run, violations


def write_submission(run: dict, tag: str, out_dir: Path, source: Path, topics_path: Path,
                     description: str) -> tuple[Path, Path]:
    """``out_dir/TAG.gz`` and ``out_dir/TAG.description.txt``, each written atomically, the pair under the output's
    lock (two submissions of one tag never mix an archive with the other's description)."""
    make_dir(out_dir)
    with claim_output(out_dir / f"{tag}.gz"):
        remove_stale_temporaries_of(out_dir / f"{tag}.description.txt")  # the pair's other file, same lock
        return _write_pair(run, tag, out_dir, source, topics_path, description)


def _write_pair(run: dict, tag: str, out_dir: Path, source: Path, topics_path: Path,
                description: str) -> tuple[Path, Path]:
    (out_dir / f"{tag}.description.txt").unlink(missing_ok=True)  # never an earlier run's description (and digest)
    # the file's rank order (our runs: ties by docid ascending), kept under trec_eval; the writer's own order then
    # agrees with it
    untangled = {qid: untied(list(hits.items())) for qid, hits in run.items()}
    run, moved = {qid: dict(hits) for qid, (hits, _) in untangled.items()}, sum(n for _, n in untangled.values())
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".{tag}.gz.", suffix=".tmp") as tmp:  # what a claim clears
        plain = write_trec_run(Path(tmp) / "run.txt", run, tag)
        with atomic_write(out_dir / f"{tag}.gz", "wb") as handle, open(plain, "rb") as text:
            handle.write(gzip.compress(text.read(), mtime=0))
    digest = file_digest(out_dir / f"{tag}.gz")
    lines = [f"tag: {tag}", f"source run: {source}", f"topics: {topics_path} ({len(run)} topics)",
             f"results: {sum(len(hits) for hits in run.values())} (at most {MAX_DEPTH} per topic)",
             f"sha256 of {tag}.gz: {digest}", f"prepared: {datetime.date.today().isoformat()} with retromae-ir "
             f"{__version__}", f"scores lowered by a few float32 steps to keep the ranking under trec_eval: {moved}",
             "", description or "(no description given: pass --description)"]
    with atomic_write(out_dir / f"{tag}.description.txt") as handle:
        handle.write("\n".join(lines) + "\n")
    return out_dir / f"{tag}.gz", out_dir / f"{tag}.description.txt"


@command
def main(argv=None) -> int:
    parser = add_debug_flag(argparse.ArgumentParser(prog="python -m retromae_ir.submit",
                                                    description=__doc__.split("\n")[0]))
    parser.add_argument("run", type=Path)
    parser.add_argument("--topics", type=Path, required=True, help="the topics the run must answer, all of them")
    parser.add_argument("--tag", required=True, help="run tag: 1-12 letters and digits")
    parser.add_argument("--output", type=Path, default=Path("runs/submissions"))
    parser.add_argument("--description", default="", help="free text for the description file")
    args = parser.parse_args(argv)
    run, violations = check_submission(args.run, args.topics, args.tag)  # a missing file: one line, exit 2
    if violations:
        for violation in violations:
            print(f"error: {violation}", file=sys.stderr)
        print(f"error: {args.run}: {len(violations)} violation(s); nothing written", file=sys.stderr)
        return 2
    gz, description = write_submission(run, args.tag, args.output, args.run, args.topics, args.description)
    print(f"wrote {gz} and {description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
