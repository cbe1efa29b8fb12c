"""Child processes that die with their parent.

The Lucene indexer runs as ``python -m pyserini.index.lucene`` (its JVM stays out of this process). Killed with
``kill -9``, a parent runs no clean-up, so the kernel has to end the child: Linux's parent-death signal
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``, set in the child between fork and exec) does. On an exception in the parent
(Ctrl-C), ``subprocess.run`` kills the child itself.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """A ``preexec_fn`` that asks for SIGKILL when this process dies. libc is loaded here, in the parent: the
    forked child only makes the call (loading a library after fork can deadlock in a threaded parent)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request was made: no signal will come
            os._exit(1)

    return preexec


def run_child(command: list[str], on_line: Callable[[str], None] | None = None,
              cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(command, cwd=cwd)`` with its output captured (stdout and stderr in one stream, returned as
    ``stdout``), the child killed whenever this process dies. ``on_line`` sees each line as it comes (a long
    child's progress, into the job's log)."""
    preexec = _die_with_parent() if sys.platform.startswith("linux") else None
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8",
                          errors="backslashreplace", preexec_fn=preexec,  # a stray byte kills nothing
                          cwd=cwd) as child:
        try:
            lines = []
            for line in child.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            child.wait()
        except BaseException:  # Ctrl-C in the parent: the child goes too
            child.kill()
            raise
    return subprocess.CompletedProcess(command, child.returncode, "".join(lines), "")
