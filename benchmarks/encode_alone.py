"""One encoder alone in its process, as ``python -m retromae_ir.encode`` runs it, on consecutive slices of scifact
documents it has not encoded before (batch shapes as new to oneDNN as in a real corpus), then on the first slice
again (every shape seen). Per slice: docs/s, GFLOP/s and its fraction of the fp32 (``--bf16``: bf16) matmul ceiling
measured in the same run (the highest of the measurements before and after each slice), CPU seconds in user and
kernel mode, and minor page faults.

``encode_search.py`` runs every system interleaved in one process, where the others' allocations have already
grown the heap; here an encoder pays its own page faults, as it does in the CLI.

    .venv/bin/python benchmarks/encode_alone.py --encoder dupmae-minilm --compile
    .venv/bin/python benchmarks/encode_alone.py --encoder minilm-cls --compile
    .venv/bin/python benchmarks/encode_alone.py --encoder minilm-cls --compile openvino
    .venv/bin/python benchmarks/encode_alone.py --encoder minilm-cls --compile openvino --full-last-layer
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import resource
import time
from pathlib import Path
from unittest import mock

import torch

from retromae_ir.cli import add_compile_argument

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/encode_alone.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="dupmae-minilm", help="an encoder card (default: dupmae-minilm)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--slice", type=int, default=500, help="documents per slice")
    parser.add_argument("--slices", type=int, default=3, help="fresh slices, before the first is encoded again")
    parser.add_argument("--threads", type=int, default=2)
    add_compile_argument(parser)  # EncoderModel.compile_backbone
    parser.add_argument("--full-last-layer", action="store_true",
                        help="keep every row of a [CLS]-pooled dense card's last layer (as before first_token.py)")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 autocast (the fraction is then of the bf16 ceiling, measured in the same run)")
    parser.add_argument("--batch-tokens", type=batch_tokens, default="auto",
                        help="tokens per forward pass: a number, 'none' (no cap) or 'auto' (the default: "
                             "retromae_ir.encode.batching's cap from the last-level cache)")
    args = parser.parse_args(argv)
    if args.slice < 1 or args.slices < 1:
        parser.error("--slice and --slices must be at least 1")
    from encode_search import matmul_ceiling, model_flops_per_doc, token_counts  # benchmarks/ is on sys.path

    from retromae_ir.encode import MODEL_CLASSES, EncoderModel, load_card

    logging.disable(logging.WARNING)  # the packaged MiniLM's missing-MLM-head report
    precision = "bf16" if args.bf16 else "fp32"
    ceilings = [matmul_ceiling(args.threads, dtypes=(precision,))[precision]]  # again after each slice
    torch.set_num_threads(args.threads)
    texts = [f"{row['title']} {row['text']}" for row in map(json.loads, args.corpus.open())]
    model_class = MODEL_CLASSES[load_card(args.encoder).kind]
    with (mock.patch.object(model_class, "_trim_for_inference", lambda self: None) if args.full_last_layer
          else contextlib.nullcontext()):
        model = EncoderModel.from_card(args.encoder, device="cpu", bf16=args.bf16)
    model.batch_tokens = args.batch_tokens
    if args.compile:
        model.compile_backbone(args.compile)
    warm = texts[-64:]  # compilation and the first batch, on documents no slice holds
    model.encode_passage(warm)
    slices = [(i * args.slice, (i + 1) * args.slice) for i in range(args.slices)] + [(0, args.slice)]
    rows = []
    for begin, end in slices:
        part = texts[begin:end]
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        model.encode_passage(part)
        seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        gflops = flops(model, part, model_flops_per_doc, token_counts) / seconds / 1e9
        rows.append({"documents": f"{begin}-{end}", "seen": (begin, end) in slices[:len(rows)],
                     "docs_per_s": len(part) / seconds, "gflops_per_s": gflops,
                     "user_s": after.ru_utime - before.ru_utime, "system_s": after.ru_stime - before.ru_stime,
                     "minor_page_faults": after.ru_minflt - before.ru_minflt})
        print(json.dumps(rows[-1]), flush=True)
        ceilings.append(matmul_ceiling(args.threads, dtypes=(precision,))[precision])
    # the highest ceiling of the process: one measured in a slow moment (at start-up, say) flattered every fraction
    ceiling = max(ceilings)
    for row in rows:
        row["fraction_of_ceiling"] = row["gflops_per_s"] / ceiling
    compiled = f" --compile {args.compile}" if args.compile else ""
    compiled += " --full-last-layer" if args.full_last_layer else ""
    compiled += f" --batch-tokens {args.batch_tokens or 'none'}" if args.batch_tokens != "auto" else ""
    print(f"tokens per forward pass: {model.max_batch_tokens}")
    print(f"\n{args.encoder}{compiled}, {precision}, {args.threads} threads; {precision} ceiling "
          f"{ceiling:.1f} GFLOP/s (the highest of {len(ceilings)} measured: before and after each slice; "
          f"{', '.join(f'{c:.1f}' for c in ceilings)})")
    print("| documents | shapes | docs/s | of the ceiling | user s | system s | minor page faults |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['documents']} | {'seen' if row['seen'] else 'new'} | {row['docs_per_s']:.1f} | "
              f"{row['fraction_of_ceiling']:.2f} | {row['user_s']:.1f} | {row['system_s']:.1f} | "
              f"{row['minor_page_faults']} |")
    return 0


def batch_tokens(text: str) -> int | None | str:
    """``--batch-tokens``: a positive number, ``none`` or ``auto`` (``EncoderModel.batch_tokens``'s values)."""
    if text in ("auto", "none"):
        return None if text == "none" else text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, 'none' or 'auto', got {text!r}")
    return int(text)


def flops(model, texts: list[str], model_flops_per_doc, token_counts) -> float:
    """The encode benchmark's count of the work that runs (``encode_search.model_flops_per_doc``): the encoder's
    matmuls (the last layer's first row only for a [CLS]-pooled dense card), plus the MLM head over the ordinary
    tokens for a model with one (DupMAE)."""
    tokens, ordinary = token_counts(model.tokenizer, texts, model.card.max_passage_length)
    head = hasattr(model, "lm_head")
    return float(model_flops_per_doc(model.backbone_config, tokens, head, ordinary if head else None,
                                     first_token_last_layer=model.first_token_last_layer).sum())


if __name__ == "__main__":
    raise SystemExit(main())
