"""Logging set-up shared by the command-line jobs: messages to stderr and to a log file beside the outputs."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(log_file: Path | None = None, level: int = logging.INFO) -> None:
    """Log to stderr and, when given, append to ``log_file`` (its folder is created)."""
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(level=level, format=FORMAT, handlers=handlers, force=True)
    for chatty in ("faiss.loader", "matplotlib", "urllib3"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


@contextlib.contextmanager
def log_beside(output: str | Path):
    """Append the job's log to ``OUTPUT.log`` while the block runs. Entered after the inputs are checked; a block
    that raises an error removes a log it created, so a refused run leaves nothing behind (the error is on stderr);
    an interrupted one (Ctrl-C, a kill) leaves it beside what it will resume."""
    log_file = Path(f"{output}.log")
    created = not log_file.exists()
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    failed = False
    try:
        yield log_file
    except Exception:
        failed = True
        raise
    finally:
        root.removeHandler(handler)
        handler.close()
        if failed and created:
            log_file.unlink(missing_ok=True)
