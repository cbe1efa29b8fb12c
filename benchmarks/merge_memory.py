"""Peak memory and time of ``merge`` over an existing chunk cache: what building an index of N documents needs.

    .venv/bin/python benchmarks/hybrid_scale.py --docs 1000000 --work /tmp/hs      # writes the chunks (and an index)
    .venv/bin/python benchmarks/merge_memory.py --work /tmp/hs --output /tmp/merged [--lucene]

Merges the chunks that ``hybrid_scale.py`` left under ``--work``/index/.work into ``--output`` (the same code
``python -m retromae_ir.encode merge`` runs) and prints the peaks of RSS and its anonymous and file-backed parts,
sampled every 20 ms in this process (absolute, not less what it held before; with ``--lucene`` the indexer's JVM is
a child process whose memory is not in them). Run it with ``PYTHONPATH`` pointing at another
checkout of ``retromae_ir`` to compare two versions on the same chunks.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid_scale import Memory  # noqa: E402

GIB = 1 << 30


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/merge_memory.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="a hybrid_scale.py --work folder")
    parser.add_argument("--output", type=Path, required=True, help="where the merged index goes (replaced)")
    parser.add_argument("--lucene", action="store_true", help="also the JsonVectorCollection and the Lucene index")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    from retromae_ir.encode.cards import load_card
    from retromae_ir.encode.corpus import merge

    card = load_card(args.work / "card.yaml")
    (work,) = (args.work / "index" / ".work").glob("*-of-1")
    vocab = [f"t{i}" for i in range(json.loads((args.work / "build.json").read_text())["settings"]["vocab"])]
    shutil.rmtree(args.output, ignore_errors=True)
    args.output.mkdir(parents=True)
    memory = Memory()
    memory.mark("before")
    start = time.perf_counter()
    merge(args.output, card, vocab, threads=args.threads, work=work, lucene=args.lucene)
    seconds = time.perf_counter() - start
    report = memory.report()
    before = report["marks"]["before"]
    result = {"merge_s": round(seconds, 1), "lucene": args.lucene,
              "documents": json.loads((args.output / "manifest.json").read_text())["documents"],
              **{f"peak_{key}_gib": round(report["peak"][key] / GIB, 3) for key in ("VmRSS", "RssAnon", "RssFile")},
              **{f"before_{key}_gib": round(before[key] / GIB, 3) for key in ("VmRSS", "RssAnon", "RssFile")}}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
