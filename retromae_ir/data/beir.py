"""The 18 BEIR datasets and where their files come from.

``resolve_beir`` finds a dataset folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``; cqadupstack one
such folder per subforum). A ``data_dir`` argument (a command's ``--data-dir``) is the only place looked in: an explicit
folder that lacks the dataset is an error, never silently replaced by another copy. Without it the order is
``$RETROMAE_IR_DATA``, the cache (``$RETROMAE_IR_CACHE/beir``, default ``~/.cache/retromae_ir/beir``), and last BEIR's
official zip, downloaded into the cache; a place whose ``<dataset>/`` exists but lacks a file stops the search with
an error (it is someone's copy, broken), one without it is passed over. Each folder holds ``<dataset>/``.
Evaluation reads the dataset folder's own ``queries.jsonl`` and ``qrels/test.tsv``; ``BeirPart`` also names
Anserini's topic and qrels files and Pyserini's topic set, for Pyserini's own CLIs (scifact's Anserini files hold the
same judgements, tested; the other 17 corpora are not here to compare).
"""
from __future__ import annotations

import logging
import os
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

logger = logging.getLogger(__name__)

BEIR_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"
ANSERINI_PREFIX = "beir-v1.0.0"
CQADUPSTACK_SUBFORUMS = ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats",
                         "tex", "unix", "webmasters", "wordpress")


class DatasetUnavailable(RuntimeError):
    """A dataset that cannot be found locally and cannot be downloaded (not public, or download disabled)."""


@dataclass(frozen=True)
class BeirPart:
    """One evaluated unit: a whole dataset, or one cqadupstack subforum (BEIR reports their mean)."""

    dataset: str
    subforum: str | None = None
    split: str = "test"

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.subforum}" if self.subforum else self.dataset

    @property
    def anserini_name(self) -> str:
        return f"{ANSERINI_PREFIX}-{self.name}"

    @property
    def pyserini_topics(self) -> str:
        """The name Pyserini's ``--topics`` and ``get_topics`` know (fetched online; offline use the files)."""
        return f"{self.anserini_name}-{self.split}"

    @property
    def topics_file(self) -> str:
        return f"topics.{self.anserini_name}.{self.split}.tsv.gz"

    @property
    def qrels_file(self) -> str:
        return f"qrels.{self.anserini_name}.{self.split}.txt"

    def folder(self, dataset_dir: Path) -> Path:
        """This part's BEIR folder inside the folder ``resolve_beir`` returned."""
        return Path(dataset_dir) / self.subforum if self.subforum else Path(dataset_dir)


@dataclass(frozen=True)
class BeirDataset:
    name: str
    public: bool = True
    subforums: tuple[str, ...] = ()
    # a hit whose docid is the query's id is dropped on every dataset, as BEIR's evaluation (ignore_identical_ids)
    # and Pyserini's BEIR 2CR (--remove-query) do: ArguAna's and Quora's queries are corpus documents, fiqa's ids
    # 1198 and 2460 name a query and another document; no qrels judge a query's own id
    drop_self_hits: bool = True
    split: str = "test"

    @property
    def url(self) -> str:
        return f"{BEIR_BASE_URL}/{self.name}.zip"

    @property
    def parts(self) -> tuple[BeirPart, ...]:
        if self.subforums:
            return tuple(BeirPart(self.name, sub, self.split) for sub in self.subforums)
        return (BeirPart(self.name, None, self.split),)

    def required_files(self) -> list[str]:
        """Paths, relative to the dataset folder, that must exist for it to count as present."""
        files = ("corpus.jsonl", "queries.jsonl", f"qrels/{self.split}.tsv")
        return [f"{sub}/{f}" if sub else f for sub in (self.subforums or ("",)) for f in files]

    def missing_files(self, folder: Path) -> list[str]:
        """The required files (relative paths) that ``folder`` lacks."""
        return [rel for rel in self.required_files() if not (folder / rel).is_file()]

    def is_complete(self, folder: Path) -> bool:
        return not self.missing_files(folder)


BEIR_DATASETS: dict[str, BeirDataset] = {d.name: d for d in (
    BeirDataset("trec-covid"),
    BeirDataset("bioasq", public=False),
    BeirDataset("nfcorpus"),
    BeirDataset("nq"),
    BeirDataset("hotpotqa"),
    BeirDataset("fiqa"),
    BeirDataset("signal1m", public=False),
    BeirDataset("trec-news", public=False),
    BeirDataset("robust04", public=False),
    BeirDataset("arguana"),
    BeirDataset("webis-touche2020"),
    BeirDataset("cqadupstack", subforums=CQADUPSTACK_SUBFORUMS),
    BeirDataset("quora"),
    BeirDataset("dbpedia-entity"),
    BeirDataset("scidocs"),
    BeirDataset("fever"),
    BeirDataset("climate-fever"),
    BeirDataset("scifact"),
)}


def dataset_digest(folder: str | os.PathLike) -> str:
    """sha256 over a BEIR folder's corpus, queries and qrels files (names and bytes): which data a result came
    from, whatever the folder is called."""
    from retromae_ir.io import file_digest, pairs_digest

    folder = Path(folder)
    files = [folder / "corpus.jsonl", folder / "queries.jsonl", *sorted((folder / "qrels").glob("*.tsv"))]
    return pairs_digest((str(path.relative_to(folder)), file_digest(path)) for path in files if path.is_file())


def get_beir_dataset(name: str) -> BeirDataset:
    try:
        return BEIR_DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown BEIR dataset {name!r}; known: {', '.join(BEIR_DATASETS)}") from None


def cache_root() -> Path:
    """``$RETROMAE_IR_CACHE/beir`` (default ``~/.cache/retromae_ir/beir``), beside the other stages' caches."""
    from retromae_ir.io import cache_dir

    return cache_dir("beir")


def candidate_roots(data_dir: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """The folders searched for ``<dataset>/``, in order, each with the place it came from: ``data_dir`` alone when
    given (an explicit option wins or fails, it never falls through to an environment default)."""
    if data_dir is not None:
        return [("--data-dir", Path(data_dir))]
    from retromae_ir.io import env_data_root

    root = env_data_root("RETROMAE_IR_DATA", ("corpus.jsonl", "queries.jsonl"))
    return ([("$RETROMAE_IR_DATA", root)] if root else []) + [("cache", cache_root())]


def resolve_beir(name: str, data_dir: str | os.PathLike | None = None, download: bool = True) -> Path:
    """Return the folder of BEIR dataset ``name``, downloading it into the cache when it is nowhere local (never
    when ``data_dir`` is given: the dataset must be there)."""
    dataset = get_beir_dataset(name)
    roots = candidate_roots(data_dir)
    for place, (origin, root) in enumerate(roots):
        if dataset.is_complete(root / name):
            logger.info("BEIR %s: using %s (%s)", name, root / name, origin)
            return root / name
        if (root / name).exists() and data_dir is None:  # a copy the user placed, broken: not silently another one
            later = [f"{other / name} ({where})" for where, other in roots[place + 1:]] + ["the download"]
            raise DatasetUnavailable(f"{origin}: {_hand_placed(dataset, root / name, ', then '.join(later))}")
    if data_dir is not None or not dataset.public or not download:
        raise DatasetUnavailable(_unavailable_message(dataset, roots, data_dir is not None))
    return download_beir(dataset, cache_root())


def _unavailable_message(dataset: BeirDataset, roots: list[tuple[str, Path]], explicit: bool = False) -> str:
    private = "is not publicly downloadable (BEIR cannot redistribute it); build it with BEIR's instructions"
    if explicit:
        (_, root), = roots
        missing = dataset.missing_files(root / dataset.name)
        return (f"BEIR dataset {dataset.name!r} is not in --data-dir {root}: {root / dataset.name / missing[0]} is "
                f"missing{'; it ' + private if not dataset.public else ''} ($RETROMAE_IR_DATA, the cache and "
                "downloading are not tried when --data-dir is given; leave it out to use them)")
    why = private if not dataset.public else "was not found and downloading is disabled"
    places = "; ".join(f"{root / dataset.name} ({origin})" for origin, root in roots)
    return (f"BEIR dataset {dataset.name!r} {why}, then place {', '.join(dataset.required_files())} "
            f"in one of: {places}")


def download_beir(dataset: BeirDataset, root: Path) -> Path:
    """Fetch ``dataset``'s zip into a temporary folder under ``root``, unzip it there, check it, and rename the
    finished folder to ``root/<name>``: an interrupted download leaves nothing that looks like a dataset."""
    target = root / dataset.name
    if target.exists():  # never by an interrupted download (staged, then renamed): placed there by hand
        raise DatasetUnavailable(_hand_placed(dataset, target))
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{dataset.name}.") as staging:
        archive = Path(staging) / f"{dataset.name}.zip"
        try:
            fetch(dataset.url, archive)
        except OSError as err:  # URLError and HTTPError are OSErrors
            raise DatasetUnavailable(f"{dataset.url}: download failed ({err}); "
                                     f"or place {', '.join(dataset.required_files())} under {target}") from None
        unpacked = Path(staging) / "unpacked"
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(unpacked)
        except zipfile.BadZipFile as err:
            raise DatasetUnavailable(f"{dataset.url}: not a valid zip archive ({err})") from None
        found = unpacked / dataset.name
        missing = dataset.missing_files(found)
        if missing:
            raise DatasetUnavailable(f"{dataset.url}: archive lacks {dataset.name}/{missing[0]}")
        if dataset.is_complete(target):  # another process's download finished first
            return target
        if target.exists():
            raise DatasetUnavailable(_hand_placed(dataset, target))
        os.replace(found, target)
    logger.info("BEIR %s: downloaded to %s", dataset.name, target)
    return target


def _hand_placed(dataset: BeirDataset, target: Path, then: str = "the download") -> str:
    missing = ", ".join(dataset.missing_files(target))
    return (f"{target} exists but is not a complete {dataset.name} ({missing} missing): complete it, or move it "
            f"away so that {then} is tried")


def fetch(url: str, dest: Path, chunk: int = 1 << 20) -> None:
    """Copy ``url`` (https or file) to ``dest`` with a tqdm progress bar."""
    with urllib.request.urlopen(url) as response, open(dest, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=Path(url).name) as bar:
            while block := response.read(chunk):
                out.write(block)
                bar.update(len(block))
