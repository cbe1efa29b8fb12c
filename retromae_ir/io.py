"""Atomic file output and one writer per output.

Every command writes to a temporary path and renames, so an interrupted or failed job never leaves a half-written
file (or directory) where a finished one is expected; the renamed file gets the ordinary mode of the user's umask,
not the 0600 of a temporary file. ``output_lock`` makes a second writer of the same output fail at once.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success rename it onto ``path``, on error delete it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; on success it replaces ``path`` (removed first if present)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB blocks: tells whether an index was built from this file."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class OutputLockedError(RuntimeError):
    """Another process is writing the same output."""


def lock_path(output: str | os.PathLike) -> Path:
    """``.<name>.lock`` beside the output: outside it, so replacing the output directory keeps the lock."""
    target = Path(output).resolve()
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def output_lock(output: str | os.PathLike) -> Iterator[Path]:
    """Hold an advisory lock (``filelock``) on ``output`` for the life of the block; a second writer of the same
    output fails at once with :class:`OutputLockedError` naming the holder's PID. The lock is released when the
    holder exits, however it exits (the kernel drops ``flock`` locks of a dead process)."""
    from filelock import FileLock, Timeout

    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = path.with_name(path.name + ".pid")  # filelock truncates the lock file itself on open
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        holder = owner.read_text().strip() if owner.is_file() else "unknown"
        raise OutputLockedError(f"{output} is being written by another process (PID {holder}); wait for it to "
                                f"finish or write to another output") from None
    try:
        owner.write_text(f"{os.getpid()}\n")
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            owner.unlink()
        lock.release()
