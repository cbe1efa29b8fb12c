"""Pre-training speed and memory: sequences/s and peak RSS per method, backbone, max length and precision,
next to this machine's matmul ceiling and the RetroMAE authors' code measured on the same kind of machine.

    python benchmarks/pretrain_speed.py --output docs/figures/pretrain-speed.json

Each configuration runs in its own subprocess (so peak RSS is its own): one warm-up step, then timed
optimizer steps (forward, backward, AdamW) on random-token batches of full length. bf16 (autocast) is skipped
on a machine without native bf16 (no AVX512-BF16/AMX; its bf16 ceiling is not even timed) or whose bf16 matmul
is slower than its fp32 one: ``--force-bf16`` runs it.
The ceiling is the encode benchmark's (``encode_search.matmul_ceiling``: a 2048 product by the faster of MKL's
``a @ b`` and oneDNN's packed route, best of three rounds); before 2026-11-24 this script timed one MKL product,
which on AMD CPUs with AVX-512 is half the real ceiling (docs/encoders.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from retromae_ir.cli import Repeatable

AUTHORS = {  # RetroMAE authors' code, HF Trainer, fp32, MiniLM masked LM, 2 threads (docs: environment.md)
    ("retromae", 128): 3.9, ("dupmae", 128): 3.4, ("retromae", 512): 0.62, ("dupmae", 512): 0.57}
SHAPES = {128: 16, 512: 4}  # max length -> batch size, as in the authors' measurements
BACKBONES = ("minilm", "bert-base-random")


def backbone_dir(name: str, workdir: Path) -> str:
    """The packaged MiniLM, or a randomly initialised bert-base configuration saved once (no download)."""
    from retromae_ir.packaged import default_model

    if name == "minilm":
        return default_model()
    path = workdir / "bert-base-random"
    if not (path / "config.json").is_file():
        import torch
        from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

        torch.manual_seed(0)
        BertForMaskedLM(BertConfig()).save_pretrained(path)  # BertConfig() defaults = bert-base-uncased shape
        AutoTokenizer.from_pretrained(default_model()).save_pretrained(path)
    return str(path)


def master_arguments(model_dir: str, segments, workdir: Path):
    """MASTER with the tasks that need no generated texts (MKP, CMP, NPR); keyword statistics counted on the
    benchmark's own segments (DOR/GOR decoders cost the same as MKP's: one more 2-layer decoder each)."""
    from transformers import AutoTokenizer

    from retromae_ir.pretrain.keywords import count_corpus
    from retromae_ir.pretrain.master import MasterArguments

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    stats = workdir / f"master-stats-{len(segments)}x{len(segments[0].input_ids)}.json"
    count_corpus(tokenizer.batch_decode([s.input_ids for s in segments]), tokenizer, model_dir).save(stats)
    return MasterArguments(master_tasks="mkp,cmp,npr", master_corpus_stats=str(stats))


def measure_one(method: str, model_dir: str, length: int, bf16: bool, steps: int, threads: int, device: str,
                workdir: Path) -> dict:
    """Seconds per optimizer step and sequences/s of one configuration (run inside its own process)."""
    import torch

    from retromae_ir.pretrain import get_method
    from retromae_ir.pretrain.arguments import MaskingArguments
    from retromae_ir.pretrain.collate import Segment

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    batch_size = SHAPES[length]
    generator = torch.Generator().manual_seed(0)
    # documents of two in-order segments, so MASTER's NPR has a neighbouring span for half of them
    segments = [Segment(str(i // 2), i % 2, tuple(torch.randint(1996, 29000, (length - 2,), generator=generator).tolist()))
                for i in range(batch_size)]
    method_args = master_arguments(model_dir, segments, workdir) if method == "master" else None
    model = get_method(method).from_pretrained(model_dir, MaskingArguments(), method_args).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    examples = model.make_examples(segments)
    collator = model.make_collator()

    def step() -> None:
        batch = {k: v.to(device) for k, v in collator(examples, generator).items()}
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            losses = model(batch)
        losses["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:  # the warm-up step also counts the step's FLOPs
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    flops = counter.get_total_flops()
    return {"s_per_step": seconds, "seq_per_s": batch_size / seconds, "batch_size": batch_size,
            "gflop_per_step": flops / 1e9, "achieved_gflops": flops / 1e9 / seconds,
            "peak_rss_gb": peak_rss_bytes() / 2 ** 30}


def peak_rss_bytes() -> int:
    """This process's own peak RSS (VmHWM): ru_maxrss of a child started by fork/exec can carry its parent's."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def run_child(args, method: str, backbone: str, length: int, precision: str) -> dict:
    command = [sys.executable, __file__, "--one", method, backbone, str(length), precision, "--steps", str(args.steps),
               "--threads", str(args.threads), "--device", args.device, "--workdir", str(args.workdir)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(report: dict) -> str:
    ceiling = report["ceiling"]
    bf16 = f"{ceiling['bf16']:.1f} GFLOP/s" if "bf16" in ceiling else "not timed (not native here)"
    lines = [f"matmul ceiling ({report['threads']} threads, n=2048, faster of MKL and oneDNN): fp32 "
             f"{ceiling['fp32']:.0f} GFLOP/s, bf16 {bf16}; load average during the run {report['loadavg']}", "",
             "| method | backbone | max length x batch | precision | seq/s | s/step | GFLOP/s (% of fp32 ceiling) "
             "| peak RSS GB | authors' code (fp32) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in report["rows"]:
        authors = AUTHORS.get((row["method"], row["length"])) if row["backbone"] == "minilm" else None
        if "skipped" in row:
            measured = f"skipped: {row['skipped']} | | | "
        else:
            share = 100 * row["achieved_gflops"] / ceiling["fp32"]
            measured = (f"{row['seq_per_s']:.2f} | {row['s_per_step']:.2f} | {row['achieved_gflops']:.1f} ({share:.0f}%) "
                        f"| {row['peak_rss_gb']:.2f}")
        lines.append(f"| {row['method']} | {row['backbone']} | {row['length']} x {SHAPES[row['length']]} | "
                     f"{row['precision']} | {measured} | {authors if authors is not None else '-'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks/pretrain_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", action=Repeatable, default=["retromae", "dupmae", "master"])
    parser.add_argument("--backbones", nargs="+", action=Repeatable, default=list(BACKBONES), choices=BACKBONES)
    parser.add_argument("--lengths", nargs="+", action=Repeatable, type=int, default=[128, 512], choices=sorted(SHAPES))
    parser.add_argument("--precisions", nargs="+", action=Repeatable,
                        default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=2, help="timed optimizer steps after one warm-up step")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--force-bf16", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("outputs/benchmarks"))
    parser.add_argument("--output", type=Path, help="JSON report (a Markdown table goes to stdout)")
    parser.add_argument("--one", nargs=4, metavar=("METHOD", "BACKBONE", "LENGTH", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        method, backbone, length, precision = args.one
        model_dir = backbone_dir(backbone, args.workdir)
        print(json.dumps(measure_one(method, model_dir, int(length), precision == "bf16", args.steps, args.threads,
                                     args.device, args.workdir)))
        return
    from retromae_ir.io import atomic_write

    from encode_search import matmul_ceiling  # benchmarks/ is the script's own folder, first on sys.path

    from retromae_ir.hardware import bf16_is_fast

    # bf16 timed only where it is native or forced: an emulated 2048 bf16 product takes minutes (AVX2 CPUs)
    timed = ("fp32", "bf16") if bf16_is_fast(args.device) or args.force_bf16 else ("fp32",)
    ceiling = matmul_ceiling(args.threads, device=args.device, dtypes=timed)
    slow_bf16 = args.device == "cpu" and ceiling.get("bf16", 0.0) < ceiling["fp32"]
    rows = []
    for backbone in args.backbones:
        backbone_dir(backbone, args.workdir)
        for length in args.lengths:
            for method in args.methods:
                for precision in args.precisions:
                    row = {"method": method, "backbone": backbone, "length": length, "precision": precision}
                    if precision == "bf16" and slow_bf16 and not args.force_bf16:
                        row["skipped"] = "bf16 matmul slower than fp32 on this CPU"
                    else:
                        row.update(run_child(args, method, backbone, length, precision))
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    report = {"threads": args.threads, "device": args.device, "ceiling": ceiling, "rows": rows,
              "loadavg": [round(x, 1) for x in os.getloadavg()], "steps": args.steps}
    if args.output:
        with atomic_write(args.output) as handle:
            json.dump(report, handle, indent=2)
    print(markdown(report))


if __name__ == "__main__":
    main()
