"""Atomic file output and one writer per output.

Every command writes to a temporary path and renames, so an interrupted or failed job never leaves a half-written
file (or directory) where a finished one is expected; the renamed file gets the ordinary mode of the user's umask,
not the 0600 of a temporary file. ``output_lock`` makes a second writer of the same output fail at once; a writer
that holds it may remove what a killed predecessor left (``remove_stale_temporaries``). ``command_errors`` turns a
command's user errors (bad input, a missing or unwritable file, another writer) into one ``error:`` line and exit
status 2.
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import IO, Iterator

logger = logging.getLogger(__name__)


def make_parent(path: str | os.PathLike) -> Path:
    """Create the folder ``path`` goes in (and its parents); a file standing where a folder is needed is a
    ``NotADirectoryError`` naming both, not ``mkdir``'s bare "File exists"."""
    parent = Path(path).parent
    for folder in (parent, *parent.parents):
        if folder.exists() or folder.is_symlink():
            if not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"cannot be written: {folder} is a file, not a folder",
                                         str(path))
            break
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def make_dir(path: str | os.PathLike) -> Path:
    """``mkdir -p path``, with ``make_parent``'s error when a file stands where a folder is needed."""
    folder = Path(path)
    make_parent(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "cannot be written: it is a file, not a folder", str(folder))
    folder.mkdir(exist_ok=True)
    return folder


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success rename it onto ``path``, on error delete it."""
    target = Path(path)
    make_parent(target)
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
    """Yield a temporary directory beside ``path``; on success it replaces ``path``. A ``path`` already there is
    first renamed to a temporary's name and deleted only after the new one is in place, so a kill at any moment
    leaves ``path`` whole (old or new) or absent, never half deleted (a checkpoint saved again at the end of a
    resumed run was deleted in place, and a kill meanwhile left a folder that loaded as complete)."""
    target = Path(path)
    make_parent(target)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    aside = None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if target.exists():
            aside = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"  # remove_stale_temporaries' pattern
            os.rename(target, aside)
        os.replace(tmp, target)
    except BaseException:
        if aside is not None and aside.exists() and not target.exists():
            os.rename(aside, target)  # the new one never arrived: the old one back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if aside is not None and aside.is_symlink():
        aside.unlink()
    elif aside is not None:
        try:
            shutil.rmtree(aside)
        except OSError as err:  # the new folder is in place: a leftover of the old one is not a failed save
            logger.warning("could not delete all of %s, the old %s (%s)", aside, target, err)


_DIGESTS: dict[tuple, str] = {}
SETTLED_S = 2.0  # a file untouched this long is remembered by its stat (a rewrite changes its ctime to "now")


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in 1 MiB blocks: tells whether an index was built from this file.
    Remembered for the process by (device, inode, size, mtime, ctime) once the file has settled, so the keys that
    name one corpus (run, index, chain) hash a 3 GB collection once, not once each; any later write moves the
    ctime past the remembered one, even with the mtime put back."""
    stat = os.stat(path)
    key = (algorithm, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if time.time() - max(stat.st_mtime, stat.st_ctime) > SETTLED_S:
        _DIGESTS[key] = digest.hexdigest()
    return digest.hexdigest()


# what makes a checkpoint's vectors: its weights, its configuration and its tokenizer (an edited
# tokenizer_config.json or vocabulary encodes the same text into other ids under the same weights)
CHECKPOINT_FILES = ("*.safetensors", "*.bin", "config.json", "tokenizer*.json", "special_tokens_map.json",
                    "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "*.model")


def checkpoint_files(folder: str | os.PathLike) -> list[Path]:
    """The files of a checkpoint folder that make its vectors (``CHECKPOINT_FILES``: weights, config, tokenizer)."""
    folder = Path(folder)
    return sorted({path for pattern in CHECKPOINT_FILES for path in folder.glob(pattern) if path.is_file()})


def checkpoint_file_digests(folder: str | os.PathLike) -> dict[str, str]:
    """sha256 of each of ``checkpoint_files``, by file name: a checkpoint trained again into the same folder, or
    whose tokenizer was edited in place, keeps its path but not these."""
    return {path.name: file_digest(path) for path in checkpoint_files(folder)}


def check_unchanged(manifest: str | os.PathLike, checked: str) -> None:
    """Refuse what was just opened from ``manifest``'s folder when the manifest is no longer the one checked under
    the folder's lock: another process replaced the folder in between, so what was opened may be its index, not the
    one checked. (Once opened, files stay readable whatever replaces the folder later.)"""
    manifest = Path(manifest)
    if not manifest.is_file() or manifest.read_text() != checked:
        raise OutputReplacedError(f"{manifest.parent} was replaced by another process while this one opened it; run "
                                  f"again (and give concurrent runs their own index folders)")


def as_stored(key: dict) -> dict:
    """``key`` as it reads back from a JSON file (tuples become lists, other values their str), for comparing."""
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def key_path(path: str | os.PathLike) -> Path:
    """Where the key of an output that may be reused or continued is kept: ``PATH.key.json``."""
    path = Path(path)
    return path.with_name(path.name + ".key.json")


def read_key(path: str | os.PathLike) -> dict | None:
    """The key recorded for ``path`` (see ``key_path``), or None when there is none."""
    recorded = key_path(path)
    return json.loads(recorded.read_text()) if recorded.is_file() else None


def write_key(path: str | os.PathLike, key: dict) -> None:
    """Record ``key`` for ``path``, atomically."""
    with atomic_write(key_path(path)) as out:
        json.dump(key, out, indent=1, sort_keys=True)


def checkpoint_key(checkpoint: str | os.PathLike) -> dict[str, str] | str:
    """What a run starting from ``checkpoint`` is keyed by: a local folder's file digests (weights, config,
    tokenizer), else (a hub name, whose files may not be downloaded yet) the name itself."""
    return checkpoint_file_digests(checkpoint) if Path(checkpoint).is_dir() else str(checkpoint)


def start_key(checkpoint: str | os.PathLike) -> dict[str, str] | str:
    """What a training run (or a chain) starting from ``checkpoint`` is keyed by: a local folder's file digests; a
    hub name's snapshot, fetched first (:func:`fetch_snapshot`), so that the key is of the files its load reads: a
    first run, which would download them, keys what its resume finds cached, and a resume after the hub moved on
    keys the new revision (another start: refused). Offline, the cached snapshot; the name when nothing is cached
    (the load fails then too)."""
    if Path(checkpoint).is_dir():
        return checkpoint_file_digests(checkpoint)
    fetch_snapshot(str(checkpoint))
    return cached_checkpoint_key(checkpoint)


def fetch_snapshot(name: str) -> None:
    """Download the files of hub checkpoint ``name`` that :data:`CHECKPOINT_FILES` names, in one weight format
    (safetensors where the repository has it, as ``from_pretrained`` prefers), into the cache its load reads; when
    offline, or ``name`` is no hub repository, nothing (logged)."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        files = [sibling.rfilename for sibling in HfApi().model_info(name).siblings or []]
        weights = "*.safetensors" if any(file.endswith(".safetensors") for file in files) else "*.bin"
        snapshot_download(name, allow_patterns=[pattern for pattern in CHECKPOINT_FILES
                                                if pattern not in ("*.safetensors", "*.bin")] + [weights])
    except Exception as error:  # noqa: BLE001 (offline, no such repository, not a hub name: keyed by the cache)
        logger.info("%s: not fetched from the hub (%s); keyed by its cached snapshot, if any", name, error)


def cached_checkpoint_key(checkpoint: str | os.PathLike) -> dict[str, str] | str:
    """:func:`checkpoint_key`, with a hub name keyed by the files of its cached snapshot where that holds weights
    (the revision a load finds, or has just fetched: another revision is another key); by its name otherwise."""
    snapshot = None if Path(checkpoint).is_dir() else cached_snapshot(str(checkpoint))
    return checkpoint_key(checkpoint) if snapshot is None else snapshot_digests(snapshot) or str(checkpoint)


def cached_snapshot(name: str) -> Path | None:
    """The folder of hub checkpoint ``name``'s cached snapshot (the revision ``refs/main`` names), if cached."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(name, "config.json")
    except (ValueError, OSError):  # not a hub name (owner/name), an unreadable cache
        return None
    return Path(config).parent if isinstance(config, str) else None


def snapshot_digests(folder: str | os.PathLike) -> dict[str, str]:
    """:func:`checkpoint_file_digests` of a hub snapshot, {} until its weights are there (a snapshot may hold only
    the config and tokenizer fetched so far): never a key that two revisions of other weights share."""
    digests = checkpoint_file_digests(folder)
    return digests if any(name.endswith((".safetensors", ".bin")) for name in digests) else {}


def pairs_digest(pairs) -> str:
    """sha256 of (key, text) string pairs, length-prefixed so that no two sequences share one: a corpus's documents
    or a topic set's queries, by content."""
    digest = hashlib.sha256()
    for key, text in pairs:
        key_bytes, text_bytes = key.encode(), text.encode()
        digest.update(b"%d %d\n" % (len(key_bytes), len(text_bytes)))
        digest.update(key_bytes)
        digest.update(text_bytes)
    return digest.hexdigest()


def _umask() -> int:
    """The process umask: from ``/proc/self/status`` where Linux shows it, since reading it through ``os.umask``
    means setting it for a moment, and a file another thread created in that moment got 022's permissions."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class OutputLockedError(RuntimeError):
    """Another process is writing the same output."""


class OutputReplacedError(RuntimeError):
    """Another process replaced a folder between its check under the lock and its opening (``check_unchanged``)."""


class InputChangedError(RuntimeError):
    """An input (a corpus, a checkpoint's files) changed while this process read it (``check_read_unchanged``)."""


def check_read_unchanged(path: str | os.PathLike, digest: str, what: str) -> None:
    """Refuse ``path`` when its bytes are no longer the ones ``digest`` was taken of before ``what`` read them: what
    was read may be the other version, and would be kept (a cache, an index, a key) under this digest. A stat when
    the file is untouched (:func:`file_digest` remembers it)."""
    if file_digest(path) != digest:
        raise InputChangedError(f"{path} changed while {what}: what was read may be either version, so none of it is "
                                "kept; run again once the file is settled")


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
    make_parent(Path(output).resolve())
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


def remove_stale_temporaries(*folders: str | os.PathLike) -> list[Path]:
    """Delete (and log) the ``.*.tmp`` files and folders ``atomic_write`` / ``atomic_dir`` left in ``folders``;
    returns them. Only a killed writer leaves one (the writers delete theirs on any exception), so call it while
    holding the folder's ``output_lock``: then no live writer can be in the middle of one."""
    stale = sorted(p for folder in map(Path, folders) if folder.is_dir() for p in folder.glob(".*.tmp"))
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        logger.info("removed %s, left by an interrupted write", path)
    return stale


CACHE_ENV = "RETROMAE_IR_CACHE"


def cache_dir(part: str) -> Path:
    """``$RETROMAE_IR_CACHE/<part>`` (default ``~/.cache/retromae_ir/<part>``): where a stage keeps what it can
    rebuild (corpus statistics, the MKL shim)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "retromae_ir") / part


def claim_output_waiting(output: str | os.PathLike, poll_s: float) -> contextlib.ExitStack:
    """``claim_output(output)``, waiting (and saying so once) while another process holds it: for a cache that
    several processes need and one of them builds (corpus statistics, a tokenised corpus under torchrun), where
    the others then read what it wrote instead of building it again."""
    waited = False
    while True:
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(claim_output(output))
            return stack
        except OutputLockedError as error:
            if not waited:
                logger.info("waiting: %s", error)
                waited = True
            time.sleep(poll_s)


def env_data_root(variable: str, dataset_files: tuple[str, ...]) -> Path | None:
    """The data root ``$variable`` names (None when unset), each dataset a folder or file in it. A root that is not
    a folder, or is one dataset's own folder (it holds one of the ``dataset_files`` patterns), is an error: skipped
    as a root without the dataset, it left the data to the cache or a download, and the run scored that copy
    instead of the user's (exit 0)."""
    value = os.environ.get(variable)
    if not value:
        return None
    root = Path(value)
    if not root.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"${variable} names no folder (its datasets would come from the cache or "
                                "a download instead); correct or unset it", str(root))
    inside = next((path.name for pattern in dataset_files for path in root.glob(pattern)), None)
    if inside is not None:
        raise ValueError(f"${variable}={root} is one dataset's folder (it holds {inside}): it names the folder that "
                         f"holds the datasets, {root.parent}")
    return root


# What a user can fix, as opposed to a bug: bad arguments or input (``ValueError``: DataFormatError, CardError,
# IndexMismatchError, TrainerError ...), a file that is missing, unreadable or unwritable, another writer.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OutputLockedError, OutputReplacedError, InputChangedError,
                                                FileNotFoundError, PermissionError, IsADirectoryError,
                                                NotADirectoryError, FileExistsError)
EXIT_USER_ERROR = 2
DEBUG_ENV = "RETROMAE_IR_DEBUG"
_debug: contextvars.ContextVar[bool | None] = contextvars.ContextVar("retromae_ir_debug", default=None)


def debugging() -> bool:
    """Whether errors show their traceback: ``--debug`` on the running command, or ``RETROMAE_IR_DEBUG=1``."""
    flag = _debug.get()
    if flag is not None:
        return flag
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def debug_mode(enabled: bool) -> Iterator[None]:
    """Show tracebacks (``enabled``) for the block, whatever the environment says; set by ``cli.command``."""
    token = _debug.set(True if enabled else _debug.get())  # a nested command keeps an outer --debug
    try:
        yield
    finally:
        _debug.reset(token)


def is_user_error(error: BaseException, expected: tuple[type[BaseException], ...] = ()) -> bool:
    """A failure the user can fix (see ``USER_ERRORS``); also a full disk or a read-only file system."""
    if isinstance(error, USER_ERRORS + tuple(expected)):
        return True
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)


def error_line(error: BaseException) -> str:
    """The one line a user sees: ``error: <what>``; an ``OSError`` as ``error: <file>: <reason>``."""
    if isinstance(error, OSError) and error.strerror:
        where = ": ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
        return f"error: {where + ': ' if where else ''}{error.strerror[0].lower()}{error.strerror[1:]}"
    return f"error: {error}"


@contextlib.contextmanager
def command_errors(*expected: type[BaseException]) -> Iterator[None]:
    """A command's foreseen failures (``USER_ERRORS``, a full disk, and ``expected``) as one ``error: ...`` line on
    stderr and exit status 2, without a traceback unless ``debugging()``; anything else (a bug) propagates with
    its traceback. ``retromae_ir.cli.command`` puts every command's ``main`` inside one."""
    try:
        yield
    except BaseException as error:
        if isinstance(error, (SystemExit, KeyboardInterrupt)) or not is_user_error(error, expected):
            raise
        _close_progress_bars()
        if debugging():
            traceback.print_exc()
        print(error_line(error), file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR) from None


def _close_progress_bars() -> None:
    """Close the tqdm bars the failure left open, so the ``error:`` line starts a line of its own."""
    tqdm_module = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm_module, "tqdm", None), "_instances", ())):
        with contextlib.suppress(Exception):
            bar.close()


def remove_stale_temporaries_of(output: str | os.PathLike) -> list[Path]:
    """Delete (and log) the temporaries of ``output`` itself that a killed writer left beside it,
    ``.<name>.<random>.tmp``, and no other: the folder may hold other outputs being written under their own locks.
    (``tempfile``'s random part has no dot, so another output's names never match.)"""
    target = Path(output)
    name = re.compile(rf"^\.{re.escape(target.name)}\.[a-z0-9_]+\.tmp$")
    stale = [p for p in target.parent.glob(".*.tmp") if name.match(p.name)] if target.parent.is_dir() else []
    for path in stale:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        logger.info("removed %s, left by an interrupted write", path)
    return stale


@contextlib.contextmanager
def claim_output(output: str | os.PathLike) -> Iterator[Path]:
    """:func:`output_lock` on ``output``, then the removal of what a killed writer of it left, inside it and beside
    it: how every command that writes an index (or another output) starts."""
    with output_lock(output) as lock:
        remove_stale_temporaries(output)
        remove_stale_temporaries_of(output)
        yield lock
