"""Sentence-embedding quality on semantic textual similarity: STS12-16, STS-B and SICK-R (the seed paper's Table 4).

Each pair is scored with the cosine similarity of its two sentences' dense embeddings, and a set's figure is the
Spearman correlation (x 100) of those cosines with the gold scores, the convention of SentEval, SimCSE and the seed
paper. STS12-16 are reported two ways, always labelled: ``all`` pools every subset's pairs into one correlation
(SimCSE's setting) and ``mean`` is the unweighted mean of the subsets' correlations (SentEval's ``mean``).

Data layout (a data root holds any of them; ``resolve_sts`` finds each set):

- ``STS1X-en-test/``: SentEval's layout, ``STS.input.<subset>.txt`` (two tab-separated sentences a line; further
  columns are ignored, as SentEval's reader does) and ``STS.gs.<subset>.txt`` (the gold score on the same
  line number). A blank gold line is an unscored pair and is dropped (STS15 and STS16 have many). The subsets are
  SentEval's fixed lists (STS13 without SMT, whose input is licensed separately), whatever else the folder holds.
- ``stsb-en-test.csv``: STS Benchmark test, CSV ``sentence1,sentence2,score`` (an optional header is skipped).
- ``SICK-test.tsv``: SICK's test split, tab-separated with a header naming ``sentence_A``, ``sentence_B`` and
  ``relatedness_score`` (SICK-R); a full SICK release with a ``SemEval_set`` column is read for its TEST rows.

Malformed input raises :class:`~retromae_ir.data.readers.DataFormatError` whose message starts with
``<file>:<line>:``. Resolution follows BEIR's (``retromae_ir.data.beir``): an explicit ``data_dir`` is the only
place looked in, else ``$RETROMAE_IR_STS``, then the cache (``$RETROMAE_IR_STS_CACHE``, default
``~/.cache/retromae_ir/sts``), then the official download into the cache.
"""
from __future__ import annotations

import csv
import io
import logging
import math
import os
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from retromae_ir.data.readers import DataFormatError, plain_numeral, without_byte_order_mark
from retromae_ir.io import atomic_write

logger = logging.getLogger(__name__)

ENV_VAR = "RETROMAE_IR_STS"
CACHE_ENV_VAR = "RETROMAE_IR_STS_CACHE"
STS_WIKI = "http://ixa2.si.ehu.es/stswiki/images"


class StsDataUnavailable(ValueError):
    """An STS set that is not in the folders searched and cannot be downloaded: a user error (place the files or
    point ``--data-dir`` / ``$RETROMAE_IR_STS`` at them), so commands report it in one line."""


@dataclass(frozen=True)
class StsSet:
    """One reported set: its layout, where it lies under a data root, and its official source."""

    name: str
    layout: str  # "senteval", "stsb" or "sick"
    path: str  # relative to a data root: a folder (senteval) or a file
    url: str
    subsets: tuple[str, ...] = ()
    archive_folder: str = ""  # senteval: the folder inside the official zip
    archive_prefix: str = "STS"  # senteval: how the official zip names its files (STS2016.input.X.txt for 2016)

    def required_files(self) -> list[str]:
        """Paths, relative to a data root, that must all exist for the set to count as present."""
        if self.layout == "senteval":
            return [f"{self.path}/STS.{kind}.{subset}.txt" for subset in self.subsets for kind in ("input", "gs")]
        return [self.path]

    def is_complete(self, root: Path) -> bool:
        return all((root / rel).is_file() for rel in self.required_files())


STS_SETS: dict[str, StsSet] = {s.name: s for s in (
    StsSet("STS12", "senteval", "STS12-en-test", f"{STS_WIKI}/4/40/STS2012-en-test.zip",
           ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"), "test-gold"),
    StsSet("STS13", "senteval", "STS13-en-test", f"{STS_WIKI}/2/2f/STS2013-en-test.zip",
           ("FNWN", "headlines", "OnWN"), "test-gs"),
    StsSet("STS14", "senteval", "STS14-en-test", f"{STS_WIKI}/8/8c/STS2014-en-test.zip",
           ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"), "sts-en-test-gs-2014"),
    StsSet("STS15", "senteval", "STS15-en-test", f"{STS_WIKI}/d/da/STS2015-en-test.zip",
           ("answers-forums", "answers-students", "belief", "headlines", "images"), "test_evaluation_task2a"),
    StsSet("STS16", "senteval", "STS16-en-test", f"{STS_WIKI}/9/98/STS2016-en-test.zip",
           ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
           "sts2016-english-with-gs-v1.0", "STS2016"),
    StsSet("STS-B", "stsb", "stsb-en-test.csv", f"{STS_WIKI}/4/48/Stsbenchmark.tar.gz"),
    StsSet("SICK-R", "sick", "SICK-test.tsv",
           "http://alt.qcri.org/semeval2014/task1/data/uploads/sick_test_annotated.zip"),
)}
SENTEVAL_SETS = tuple(name for name, s in STS_SETS.items() if s.layout == "senteval")


def get_sts_set(name: str) -> StsSet:
    try:
        return STS_SETS[name]
    except KeyError:
        raise ValueError(f"unknown STS set {name!r}; known: {', '.join(STS_SETS)}") from None


# ---------------------------------------------------------------------------------------------------- readers

@dataclass
class StsPairs:
    """The scored pairs of one file (a subset of STS12-16, or all of STS-B / SICK-R)."""

    name: str
    first: list[str]
    second: list[str]
    gold: np.ndarray  # float64, one per pair
    unscored: int = 0  # pairs dropped for a blank gold line

    def __len__(self) -> int:
        return len(self.gold)


def _decode(path: Path) -> str:
    """A UTF-8 file's text (a byte-order mark dropped); bad bytes are an error naming the line."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataFormatError(f"{path}:{line}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    return text[1:] if text.startswith("\ufeff") else text


def _text_lines(path: Path) -> list[str]:
    """Every line of a UTF-8 file, blank ones included (line numbers must stay aligned), endings removed. Only
    ``\\n`` ends a line (``str.splitlines`` would also split at form feeds and Unicode separators inside a text)."""
    lines = _decode(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return [without_byte_order_mark(path, number, line) for number, line in enumerate(lines, start=1)]


def _score(path: Path, line: int, value: str, what: str = "gold score") -> float:
    try:
        number = float(value) if plain_numeral(value) else math.nan  # 1_5 was 15.0
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise DataFormatError(f"{path}:{line}: {what} {value.strip()[:40]!r} is not a finite number")
    return number


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def read_senteval_subset(folder: str | os.PathLike, subset: str) -> StsPairs:
    """``STS.input.<subset>.txt`` with ``STS.gs.<subset>.txt`` from ``folder``: pairs whose gold line is blank
    are unscored and dropped (SentEval does the same); the two files must have as many lines; an input line's
    columns after the first two are ignored."""
    folder = Path(folder)
    input_path, gold_path = folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"
    for path in (input_path, gold_path):
        if not path.is_file():
            raise DataFormatError(f"{path}: no such file (the {subset} subset needs STS.input and STS.gs files)")
    inputs, golds = _text_lines(input_path), _text_lines(gold_path)
    if len(inputs) != len(golds):
        raise DataFormatError(f"{gold_path}: {len(golds)} lines, but {input_path} has {len(inputs)}: the gold file "
                              "needs one line (blank when unscored) per sentence pair")
    first, second, gold, unscored = [], [], [], 0
    for number, (pair, score) in enumerate(zip(inputs, golds), start=1):
        fields = pair.split("\t")
        if len(fields) < 2:
            raise DataFormatError(f"{input_path}:{number}: expected two tab-separated sentences, got {pair[:80]!r}")
        if not score.strip():
            unscored += 1
            continue
        gold.append(_score(gold_path, number, score))
        first.append(fields[0])
        second.append(fields[1])
    if not gold:
        raise DataFormatError(f"{gold_path}: no scored pair (every gold line is blank)")
    return StsPairs(subset, first, second, np.asarray(gold, dtype=np.float64), unscored)


def read_stsb(path: str | os.PathLike, name: str = "STS-B") -> StsPairs:
    """STS Benchmark as CSV ``sentence1,sentence2,score`` (quoted fields allowed); a header row is skipped."""
    path = Path(path)
    rows = csv.reader(io.StringIO(_decode(path), newline=""))
    first, second, gold = [], [], []
    for row in rows:
        number = rows.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != 3:
            raise DataFormatError(f"{path}:{number}: expected 3 comma-separated fields (sentence1, sentence2, score), "
                                  f"got {len(row)}")
        if number == 1 and not _is_number(row[2]):
            continue  # a header row
        gold.append(_score(path, number, row[2]))
        first.append(row[0])
        second.append(row[1])
    if not gold:
        raise DataFormatError(f"{path}: no sentence pair")
    return StsPairs(name, first, second, np.asarray(gold, dtype=np.float64))


SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score")


def read_sick(path: str | os.PathLike, name: str = "SICK-R") -> StsPairs:
    """SICK relatedness from a tab-separated file with a header; with a ``SemEval_set`` column (the full release)
    only its TEST rows are kept."""
    path = Path(path)
    lines = _text_lines(path)
    if not lines:
        raise DataFormatError(f"{path}: empty file")
    header = lines[0].split("\t")
    missing = [column for column in SICK_COLUMNS if column not in header]
    if missing:
        raise DataFormatError(f"{path}:1: the header lacks column {missing[0]!r} (needs {', '.join(SICK_COLUMNS)})")
    a, b, score = (header.index(column) for column in SICK_COLUMNS)
    split = header.index("SemEval_set") if "SemEval_set" in header else None
    first, second, gold = [], [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise DataFormatError(f"{path}:{number}: expected {len(header)} tab-separated columns like the header, "
                                  f"got {len(fields)}")
        if split is not None and fields[split].strip().upper() != "TEST":
            continue
        gold.append(_score(path, number, fields[score], "relatedness_score"))
        first.append(fields[a])
        second.append(fields[b])
    if not gold:
        raise DataFormatError(f"{path}: no sentence pair")
    return StsPairs(name, first, second, np.asarray(gold, dtype=np.float64))


def read_sts_set(sts_set: StsSet | str, location: str | os.PathLike) -> list[StsPairs]:
    """The pairs of a set at ``location`` (its folder or file, as ``resolve_sts`` returns it): one ``StsPairs`` per
    subset for STS12-16, a single one for STS-B and SICK-R."""
    sts_set = get_sts_set(sts_set) if isinstance(sts_set, str) else sts_set
    if sts_set.layout == "senteval":
        return [read_senteval_subset(location, subset) for subset in sts_set.subsets]
    reader = read_stsb if sts_set.layout == "stsb" else read_sick
    return [reader(location, sts_set.name)]


# ------------------------------------------------------------------------------------------------- resolution

def sts_cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "retromae_ir" / "sts")


def candidate_roots(data_dir: str | os.PathLike | None = None) -> list[tuple[str, Path]]:
    """The data roots searched, in order, each with where it came from: ``data_dir`` alone when given (an explicit
    option wins or fails; it never falls through to the environment, the cache or a download)."""
    if data_dir is not None:
        return [("--data-dir", Path(data_dir))]
    from retromae_ir.io import env_data_root

    root = env_data_root(ENV_VAR, ("STS.input.*.txt",))
    return ([(f"${ENV_VAR}", root)] if root else []) + [("cache", sts_cache_root())]


def resolve_sts(name: str, data_dir: str | os.PathLike | None = None, download: bool = True) -> Path:
    """The folder (STS12-16) or file (STS-B, SICK-R) of set ``name``; downloaded into the cache when it is in none
    of the folders searched (never when ``data_dir`` is given or ``download`` is False)."""
    sts_set = get_sts_set(name)
    roots = candidate_roots(data_dir)
    for origin, root in roots:
        if sts_set.is_complete(root):
            logger.info("%s: using %s (%s)", name, root / sts_set.path, origin)
            return root / sts_set.path
        if data_dir is None and (root / sts_set.path).exists():  # placed, broken: not silently another copy
            missing = [rel for rel in sts_set.required_files() if not (root / rel).is_file()]
            raise StsDataUnavailable(f"STS set {name} in {root} ({origin}) is incomplete: {root / missing[0]} is "
                                     f"missing{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; "
                                     "complete or remove that copy (another one would be scored instead)")
    if data_dir is not None:
        root = roots[0][1]
        missing = next(rel for rel in sts_set.required_files() if not (root / rel).is_file())
        raise StsDataUnavailable(f"STS set {name} is not in --data-dir {root}: {root / missing} is missing "
                                 f"(${ENV_VAR}, the cache and downloading are not tried when --data-dir is given; "
                                 "leave it out to use them)")
    if not download:
        places = "; ".join(f"{root} ({origin})" for origin, root in roots)
        files = ", ".join(sts_set.required_files()[:2]) + (" ..." if sts_set.layout == "senteval" else "")
        raise StsDataUnavailable(f"STS set {name} was not found and downloading is disabled; place {files} in one "
                                 f"of: {places}")
    return download_sts(sts_set, sts_cache_root())


def download_sts(sts_set: StsSet, root: Path) -> Path:
    """Fetch ``sts_set``'s official archive into a temporary folder under ``root``, bring it to the layout above,
    check that it reads, and rename it into place: an interrupted download leaves nothing that looks complete."""
    from retromae_ir.data.beir import fetch

    root.mkdir(parents=True, exist_ok=True)
    target = root / sts_set.path
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{sts_set.name}.") as staging:
        staging = Path(staging)
        archive = staging / Path(sts_set.url).name
        try:
            fetch(sts_set.url, archive)
        except OSError as err:  # URLError and HTTPError are OSErrors
            raise StsDataUnavailable(f"{sts_set.url}: download failed ({err}); or place "
                                     f"{', '.join(sts_set.required_files()[:2])} under {root} yourself (or give "
                                     f"--data-dir / ${ENV_VAR})") from None
        unpacked = staging / "unpacked"
        try:
            if archive.name.endswith((".tar.gz", ".tgz")):
                with tarfile.open(archive) as tf:
                    tf.extractall(unpacked, filter="data")
            else:
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(unpacked)
        except (zipfile.BadZipFile, tarfile.TarError) as err:
            raise StsDataUnavailable(f"{sts_set.url}: not a valid archive ({err})") from None
        try:
            built = _arrange(sts_set, unpacked, staging / "built")
            read_sts_set(sts_set, built)
        except (DataFormatError, OSError) as err:
            raise StsDataUnavailable(f"{sts_set.url}: unexpected archive contents ({err})") from None
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(built, target)
    logger.info("%s: downloaded to %s", sts_set.name, target)
    return target


def _arrange(sts_set: StsSet, unpacked: Path, built: Path) -> Path:
    """Turn an official archive's files into this module's layout at ``built``."""
    if sts_set.layout == "senteval":
        source = unpacked / sts_set.archive_folder
        built.mkdir()
        for subset in sts_set.subsets:
            for kind in ("input", "gs"):
                shutil.copyfile(source / f"{sts_set.archive_prefix}.{kind}.{subset}.txt",
                                built / f"STS.{kind}.{subset}.txt")
        return built
    if sts_set.layout == "stsb":  # stsbenchmark/sts-test.csv: genre, file, year, id, score, s1, s2[, sources]
        source = unpacked / "stsbenchmark" / "sts-test.csv"
        with atomic_write(built) as out:
            writer = csv.writer(out, lineterminator="\n")
            for number, line in enumerate(_text_lines(source), start=1):
                fields = line.split("\t")
                if len(fields) < 7:
                    raise DataFormatError(f"{source}:{number}: expected at least 7 tab-separated columns")
                writer.writerow([fields[5], fields[6], fields[4]])
        return built
    shutil.copyfile(unpacked / "SICK_test_annotated.txt", built)
    return built


# ---------------------------------------------------------------------------------------------------- scoring

def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their average rank), in [-1, 1]; NaN when either side is constant."""
    from scipy.stats import rankdata

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman needs two 1-d sequences of one length, got shapes {x.shape} and {y.shape}")
    if len(x) < 2:
        return math.nan
    rx, ry = rankdata(x) - (len(x) + 1) / 2, rankdata(y) - (len(y) + 1) / 2
    denominator = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry) / denominator if denominator > 0 else math.nan


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two [n, d] arrays (0 where a row is all zeros), rounded to
    :data:`COSINE_DECIMALS`: equal similarities, a sentence against itself above all, came out as 1.0,
    1.0000000000000002 or 0.9999999999999998 by their vectors' rounding, and Spearman ranked that noise (STS12's
    65 identical SMTeuroparl pairs moved its score by 0.07; a subset of identical pairs only scored +-100 instead
    of undefined)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.round(np.divide((a * b).sum(axis=1), norms, out=np.zeros(len(a)), where=norms > 0), COSINE_DECIMALS)


COSINE_DECIMALS = 12  # far above float64's rounding noise (about 1e-16), far below float32 vectors' resolution


@dataclass
class SubsetScore:
    name: str
    pairs: int
    unscored: int
    spearman: float  # x 100


@dataclass
class SetScore:
    """A set's figures (Spearman x 100): ``all`` pooled over every pair, ``mean`` over its subsets (STS12-16)."""

    name: str
    pairs: int
    all: float
    subsets: list[SubsetScore] = field(default_factory=list)

    @property
    def mean(self) -> float:
        """The unweighted mean over subsets; a single-file set's only figure."""
        return float(np.mean([s.spearman for s in self.subsets])) if len(self.subsets) > 1 else self.all


def score_sets(data: dict[str, list[StsPairs]], embed: Callable[[list[str]], np.ndarray]) -> list[SetScore]:
    """Score every set of ``data`` (set name -> its pairs). ``embed`` maps a list of sentences to their [n, d]
    embeddings; it is called once, over the distinct sentences of all sets."""
    index: dict[str, int] = {}
    for pairs in (p for parts in data.values() for p in parts):
        for sentence in (*pairs.first, *pairs.second):
            index.setdefault(sentence, len(index))
    logger.info("embedding %d distinct sentences of %d pairs", len(index),
                sum(len(p) for parts in data.values() for p in parts))
    sentences = list(index)
    vectors = np.asarray(embed(sentences))
    if vectors.shape[0] != len(index):
        raise ValueError(f"the encoder returned {vectors.shape[0]} embeddings for {len(index)} sentences")
    broken = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(broken):  # NaN/inf vectors would score cosine 0 and be ranked as if that were a similarity
        raise ValueError(f"the encoder returned {len(broken)} embeddings with NaN or inf values (a diverged "
                         f"checkpoint, or an overflow under bf16), e.g. for {sentences[broken[0]]!r}")
    results = []
    for name, parts in data.items():
        cosines, subsets = [], []
        for pairs in parts:
            sims = cosine_rows(vectors[[index[s] for s in pairs.first]], vectors[[index[s] for s in pairs.second]])
            cosines.append(sims)
            subsets.append(SubsetScore(pairs.name, len(pairs), pairs.unscored, 100 * spearman(sims, pairs.gold)))
        pooled = 100 * spearman(np.concatenate(cosines), np.concatenate([p.gold for p in parts]))
        undefined = [sub.name for sub in subsets if math.isnan(sub.spearman)]
        undefined += [name] if math.isnan(pooled) and len(subsets) > 1 else []
        if undefined:  # a constant side (every pair scored alike, or fewer than 2 pairs): no correlation exists
            raise ValueError(f"{name}: Spearman is undefined for {', '.join(undefined)}: the cosines or the gold "
                             "scores are all equal there, or it has fewer than 2 pairs")
        results.append(SetScore(name, sum(len(p) for p in parts), pooled, subsets))
        logger.info("%s: Spearman x100 all %.2f%s over %d pairs", name, pooled,
                    f", mean of {len(subsets)} subsets {results[-1].mean:.2f}" if len(subsets) > 1 else "",
                    results[-1].pairs)
    return results


# ---------------------------------------------------------------------------------------------------- encoder

def load_sentence_encoder(card, device: str | None = None, bf16: bool | None = False):
    """The card's dense encoder, in eval mode on ``device``. STS scores one embedding per sentence, so a DupMAE
    card is loaded as its dense side only (``DenseEncoderModel`` over the same checkpoint, pooling, W_cls and
    normalisation; the OT vocabulary head is never run)."""
    import torch

    from retromae_ir.encode import MODEL_CLASSES, DenseEncoderModel, load_card
    from retromae_ir.hardware import bf16_is_fast

    card = load_card(card)
    cls = DenseEncoderModel if card.sparse else MODEL_CLASSES[card.kind]
    model = cls.from_checkpoint(card)
    model = model.to(device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()
    model.bf16 = bf16 if bf16 is not None else bf16_is_fast(model.device)
    return model


def embed_with(model, batch_size: int = 64, progress: bool = True) -> Callable[[list[str]], np.ndarray]:
    """Sentences -> dense embeddings through the document side (``encode_passage``: the card's passage length,
    256 tokens for the MiniLM cards, like sentence-transformers' max_seq_length), with a tqdm bar."""
    def embed(sentences: list[str]) -> np.ndarray:
        return model.encode_passage(sentences, batch_size=batch_size, progress=progress).dense
    return embed


# ---------------------------------------------------------------------------------------------------- reports

AGGREGATIONS = {"all": "all (pooled subsets)", "mean": "mean of subsets"}


def results_frame(scores: list[SetScore], encoder: str):
    """The Table-4-shaped table: one row per STS12-16 aggregation (``all``, ``mean``), one column per set, and
    ``Avg.`` over the sets evaluated (STS-B and SICK-R have one figure, the same in both rows)."""
    import pandas as pd

    rows = []
    for key, label in AGGREGATIONS.items():
        if key == "mean" and not any(len(s.subsets) > 1 for s in scores):
            continue
        values = {s.name: (s.all if key == "all" else s.mean) for s in scores}
        rows.append({"encoder": encoder, "STS12-16 as": label, **values,
                     "Avg.": float(np.mean(list(values.values())))})
    return pd.DataFrame(rows)


def subsets_frame(scores: list[SetScore]):
    """One row per subset (and per set's pooled ``all`` row), with the pair counts and the unscored pairs dropped."""
    import pandas as pd

    rows = []
    for s in scores:
        for sub in s.subsets if len(s.subsets) > 1 else ():
            rows.append({"set": s.name, "subset": sub.name, "pairs": sub.pairs, "unscored dropped": sub.unscored,
                         "Spearman x100": sub.spearman})
        rows.append({"set": s.name, "subset": "all" if len(s.subsets) > 1 else "test",
                     "pairs": s.pairs, "unscored dropped": sum(sub.unscored for sub in s.subsets),
                     "Spearman x100": s.all})
    return pd.DataFrame(rows)


def write_sts_results(scores: list[SetScore], encoder: str, out_dir: str | os.PathLike,
                      notes: list[str] = ()) -> dict[str, Path]:
    """``sts-results.{md,csv,png}`` and ``sts-subsets.{md,csv}`` in ``out_dir``, each written atomically;
    Spearman x 100 with two decimals in the markdown tables, at full precision in the CSV files."""
    from retromae_ir.evaluate.report import write_bar_chart, write_table

    out_dir = Path(out_dir)
    table, subsets = results_frame(scores, encoder), subsets_frame(scores)
    written = {}
    for stem, frame, title in (("sts-results", table, f"STS: {encoder} (Spearman x 100 of cosine similarities)"),
                               ("sts-subsets", subsets, f"STS subsets: {encoder} (Spearman x 100)")):
        paths = write_table(frame, out_dir / stem, title, list(notes) if stem == "sts-results" else None, digits=2)
        written[f"{stem}.md"], written[f"{stem}.csv"] = paths
    chart = table.drop(columns=["encoder"]).set_index("STS12-16 as").T.reset_index(names="set")
    written["sts-results.png"] = write_bar_chart(chart, "set", [c for c in chart.columns if c != "set"],
                                                 out_dir / "sts-results.png", "Spearman x 100",
                                                 f"STS: {encoder}")
    return written


def result_notes(scores: list[SetScore], sets: Sequence[str]) -> list[str]:
    """The lines under the table: what each figure is and which sets it covers."""
    notes = ["Cosine similarity of the two sentences' dense embeddings (the card's document-side encoder; a "
             "DupMAE card's dense side only), Spearman x 100 against the gold scores."]
    if any(len(s.subsets) > 1 for s in scores):
        notes.append("STS12-16: 'all' pools the subsets' pairs into one correlation; 'mean' is the unweighted mean "
                     "of the subsets' correlations (per subset: sts-subsets.md). STS-B and SICK-R: test split, one "
                     "figure in both rows.")
    dropped = {s.name: sum(sub.unscored for sub in s.subsets) for s in scores}
    if any(dropped.values()):
        notes.append("Unscored pairs (blank gold lines) dropped: "
                     + ", ".join(f"{name} {n}" for name, n in dropped.items() if n) + ".")
    notes.append(f"Avg. is the mean over the {len(scores)} {'set' if len(scores) == 1 else 'sets'} evaluated: "
                 f"{', '.join(sets)}.")
    return notes
