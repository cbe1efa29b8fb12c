"""C libraries of our own: a small C source compiled into a shared library once, in the cache (the MKL shim,
``retromae_ir.mkl_shim``; DupMAE's fused OT max-pool, ``retromae_ir.encode.fused_max_pool``; the BERT layers of
``--compile kernels``, ``retromae_ir.encode.kernel_backbone``), whether this CPU runs the AVX2 ones, and the panel
layout their products read."""
from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

AVX2_CAPABILITIES = ("AVX2", "AVX512")  # PyTorch CPU capabilities with AVX2 and FMA: our AVX2 kernels run


REGISTER_BLOCK = Path(__file__).with_name("encode") / "register_block.h"


def kernel_source(path: Path) -> str:
    """The text of one of our AVX2 kernels as it is compiled: the register block they share
    (``encode/register_block.h``), then the kernel's own file."""
    return REGISTER_BLOCK.read_text() + path.read_text()


def library_name(stem: str, source: str, flags: tuple[str, ...]) -> str:
    """``<stem>-<digest>.so``: the digest of the source, the flags and the compiler's command (``$CC``) in the
    name, so a library built from another version's source, with other flags or by another compiler is never
    taken for this one's (an upgraded compiler of the same name is not told apart)."""
    digest = hashlib.sha256("\0".join((source, *flags, compiler_command())).encode()).hexdigest()[:12]
    return f"{stem}-{digest}.so"


def compiler_command() -> str:
    return os.environ.get("CC") or "cc"


def build_library(source: str, target: Path, flags: tuple[str, ...] = ("-O2",)) -> Path:
    """``target`` compiled from ``source`` with ``flags`` by ``$CC`` (default ``cc``), unless it exists. Written
    beside itself and renamed, so a concurrent build or a reader sees the whole library or none. No compiler:
    FileNotFoundError; a failed compilation: ValueError with the compiler's message."""
    target = Path(target)
    if target.is_file():
        return target
    compiler = shlex.split(compiler_command())  # CC may carry a launcher or flags: "ccache gcc"
    if not compiler or shutil.which(compiler[0]) is None:
        raise FileNotFoundError(f"no C compiler {compiler_command()!r} on PATH to build {target} "
                                "(install gcc or set CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.stem}.") as work:
        source_file, library = Path(work) / "source.c", Path(work) / target.name
        source_file.write_text(source)
        done = subprocess.run([*compiler, "-shared", "-fPIC", *flags, "-o", str(library), str(source_file)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ValueError(f"{shlex.join(compiler)} could not build {target}: {done.stderr.strip()}")
        os.replace(library, target)
    return target


def avx2_missing() -> str | None:
    """Why this machine cannot run our AVX2 + FMA kernels (as a clause: "... because <reason>"), or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"this is a {platform.machine()} machine, not x86-64"
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in AVX2_CAPABILITIES:
        return f"PyTorch's CPU capability here is {capability}, without AVX2"
    return None


def panels_of(matrix: torch.Tensor, width: int) -> torch.Tensor:
    """[ceil(n / width), depth, width]: ``matrix``'s rows in panels of ``width``, zero past the last row (the
    layout our kernels' products read: one panel's ``width`` values of each depth index side by side)."""
    rows, depth = matrix.shape
    padded = torch.zeros(-(-rows // width) * width, depth, dtype=matrix.dtype)
    padded[:rows] = matrix
    return padded.view(-1, width, depth).transpose(1, 2).contiguous()
