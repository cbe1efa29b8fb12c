"""Compiling a small C source into a shared library once, in the cache: the MKL shim (``retromae_ir.mkl_shim``) and
DupMAE's fused OT max-pool kernel (``retromae_ir.encode.fused_max_pool``) are built this way on first use."""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path


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
