"""Logging set-up shared by the command-line jobs: messages to stderr and to a log file beside the outputs."""
from __future__ import annotations

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
