"""Another process holding ``output_lock`` on a path: the second writer the lock tests need."""
from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def held_lock(output: Path) -> Iterator[int]:
    """A child process holds ``output_lock(output)`` for the block; yields its PID."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from retromae_ir.io import output_lock\n"
        f"with output_lock({str(output)!r}):\n    print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
