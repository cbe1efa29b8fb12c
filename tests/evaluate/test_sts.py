"""STS evaluation (retromae_ir.evaluate.sts, eval/sts.py): the readers on tiny files (blank gold lines, malformed
lines named by file and line), Spearman on fixed inputs, resolution (an explicit --data-dir never falls through;
the download path on a local archive), and the driver end to end on a tiny random BERT over tiny STS files."""
from __future__ import annotations

import csv
import dataclasses
import math
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lock_holder import held_lock
from retromae_ir.data.readers import DataFormatError
from retromae_ir.evaluate import sts
from retromae_ir.evaluate.sts import (STS_SETS, StsDataUnavailable, StsPairs, cosine_rows, read_senteval_subset,
                                      read_sick, read_sts_set, read_stsb, resolve_sts, score_sets, spearman)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "eval"))
import sts as sts_driver  # noqa: E402  (eval/sts.py)

WORDS = ["a man is playing a guitar", "a woman slices an onion", "the cat sleeps on the mat", "kids play football",
         "a dog runs in the park", "stocks fell sharply today", "the senate passed the bill", "it is raining"]


def write_senteval(folder: Path, subset: str, pairs: list[tuple[str, str]], gold: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"STS.input.{subset}.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    (folder / f"STS.gs.{subset}.txt").write_text("".join(f"{g}\n" for g in gold), encoding="utf-8")


def tiny_pairs(seed: int, n: int = 5) -> tuple[list[tuple[str, str]], list[str]]:
    rng = np.random.default_rng(seed)
    pairs = [(WORDS[rng.integers(len(WORDS))], WORDS[rng.integers(len(WORDS))] + f" {i}") for i in range(n)]
    return pairs, [f"{x:.2f}" for x in rng.uniform(0, 5, n)]


def write_sick(path: Path, rows: list[tuple[str, str, str]], split_column: bool = False) -> None:
    header = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment"]
    lines = ["\t".join(header + (["SemEval_set"] if split_column else []))]
    for i, (a, b, score) in enumerate(rows, start=1):
        lines.append("\t".join([str(i), a, b, score, "NEUTRAL"] + (["TEST" if i % 2 else "TRAIN"] if split_column
                                                                    else [])))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_stsb(path: Path, rows: list[tuple[str, str, str]], header: bool = False) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(rows)


def build_root(root: Path) -> Path:
    """Every set, a few pairs a subset; STS15/16 with blank (unscored) gold lines as in the real files."""
    for number, name in enumerate(sts.SENTEVAL_SETS):
        for k, subset in enumerate(STS_SETS[name].subsets):
            pairs, gold = tiny_pairs(100 * number + k)
            if name in ("STS15", "STS16"):
                gold[1] = ""
            write_senteval(root / STS_SETS[name].path, subset, pairs, gold)
    pairs, gold = tiny_pairs(7, 6)
    write_stsb(root / "stsb-en-test.csv", [(a, b, g) for (a, b), g in zip(pairs, gold)])
    pairs, gold = tiny_pairs(8, 6)
    write_sick(root / "SICK-test.tsv", [(a, b, g) for (a, b), g in zip(pairs, gold)])
    return root


# ----------------------------------------------------------------------------------------------------- readers

def test_senteval_reader_drops_blank_gold_lines(tmp_path):
    write_senteval(tmp_path, "x", [("a b", "c d"), ("e f", "g h"), ("i j", "k l"), ("m", "n")],
                   ["4.0", "", "  ", "1.5"])
    pairs = read_senteval_subset(tmp_path, "x")
    assert (pairs.first, pairs.second, pairs.gold.tolist(), pairs.unscored) == (["a b", "m"], ["c d", "n"],
                                                                               [4.0, 1.5], 2)


def test_senteval_reader_keeps_the_first_two_columns_and_trailing_blank_gold(tmp_path):
    (tmp_path / "STS.input.x.txt").write_text("a\tb\tsrc1\tsrc2\nc\td\n")
    (tmp_path / "STS.gs.x.txt").write_text("3\n\n")  # the last pair unscored: the file ends in a blank line
    pairs = read_senteval_subset(tmp_path, "x")
    assert (pairs.first, pairs.second, pairs.gold.tolist(), pairs.unscored) == (["a"], ["b"], [3.0], 1)


@pytest.mark.parametrize("input_text, gold_text, where, says", [
    ("a\tb\nno tab here\n", "1\n2\n", "STS.input.x.txt:2:", "expected two tab-separated sentences"),
    ("a\tb\nc\td\n", "1\nfive\n", "STS.gs.x.txt:2:", "'five' is not a finite number"),
    ("a\tb\nc\td\n", "1\nnan\n", "STS.gs.x.txt:2:", "is not a finite number"),
    ("a\tb\nc\td\n", "1\n1_5\n", "STS.gs.x.txt:2:", "'1_5' is not a finite number"),  # float() read 15.0
    ("a\tb\nc\td\n", "1\n", "STS.gs.x.txt:", "1 lines, but"),
])
def test_senteval_reader_names_file_and_line(tmp_path, input_text, gold_text, where, says):
    (tmp_path / "STS.input.x.txt").write_text(input_text)
    (tmp_path / "STS.gs.x.txt").write_text(gold_text)
    with pytest.raises(DataFormatError) as error:
        read_senteval_subset(tmp_path, "x")
    assert str(error.value).startswith(str(tmp_path / where)) and says in str(error.value)


def test_non_utf8_bytes_name_the_line(tmp_path):
    (tmp_path / "STS.input.x.txt").write_bytes(b"a\tb\nc\t\xff\n")
    (tmp_path / "STS.gs.x.txt").write_text("1\n2\n")
    with pytest.raises(DataFormatError, match=r"STS\.input\.x\.txt:2: not valid UTF-8"):
        read_senteval_subset(tmp_path, "x")


def test_a_byte_order_mark_inside_a_file_names_the_line(tmp_path):
    """Files joined with cat: the second file's mark stayed in a sentence (exit 0), as the other readers refuse."""
    (tmp_path / "STS.input.x.txt").write_text("\ufeffa\tb\n\ufeffc\td\n", encoding="utf-8")
    (tmp_path / "STS.gs.x.txt").write_text("1\n2\n")
    with pytest.raises(DataFormatError, match=r"STS\.input\.x\.txt:2: a byte-order mark starts this line"):
        read_senteval_subset(tmp_path, "x")


def test_stsb_reader_quoting_header_and_errors(tmp_path):
    path = tmp_path / "stsb.csv"
    write_stsb(path, [("A girl, smiling.", "A girl smiles.", "4.5"), ("x", "y", "0.0")], header=True)
    pairs = read_stsb(path)
    assert (pairs.first, pairs.second, pairs.gold.tolist()) == (["A girl, smiling.", "x"], ["A girl smiles.", "y"],
                                                                [4.5, 0.0])
    path.write_text("a,b,1.0\r\nc,d\r\n")
    with pytest.raises(DataFormatError, match=rf"^{path}:2: expected 3 comma-separated fields"):
        read_stsb(path)
    path.write_text("a,b,1.0\nc,d,high\n")
    with pytest.raises(DataFormatError, match=rf"^{path}:2: gold score 'high'"):
        read_stsb(path)


def test_sick_reader_columns_by_header_and_test_rows_only(tmp_path):
    path = tmp_path / "SICK.txt"
    write_sick(path, [("a", "b", "4.5"), ("c", "d", "1.0"), ("e", "f", "3.2")], split_column=True)
    pairs = read_sick(path)
    assert (pairs.first, pairs.gold.tolist()) == (["a", "e"], [4.5, 3.2])  # rows 1 and 3 are TEST
    path.write_text("pair_ID\tsentence_A\tsentence_B\tscore\n1\ta\tb\t3\n")
    with pytest.raises(DataFormatError, match=rf"^{path}:1: the header lacks column 'relatedness_score'"):
        read_sick(path)
    write_sick(path, [("a", "b", "4.5")])
    with open(path, "a") as handle:
        handle.write("2\tonly two\n")
    with pytest.raises(DataFormatError, match=rf"^{path}:3: expected 5 tab-separated columns"):
        read_sick(path)


# ----------------------------------------------------------------------------------------------------- scoring

def test_spearman_exact_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8, abs=1e-15)  # 1 - 6 * 2 / (4 * 15)
    # ties get their average rank: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4) give 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9), abs=1e-15)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 6, 50), rng.normal(size=50)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)


def test_cosine_rows():
    a = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    b = np.array([[0.0, 2.0], [6.0, 8.0], [1.0, 1.0]])
    assert cosine_rows(a, b).tolist() == [0.0, 1.0, 0.0]


def test_score_sets_pooled_and_mean_and_one_embedding_call():
    vectors = {"s1": [1, 0], "s2": [0, 1], "s3": [1, 1], "s4": [1, 0.5]}
    calls = []

    def embed(sentences):
        calls.append(list(sentences))
        return np.array([vectors[s] for s in sentences], dtype=float)

    one = StsPairs("one", ["s1", "s1", "s1"], ["s1", "s4", "s2"], np.array([5.0, 3.0, 0.0]))  # cosines 1, .89, 0
    two = StsPairs("two", ["s3", "s3", "s2"], ["s1", "s4", "s4"], np.array([1.0, 2.0, 3.0]))  # .71, .95, .45
    (result,) = score_sets({"STSX": [one, two]}, embed)
    assert calls == [["s1", "s4", "s2", "s3"]]  # distinct sentences, once
    assert [s.spearman for s in result.subsets] == [100.0, pytest.approx(-50.0)]  # 1 - 6 * 6 / (3 * 8)
    assert result.mean == pytest.approx(25.0)
    # pooled: cosine ranks (6, 4, 1, 3, 5, 2) against gold ranks (6, 4.5, 1, 2, 3, 4.5)
    assert result.all == pytest.approx(100 * 11.5 / math.sqrt(17.5 * 17), abs=1e-12)
    assert result.pairs == 6


def test_non_finite_embeddings_and_undefined_correlations_are_refused():
    """A NaN or inf vector (a diverged checkpoint, a bf16 overflow) scored cosine 0 and was ranked as a similarity;
    a set whose cosines are all equal has no Spearman (NaN, shown as '-' in an exit-0 table)."""
    pairs = StsPairs("one", ["s1", "s1", "s3"], ["s2", "s3", "s2"], np.array([5.0, 3.0, 0.0]))
    for bad in (np.nan, np.inf):
        vectors = {"s1": [1.0, 0.0], "s2": [0.0, 1.0], "s3": [bad, 1.0]}
        with pytest.raises(ValueError, match="1 embeddings with NaN or inf values.*'s3'"):
            score_sets({"STSX": [pairs]}, lambda sentences: np.array([vectors[s] for s in sentences]))
    same = lambda sentences: np.ones((len(sentences), 2))  # every cosine 1
    with pytest.raises(ValueError, match="STSX: Spearman is undefined for one: "):
        score_sets({"STSX": [pairs]}, same)


def test_a_sentence_against_itself_ties_with_every_other_such_pair():
    """Cosines of identical pairs came out 1.0 or 0.9999999999999998 by their vectors' rounding, and Spearman
    ranked that noise: a subset of identical pairs only scored -100 (undefined), and ties among real pairs broke."""
    vectors = {"a": [1.0, 2.0, 3.0], "b": [0.1, 0.7, 0.3], "c": [0.3, 0.1, 0.2]}
    encode = lambda sentences: np.array([vectors[s] for s in sentences], dtype=np.float32)  # noqa: E731
    assert len(set(cosine_rows(encode("ab"), encode("ab")))) == 1
    identical = StsPairs("two", ["a", "b"], ["a", "b"], np.array([4.6, 5.0]))
    with pytest.raises(ValueError, match="STSX: Spearman is undefined for two"):
        score_sets({"STSX": [identical]}, encode)
    mixed = StsPairs("three", ["a", "b", "a"], ["a", "b", "c"], np.array([4.6, 5.0, 1.0]))
    assert score_sets({"STSX": [mixed]}, encode)[0].all == pytest.approx(100 * spearman([1, 1, 0], [4.6, 5, 1]))


# -------------------------------------------------------------------------------------------------- resolution

@pytest.fixture()
def clean_env(tmp_path, monkeypatch):
    monkeypatch.delenv(sts.ENV_VAR, raising=False)
    monkeypatch.setenv(sts.CACHE_ENV_VAR, str(tmp_path / "cache"))


def test_explicit_data_dir_without_a_set_does_not_fall_back(tmp_path, clean_env, monkeypatch):
    build_root(tmp_path / "env")
    monkeypatch.setenv(sts.ENV_VAR, str(tmp_path / "env"))
    assert resolve_sts("STS-B") == tmp_path / "env" / "stsb-en-test.csv"
    (tmp_path / "empty").mkdir()
    with pytest.raises(StsDataUnavailable, match=r"STS set STS13 is not in --data-dir .*STS\.input\.FNWN\.txt is "
                                                 r"missing"):
        resolve_sts("STS13", tmp_path / "empty")
    monkeypatch.delenv(sts.ENV_VAR)
    with pytest.raises(StsDataUnavailable, match="not found and downloading is disabled"):
        resolve_sts("SICK-R", download=False)


def test_an_incomplete_copy_placed_earlier_in_the_order_is_an_error(tmp_path, clean_env, monkeypatch):
    """An environment copy of STS13 missing OnWN was passed over for the cache's complete one (scored, exit 0)."""
    build_root(Path(os.environ[sts.CACHE_ENV_VAR]))
    build_root(tmp_path / "env")
    (tmp_path / "env" / "STS13-en-test" / "STS.input.OnWN.txt").unlink()
    monkeypatch.setenv(sts.ENV_VAR, str(tmp_path / "env"))
    with pytest.raises(StsDataUnavailable, match=r"STS set STS13 in .*env \(\$RETROMAE_IR_STS\) is incomplete: "
                                                 r".*STS\.input\.OnWN\.txt is missing; complete or remove"):
        resolve_sts("STS13", download=False)
    assert resolve_sts("STS12", download=False) == tmp_path / "env" / "STS12-en-test"  # complete: used


def test_an_environment_root_that_is_no_root_is_an_error(tmp_path, clean_env, monkeypatch):
    """$RETROMAE_IR_STS mistyped, or naming STS13-en-test itself, was skipped: the cache's copy (or a download) was
    scored instead of the user's (exit 0)."""
    build_root(Path(os.environ[sts.CACHE_ENV_VAR]))
    build_root(tmp_path / "env")
    monkeypatch.setenv(sts.ENV_VAR, str(tmp_path / "nv"))
    with pytest.raises(FileNotFoundError, match=r"\$RETROMAE_IR_STS names no folder"):
        resolve_sts("STS13", download=False)
    monkeypatch.setenv(sts.ENV_VAR, str(tmp_path / "env" / "STS13-en-test"))
    with pytest.raises(ValueError, match=r"is one dataset's folder \(it holds STS\.input\..*\.txt\)"):
        resolve_sts("STS13", download=False)


def test_download_from_an_official_style_archive(tmp_path, clean_env, monkeypatch):
    write_sick(tmp_path / "SICK_test_annotated.txt", [("a", "b", "4.5"), ("c", "d", "1.0")])
    with zipfile.ZipFile(tmp_path / "sick.zip", "w") as zf:
        zf.write(tmp_path / "SICK_test_annotated.txt", "SICK_test_annotated.txt")
    sixteen = STS_SETS["STS16"]
    with zipfile.ZipFile(tmp_path / "sts16.zip", "w") as zf:
        for subset in sixteen.subsets:  # the 2016 archive names its files STS2016.*
            zf.writestr(f"{sixteen.archive_folder}/STS2016.input.{subset}.txt", "x y\tz w\tsrc\tsrc\nu\tv\n")
            zf.writestr(f"{sixteen.archive_folder}/STS2016.gs.{subset}.txt", "2.5\n\n")
    monkeypatch.setitem(STS_SETS, "SICK-R", dataclasses.replace(STS_SETS["SICK-R"],
                                                                url=(tmp_path / "sick.zip").as_uri()))
    monkeypatch.setitem(STS_SETS, "STS16", dataclasses.replace(sixteen, url=(tmp_path / "sts16.zip").as_uri()))
    assert read_sick(resolve_sts("SICK-R")).gold.tolist() == [4.5, 1.0]
    folder = resolve_sts("STS16")
    assert folder == tmp_path / "cache" / "STS16-en-test"
    assert [len(p) for p in read_sts_set("STS16", folder)] == [1] * 5
    assert resolve_sts("STS16") == folder  # found in the cache the second time
    monkeypatch.setitem(STS_SETS, "STS-B", dataclasses.replace(STS_SETS["STS-B"],
                                                               url=(tmp_path / "missing.tar.gz").as_uri()))
    with pytest.raises(StsDataUnavailable, match=r"missing\.tar\.gz: download failed"):
        resolve_sts("STS-B")
    assert not (tmp_path / "cache" / "stsb-en-test.csv").exists()


# ------------------------------------------------------------------------------------------------- the driver

@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> Path:
    return build_root(tmp_path_factory.mktemp("sts-data"))


def tiny_card_file(folder: Path, checkpoint: Path, kind: str = "mean-dense") -> Path:
    path = folder / f"tiny-{kind}.yaml"
    path.write_text(f"checkpoint: {checkpoint}\nkind: {kind}\ndims: 32\nnormalize: false\npooling: "
                    f"{'mean' if kind == 'mean-dense' else 'cls'}\nmax_passage_length: 32\n")
    return path


def test_driver_end_to_end(tmp_path, tiny_root, tiny_bert_dir, clean_env, capsys):
    card = tiny_card_file(tmp_path, tiny_bert_dir)
    out = tmp_path / "out"
    assert sts_driver.main(["--encoder", str(card), "--data-dir", str(tiny_root), "--output", str(out),
                            "--device", "cpu", "--batch-size", "16"]) == 0
    for name in ("sts-results.md", "sts-results.csv", "sts-results.png", "sts-subsets.md", "sts-subsets.csv",
                 "sts.log"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert not list(out.glob(".*.tmp"))
    import pandas as pd

    table = pd.read_csv(out / "sts-results.csv")
    assert list(table["STS12-16 as"]) == ["all (pooled subsets)", "mean of subsets"]
    assert list(table.columns[2:]) == [*STS_SETS, "Avg."]
    subsets = pd.read_csv(out / "sts-subsets.csv")
    sts15 = subsets[subsets["set"] == "STS15"]
    assert list(sts15["subset"]) == [*STS_SETS["STS15"].subsets, "all"] and set(sts15["pairs"]) == {4, 20}
    assert sts15["unscored dropped"].iloc[-1] == 5
    # STS-B's figure, recomputed with the library's encoder and scipy as the oracle
    from scipy.stats import spearmanr

    from retromae_ir.encode import EncoderModel

    model = EncoderModel.from_card(str(card), device="cpu")
    pairs = read_stsb(tiny_root / "stsb-en-test.csv")
    a, b = model.encode_passage(pairs.first).dense, model.encode_passage(pairs.second).dense
    expected = 100 * spearmanr(cosine_rows(a, b), pairs.gold).statistic
    assert table["STS-B"].tolist() == pytest.approx([expected] * 2, abs=1e-3)
    mean_row = table.iloc[1]
    sts12 = subsets[(subsets["set"] == "STS12") & (subsets["subset"] != "all")]["Spearman x100"]
    assert mean_row["STS12"] == pytest.approx(sts12.mean(), abs=1e-3)
    printed = capsys.readouterr().out
    assert "| encoder | STS12-16 as | STS12 |" in printed and "'all' pools the subsets" in printed


def test_dupmae_card_scores_its_dense_side(tmp_path, tiny_bert_dir):
    from retromae_ir.encode import EncoderModel

    card = tiny_card_file(tmp_path, tiny_bert_dir, "dupmae")
    dense_only = sts.load_sentence_encoder(str(card), device="cpu")
    full = EncoderModel.from_card(str(card), device="cpu")
    assert type(full).__name__ == "DupMAEEncoderModel" and type(dense_only).__name__ == "DenseEncoderModel"
    np.testing.assert_allclose(dense_only.encode_passage(WORDS).dense, full.encode_passage(WORDS).dense, atol=1e-5)


def test_driver_errors(tmp_path, tiny_root, tiny_bert_dir, clean_env, capsys):
    card = str(tiny_card_file(tmp_path, tiny_bert_dir))
    with pytest.raises(SystemExit) as exit_:
        sts_driver.main(["--help"])
    assert exit_.value.code == 0 and "usage: eval/sts.py" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        sts_driver.main(["--encoder", card, "--sets", "STS17"])
    assert exit_.value.code == 2 and "invalid choice: 'STS17'" in capsys.readouterr().err

    def fails(argv, encoder=card) -> str:
        with pytest.raises(SystemExit) as exit_:
            sts_driver.main(["--encoder", encoder, "--output", str(tmp_path / "out"), *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "Traceback" not in err
        (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
        return line

    (tmp_path / "empty").mkdir()
    line = fails(["--data-dir", str(tmp_path / "empty"), "--sets", "SICK-R"])
    assert f"not in --data-dir {tmp_path / 'empty'}: {tmp_path / 'empty' / 'SICK-test.tsv'} is missing" in line
    bad = tmp_path / "bad"
    bad.mkdir()
    write_stsb(bad / "stsb-en-test.csv", [("a", "b", "1"), ("c", "d", "x")])
    line = fails(["--data-dir", str(bad), "--sets", "STS-B"])
    assert line.startswith(f"error: {bad / 'stsb-en-test.csv'}:2: gold score 'x'")
    assert "no encoder card named" in fails([], encoder="no-such-card")
    assert not (tmp_path / "out").exists()  # the sets are read before the output folder is claimed
    with held_lock(tmp_path / "out") as pid:
        assert f"(PID {pid})" in fails(["--data-dir", str(tiny_root)])
