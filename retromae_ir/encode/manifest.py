"""Index manifests: what built an index (card, representation, counts, checksums, versions), checked on search
so an index is never searched with another card's queries or read half-written."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from retromae_ir.encode.cards import EncoderCard
from retromae_ir.encode.representation import ENCODING_VERSION
from retromae_ir.io import atomic_write, file_digest

logger = logging.getLogger(__name__)
MANIFEST = "manifest.json"
FORMAT = 1


class IndexMismatchError(ValueError):
    """The index (or encoded queries) and the card or the files on disk do not agree."""


def checksums(root: Path, parts: list[str]) -> dict[str, str]:
    """sha256 of every file under ``root/part`` for each part, keyed by path relative to ``root``."""
    from tqdm import tqdm

    files = sorted(p for part in parts for p in (root / part).rglob("*") if p.is_file())
    return {str(p.relative_to(root)): file_digest(p) for p in tqdm(files, desc=f"checksums {root.name}", unit="file")}


def verify_files(directory: str | os.PathLike) -> int:
    """Hash every file of the index ``directory`` and compare with the checksums its manifest recorded at the merge
    (search checks only counts, card, weights and precision: a file rewritten by another tool, or damaged, with the
    same count goes unnoticed); returns how many files match, or raises naming the missing, changed and extra ones."""
    root = Path(directory)
    recorded = read_manifest(root).get("files")
    if not recorded:
        raise IndexMismatchError(f"{root / MANIFEST} records no file checksums (not an index written by merge)")
    present = checksums(root, sorted({name.split("/", 1)[0] for name in recorded}))
    problems = [f"{name} missing" for name in recorded if name not in present]
    problems += [f"{name} not in the manifest" for name in present if name not in recorded]
    problems += [f"{name} changed" for name, digest in present.items() if recorded.get(name, digest) != digest]
    if problems:
        raise IndexMismatchError(f"{root}: {len(problems)} file(s) differ from {MANIFEST}: {'; '.join(problems[:5])}"
                                 + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))
    return len(recorded)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("retromae-ir", "torch", "transformers", "pyserini", "faiss-cpu", "numpy", "scipy"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            continue
    return out


def write_manifest(directory: Path, card: EncoderCard, **fields) -> Path:
    """Write ``directory/manifest.json`` last, atomically: its presence means the output is complete."""
    data = {"format": FORMAT, "card": card.to_dict(), "fingerprint": card.fingerprint(), "dims": card.dims,
            "k": card.k, "query_k": card.query_k, "scale": card.scale, "activation": card.activation,
            "encoding": ENCODING_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": versions(), **fields}
    write_manifest_fields(directory, data)
    return Path(directory) / MANIFEST


def write_manifest_fields(directory: Path, manifest: dict, **fields) -> dict:
    """Write ``manifest`` with ``fields`` changed as ``directory``'s manifest, atomically; the manifest written."""
    data = {**manifest, **fields}
    with atomic_write(Path(directory) / MANIFEST) as out:
        json.dump(data, out, indent=2, sort_keys=True)
    return data


def read_manifest(directory: str | os.PathLike) -> dict:
    return json.loads(manifest_text(directory))


def manifest_text(directory: str | os.PathLike) -> str:
    """The manifest as written (what ``io.check_unchanged`` compares against, once the index is open)."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise IndexMismatchError(f"{directory} has no {MANIFEST}: not a retromae_ir index, or its build did not finish")
    return path.read_text()


def encoding_version(manifest: dict) -> int:
    """The encoding code's version (``representation.ENCODING_VERSION``) a manifest records; 0 before it did."""
    return manifest.get("encoding", 0)


def same_encoding(manifest: dict, where: str | os.PathLike) -> bool:
    """Whether this encoding code made ``where``'s vectors; when not, says so in the log (it is encoded again)."""
    if encoding_version(manifest) == ENCODING_VERSION:
        return True
    logger.info("%s: encoded by encoding version %d (0: before it was recorded), this code's is %d: not reused",
                where, encoding_version(manifest), ENCODING_VERSION)
    return False


def reusable_manifest(index_dir: Path, model) -> dict | None:
    """``index_dir``'s manifest when ``model`` could have written it: its card's fingerprint, its precision, this
    encoding code and, for a sparse store, the store format this code reads (None otherwise, or when there is none:
    an index of another store format was taken as current, then refused by every search, never made again). What
    else must match (weights, corpus) is the caller's."""
    from retromae_ir.encode.corpus import precision
    from retromae_ir.search.index import store_is_readable, store_manifest_field

    manifest = Path(index_dir) / MANIFEST
    if not manifest.is_file():
        return None
    data = json.loads(manifest.read_text())
    if data.get("fingerprint") != model.card.fingerprint() or manifest_precision(data) != precision(model):
        return None
    if "sparse_store" in data and not store_is_readable(data["sparse_store"]):
        logger.info("%s: its sparse store is %s, this code reads %s: not reused", index_dir, data["sparse_store"],
                    store_manifest_field())
        return None
    return data if same_encoding(data, index_dir) else None


def check_encoding(manifest: dict, where: str | os.PathLike) -> None:
    """Refuse vectors that another version of the encoding code made than this one (its queries would not be
    encoded as ``where``'s documents were)."""
    recorded = encoding_version(manifest)
    if recorded != ENCODING_VERSION:
        made = "before retromae_ir recorded it" if recorded == 0 else f"by retromae_ir's encoding version {recorded}"
        raise IndexMismatchError(f"{where} was encoded {made}; this code encodes version {ENCODING_VERSION}, "
                                 f"whose vectors differ: encode it again with this code")


def check_card(manifest: dict, card: EncoderCard, where: str, digests: dict[str, str] | None = None) -> None:
    """Refuse a card whose representation differs from the one that built ``where`` (name the differing fields),
    or whose checkpoint's weight, config or tokenizer files differ from those recorded (a checkpoint trained again, or
    its tokenizer edited, in place: its queries would be encoded by another model than the documents), or whose
    encoding code's version is not this code's (:func:`check_encoding`). ``digests``: the files' digests as a
    loaded model read them (``EncoderModel.checkpoint_digests``); the card's current ones by default."""
    if manifest["fingerprint"] == card.fingerprint():
        check_encoding(manifest, where)
        recorded = manifest.get("weights") or {}
        if digests is None:  # a hub name is looked up only when there is a record to compare with
            digests = card.checkpoint_digests() if recorded else {}
        if recorded and digests and recorded != digests:  # {}: unknown (a hub name not in the cache here)
            changed = sorted(name for name in set(recorded) | set(digests) if recorded.get(name) != digests.get(name))
            raise IndexMismatchError(f"{where} was encoded with other weights or tokenizer files of "
                                     f"{card.checkpoint!r} ({', '.join(changed)} differ): encode the corpus again")
        return
    built = manifest["card"]
    diffs = [f"{key}: index {built.get(key)!r} vs card {value!r}" for key, value in card.to_dict().items()
             if key not in ("name", "description") and built.get(key) != value]
    raise IndexMismatchError(f"{where} was built with card {built.get('name')!r}, not {card.name!r}: "
                             + "; ".join(diffs))


def manifest_precision(manifest: dict) -> str:
    """The arithmetic that encoded an index's documents: ``precision``, or for a manifest written before that
    field, its ``int8`` / ``bf16`` flags (read as fp32, an old bf16 index was searched with fp32 queries)."""
    if "precision" in manifest:
        return manifest["precision"]
    return "int8" if manifest.get("int8") else "bf16" if manifest.get("bf16") else "fp32"


def check_precision(manifest: dict, model, where: str | os.PathLike) -> None:
    """Refuse a loaded model whose arithmetic (fp32, bf16 autocast, int8) is not the one that encoded ``where``'s
    documents: queries are encoded as the documents were, and a mix gives figures for a precision nobody chose."""
    from retromae_ir.encode.corpus import precision

    built, used = manifest_precision(manifest), precision(model)
    if built != used:
        raise IndexMismatchError(f"{where} was encoded in {built}, and the model given runs in {used}: load it in "
                                 f"{built} (EncoderModel.from_card(..., bf16=...)), or pass the card instead")


def check_queries(queries: str | os.PathLike, index: str | os.PathLike) -> None:
    """Refuse pre-encoded ``queries`` that another card, other weights of the same checkpoint, another version of
    the encoding code or another precision encoded than ``index``'s documents: Pyserini searches whatever vectors it
    is handed, and scores them without complaint."""
    encoded, built = read_manifest(queries), read_manifest(index)
    if encoding_version(encoded) != encoding_version(built):
        raise IndexMismatchError(f"{queries} and {index} were encoded by other versions of retromae_ir's encoding "
                                 f"code ({encoding_version(encoded)} and {encoding_version(built)}; 0: before it "
                                 f"was recorded): encode them again with one version")
    if encoded["fingerprint"] != built["fingerprint"]:
        raise IndexMismatchError(f"{queries} was encoded with card {encoded['card'].get('name')!r}, {index} with "
                                 f"{built['card'].get('name')!r} (another representation): encode the queries again")
    if encoded.get("weights") and built.get("weights") and encoded["weights"] != built["weights"]:
        raise IndexMismatchError(f"{queries} and {index} were encoded with other weights or tokenizer files of "
                                 f"{built['card'].get('checkpoint')!r}: encode the queries (or the corpus) again")
    used, made = manifest_precision(encoded), manifest_precision(built)
    if used != made:  # as check_precision for our own searcher
        raise IndexMismatchError(f"{queries} was encoded in {used}, {index} in {made}: a mix gives figures for a "
                                 f"precision nobody chose (int8 moves the ranking); encode the queries with --dtype "
                                 f"{made}")
