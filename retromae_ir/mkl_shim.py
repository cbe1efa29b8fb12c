"""``python -m retromae_ir.mkl_shim``: build (once) and print the path of a one-function library that, put in
``LD_PRELOAD``, lets the MKL inside PyTorch run its AVX-512 kernels on AMD CPUs.

Why: MKL chooses its kernels by CPU vendor as well as by instruction set, and on a non-Intel CPU it takes its AVX2
path even where the CPU has AVX-512. On AMD's AVX-512 EPYC (2 threads, fp32) MKL's sgemm then runs at 207
GFLOP/s against 493 with this library, and PyTorch's CPU flash attention, whose inner products are MKL's, at 107
against 190 GFLOP/s (``benchmarks/gemm_routes.py --attention``, docs/encoders.md). The library defines MKL's
vendor check, ``mkl_serv_intel_cpu_true``, as true; PyTorch's wheels export that symbol, so the dynamic linker
binds MKL's calls to the preloaded definition. MKL still reads the CPU's feature flags for each instruction set,
so it runs only kernels the CPU has; it changes which kernels run, not what they compute: vectors within fp32
rounding of the default's, where a tie at a sparse vector's k-th weight may resolve to the other term (measured in
docs/encoders.md). Opt-in and per process::

    LD_PRELOAD=$(python -m retromae_ir.mkl_shim) python -m retromae_ir.encode corpus ... --compile

On an Intel CPU the check is true already and the library changes nothing. Building needs a C compiler (``cc``,
or ``$CC``), which ``--compile`` needs anyway. The library goes to ``$RETROMAE_IR_CACHE/mkl_shim`` (default
``~/.cache/retromae_ir/mkl_shim``); ``LD_PRELOAD`` splits on spaces and colons, so a path with either is refused
(the loader would skip it without a word, and the run would go at the default's speed).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from retromae_ir.c_library import build_library, library_name
from retromae_ir.cli import add_debug_flag, command
from retromae_ir.io import cache_dir

SOURCE = "/* MKL's CPU-vendor check, answered 'Intel': see retromae_ir/mkl_shim.py */\n" \
         "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
STEM = "libretromae_ir_mkl_intel_cpu_true"
FLAGS = ("-O2",)
LIBRARY = library_name(STEM, SOURCE, FLAGS)
CACHE_PART = "mkl_shim"
PRELOAD_SEPARATORS = frozenset(" \t\n:")


def build(folder: Path | None = None) -> Path:
    """The shim library in ``folder`` (the cache by default), compiled there first if it is not."""
    folder = Path(folder or cache_dir(CACHE_PART))
    target = folder / LIBRARY
    if PRELOAD_SEPARATORS & set(str(target.absolute())):
        raise ValueError(f"{target.absolute()} holds a space or a colon, which LD_PRELOAD reads as a separator: "
                         "give --cache-dir (or RETROMAE_IR_CACHE) a folder without them")
    return build_library(SOURCE, target, FLAGS)


def loaded() -> bool:
    """Whether this process runs with the shim (its library is among the mapped files)."""
    try:
        return STEM in Path("/proc/self/maps").read_text()
    except OSError:
        return False


@command
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retromae_ir.mkl_shim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"where the library is built (default: $RETROMAE_IR_CACHE/{CACHE_PART}, else "
                             f"~/.cache/retromae_ir/{CACHE_PART})")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    print(build(args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
