"""Logging set-up shared by the command-line jobs: messages to stderr and to a log file beside the outputs."""
from __future__ import annotations

import contextlib
import logging
import logging.handlers
from pathlib import Path

from retromae_ir.io import is_user_error

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
    refused by an error the user can fix (``io.is_user_error``: the one ``error:`` line a command prints) removes a
    log it created, so a refused run leaves nothing behind; a crash or an interruption keeps it, beside what it will
    resume."""
    log_file = Path(f"{output}.log")
    created = not log_file.exists()
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    refused = False
    try:
        yield log_file
    except Exception as error:
        refused = is_user_error(error)
        raise
    finally:
        root.removeHandler(handler)
        handler.close()
        if refused and created:
            log_file.unlink(missing_ok=True)


class HeldRecords(logging.handlers.MemoryHandler):
    """The package's log records from before a job's log file exists (a training command reads and tokenises
    its data before the trainer opens train.log), held to be written into it once it does (:func:`release_held`)."""

    def __init__(self):
        super().__init__(capacity=100_000, flushLevel=logging.CRITICAL + 1, flushOnClose=False)

    def shouldFlush(self, record) -> bool:
        return False  # only release_held writes them, in order, into the file


@contextlib.contextmanager
def hold_records(logger_name: str = "retromae_ir"):
    """Hold ``logger_name``'s records (at INFO and above) while the block runs (they reach the console as ever)."""
    held = HeldRecords()
    logger = logging.getLogger(logger_name)
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(held)
    try:
        yield held
    finally:
        logger.removeHandler(held)
        logger.setLevel(level)
        held.close()


def release_held(handler: logging.Handler, logger_name: str = "retromae_ir") -> None:
    """Write the records :func:`hold_records` holds on ``logger_name`` into ``handler`` (a job's log file, just
    opened) and hold no more."""
    logger = logging.getLogger(logger_name)
    for held in [h for h in logger.handlers if isinstance(h, HeldRecords)]:
        for record in held.buffer:
            handler.handle(record)
        held.buffer.clear()
        logger.removeHandler(held)
