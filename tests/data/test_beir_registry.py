"""BEIR registry: names and files, resolution order, the download path (a zip served by file://), non-public sets."""
from __future__ import annotations

import zipfile

import pytest

from retromae_ir.data import beir
from retromae_ir.data.beir import BEIR_DATASETS, DatasetUnavailable, get_beir_dataset, resolve_beir

FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
OFFICIAL_BASE_URL = beir.BEIR_BASE_URL  # read before the fixture below points it at a local folder


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No test may see the user's cache or data folder, nor reach the network."""
    monkeypatch.delenv("RETROMAE_IR_DATA", raising=False)
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(beir, "BEIR_BASE_URL", (tmp_path / "server").as_uri())


def make_dataset(root, name, subforums=(), marker=""):
    for sub in subforums or ("",):
        for rel in FILES:
            path = root / name / sub / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(marker)
    return root / name


def serve_zip(tmp_path, name, files):
    """Write BEIR's layout, ``<name>/<file>``, into ``server/<name>.zip``."""
    (tmp_path / "server").mkdir(exist_ok=True)
    with zipfile.ZipFile(tmp_path / "server" / f"{name}.zip", "w") as zf:
        for rel in files:
            zf.writestr(f"{name}/{rel}", f"{rel}\n")


def test_registry_holds_the_18_datasets():
    assert list(BEIR_DATASETS) == [
        "trec-covid", "bioasq", "nfcorpus", "nq", "hotpotqa", "fiqa", "signal1m", "trec-news", "robust04",
        "arguana", "webis-touche2020", "cqadupstack", "quora", "dbpedia-entity", "scidocs", "fever",
        "climate-fever", "scifact"]
    assert [n for n, d in BEIR_DATASETS.items() if not d.public] == ["bioasq", "signal1m", "trec-news", "robust04"]
    assert all(d.drop_self_hits for d in BEIR_DATASETS.values())  # BEIR's ignore_identical_ids, Pyserini's 2CR
    assert all(d.split == "test" for d in BEIR_DATASETS.values())


def test_urls_and_anserini_names():
    scifact = get_beir_dataset("scifact")
    assert scifact.url == beir.BEIR_BASE_URL + "/scifact.zip"
    (part,) = scifact.parts
    assert part.topics_file == "topics.beir-v1.0.0-scifact.test.tsv.gz"
    assert part.qrels_file == "qrels.beir-v1.0.0-scifact.test.txt"
    assert part.pyserini_topics == "beir-v1.0.0-scifact-test"


def test_official_url(monkeypatch):
    monkeypatch.setattr(beir, "BEIR_BASE_URL", OFFICIAL_BASE_URL)
    assert get_beir_dataset("nq").url == "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/nq.zip"


def test_cqadupstack_has_twelve_subforum_parts(tmp_path):
    parts = get_beir_dataset("cqadupstack").parts
    assert [p.subforum for p in parts] == ["android", "english", "gaming", "gis", "mathematica", "physics",
                                           "programmers", "stats", "tex", "unix", "webmasters", "wordpress"]
    assert parts[0].anserini_name == "beir-v1.0.0-cqadupstack-android"
    assert parts[0].folder(tmp_path / "cqadupstack") == tmp_path / "cqadupstack" / "android"


def test_every_part_has_its_anserini_files(shared_data):
    folder = shared_data / "topics-and-qrels"
    for dataset in BEIR_DATASETS.values():
        for part in dataset.parts:
            assert (folder / part.topics_file).is_file(), part.topics_file
            if part.dataset != "robust04":  # Anserini ships robust04's BEIR qrels elsewhere; not here
                assert (folder / part.qrels_file).is_file(), part.qrels_file


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown BEIR dataset 'scifacts'; known: trec-covid, bioasq"):
        get_beir_dataset("scifacts")


def test_data_dir_beats_env_beats_cache(tmp_path, monkeypatch):
    cache = make_dataset(tmp_path / "cache" / "beir", "scifact")
    env = make_dataset(tmp_path / "env", "scifact")
    arg = make_dataset(tmp_path / "arg", "scifact")
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "env"))
    assert resolve_beir("scifact", data_dir=tmp_path / "arg") == arg
    assert resolve_beir("scifact") == env
    monkeypatch.delenv("RETROMAE_IR_DATA")
    assert resolve_beir("scifact") == cache


def test_an_incomplete_folder_is_an_error_not_a_fall_back_to_another_copy(tmp_path, monkeypatch):
    """$RETROMAE_IR_DATA's scifact without its test qrels used to be skipped for the cache's (or a download):
    another copy than the one the user placed was scored, exit 0. A root without the dataset still falls through."""
    env = make_dataset(tmp_path / "env", "scifact")
    (env / "qrels" / "test.tsv").unlink()
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "env"))
    cache = make_dataset(tmp_path / "cache" / "beir", "scifact")
    with pytest.raises(DatasetUnavailable, match=r"\$RETROMAE_IR_DATA: .*env/scifact exists but is not a complete "
                                                 r"scifact \(qrels/test\.tsv missing\)"):
        resolve_beir("scifact")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "elsewhere"))
    assert resolve_beir("scifact") == cache


def test_an_environment_root_that_is_no_root_is_an_error(tmp_path, monkeypatch):
    """A mistyped $RETROMAE_IR_DATA, or one naming a dataset's own folder, was skipped as a root without the dataset:
    the cache's (or a downloaded) scifact was scored instead of the user's, exit 0."""
    make_dataset(tmp_path / "cache" / "beir", "scifact")
    mine = make_dataset(tmp_path / "data", "scifact")
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "dta"))
    with pytest.raises(FileNotFoundError, match=r"\$RETROMAE_IR_DATA names no folder .*correct or unset it"):
        resolve_beir("scifact")
    monkeypatch.setenv("RETROMAE_IR_DATA", str(mine))
    with pytest.raises(ValueError, match=rf"is one dataset's folder \(it holds corpus.jsonl\): it names the folder "
                                         rf"that holds the datasets, {tmp_path / 'data'}"):
        resolve_beir("scifact")
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "data"))
    assert resolve_beir("scifact") == mine


def test_explicit_data_dir_without_the_dataset_fails_even_when_the_environment_has_it(tmp_path, monkeypatch):
    make_dataset(tmp_path / "env", "scifact")
    make_dataset(tmp_path / "cache" / "beir", "scifact")
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "env"))
    serve_zip(tmp_path, "scifact", FILES)  # nor is it downloaded
    arg = make_dataset(tmp_path / "arg", "scifact")
    (arg / "qrels" / "test.tsv").unlink()
    with pytest.raises(DatasetUnavailable, match=r"'scifact' is not in --data-dir .*arg: .*qrels/test\.tsv is missing"):
        resolve_beir("scifact", data_dir=tmp_path / "arg")
    with pytest.raises(DatasetUnavailable, match="not tried when --data-dir is given"):
        resolve_beir("scifact", data_dir=tmp_path / "nowhere")
    assert resolve_beir("scifact") == tmp_path / "env" / "scifact"  # without --data-dir the environment's copy


def test_real_shared_scifact_through_env(shared_data, monkeypatch):
    monkeypatch.setenv("RETROMAE_IR_DATA", str(shared_data / "beir"))
    assert resolve_beir("scifact") == shared_data / "beir" / "scifact"


def test_download_unzips_into_the_cache(tmp_path):
    serve_zip(tmp_path, "nfcorpus", FILES + ("qrels/dev.tsv",))
    folder = resolve_beir("nfcorpus")
    assert folder == tmp_path / "cache" / "beir" / "nfcorpus"
    assert (folder / "qrels" / "test.tsv").read_text() == "qrels/test.tsv\n"
    assert sorted(p.name for p in (tmp_path / "cache" / "beir").iterdir()) == ["nfcorpus"]  # no staging left behind
    (tmp_path / "server" / "nfcorpus.zip").unlink()
    assert resolve_beir("nfcorpus") == folder  # second call: from the cache


def test_download_of_cqadupstack_checks_every_subforum(tmp_path):
    files = [f"{sub}/{rel}" for sub in beir.CQADUPSTACK_SUBFORUMS for rel in FILES]
    serve_zip(tmp_path, "cqadupstack", files[:-1])  # wordpress lacks its qrels
    with pytest.raises(DatasetUnavailable, match="archive lacks cqadupstack/wordpress/qrels/test.tsv"):
        resolve_beir("cqadupstack")
    assert list((tmp_path / "cache" / "beir").iterdir()) == []
    serve_zip(tmp_path, "cqadupstack", files)
    assert (resolve_beir("cqadupstack") / "wordpress" / "corpus.jsonl").is_file()


def test_failed_download_and_bad_zip(tmp_path):
    with pytest.raises(DatasetUnavailable, match=r"fiqa\.zip: download failed"):
        resolve_beir("fiqa")
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "fiqa.zip").write_bytes(b"not a zip")
    with pytest.raises(DatasetUnavailable, match=r"fiqa\.zip: not a valid zip archive"):
        resolve_beir("fiqa")
    assert list((tmp_path / "cache" / "beir").iterdir()) == []


def test_download_can_be_disabled(tmp_path):
    serve_zip(tmp_path, "fiqa", FILES)
    with pytest.raises(DatasetUnavailable, match="'fiqa' was not found and downloading is disabled"):
        resolve_beir("fiqa", download=False)


def test_bioasq_is_unavailable_and_says_what_to_place_where(tmp_path, monkeypatch):
    (tmp_path / "env").mkdir()
    monkeypatch.setenv("RETROMAE_IR_DATA", str(tmp_path / "env"))
    with pytest.raises(DatasetUnavailable) as err:
        resolve_beir("bioasq")
    message = str(err.value)
    assert "'bioasq' is not publicly downloadable" in message
    assert "place corpus.jsonl, queries.jsonl, qrels/test.tsv in one of: " in message
    for where in (f"{tmp_path / 'env' / 'bioasq'} ($RETROMAE_IR_DATA)",
                  f"{tmp_path / 'cache' / 'beir' / 'bioasq'} (cache)"):
        assert where in message
    with pytest.raises(DatasetUnavailable, match="not in --data-dir .*; it is not publicly downloadable"):
        resolve_beir("bioasq", data_dir=tmp_path / "arg")


def test_non_public_dataset_placed_locally_resolves(tmp_path):
    folder = make_dataset(tmp_path, "robust04")
    assert resolve_beir("robust04", data_dir=tmp_path) == folder


def test_a_hand_placed_incomplete_folder_is_never_deleted_by_the_download(tmp_path):
    """The download renames a staged, checked folder into place, so an incomplete one in the cache was put there by
    hand: it is kept, and the download says what to do, instead of deleting the user's files."""
    serve_zip(tmp_path, "nfcorpus", FILES)
    mine = tmp_path / "cache" / "beir" / "nfcorpus"
    mine.mkdir(parents=True)
    (mine / "corpus.jsonl").write_text("my own corpus\n")
    with pytest.raises(DatasetUnavailable, match="nfcorpus exists but is not a complete nfcorpus"):
        resolve_beir("nfcorpus")
    assert (mine / "corpus.jsonl").read_text() == "my own corpus\n"


def test_a_download_finished_by_another_process_first_is_used(tmp_path, monkeypatch):
    """Two processes download the same dataset: the one that renames second finds a complete folder in place and
    uses it, instead of calling it hand-placed and failing."""
    serve_zip(tmp_path, "nfcorpus", FILES)
    real = beir.fetch

    def racing(url, dest, *args, **kwargs):
        real(url, dest, *args, **kwargs)
        make_dataset(tmp_path / "cache" / "beir", "nfcorpus")  # the other process's rename lands meanwhile

    monkeypatch.setattr(beir, "fetch", racing)
    folder = resolve_beir("nfcorpus")
    assert folder == tmp_path / "cache" / "beir" / "nfcorpus" and beir.get_beir_dataset("nfcorpus").is_complete(folder)


def test_scifact_folder_and_anserini_files_judge_the_same(shared_data):
    """Evaluation reads the BEIR folder's qrels; Pyserini's regressions Anserini's file: the same judgements."""
    from retromae_ir.data.readers import load_qrels

    part = get_beir_dataset("scifact").parts[0]
    beir_folder = shared_data / "beir" / "scifact"
    anserini = shared_data / "topics-and-qrels" / part.qrels_file
    assert load_qrels(beir_folder / "qrels" / "test.tsv") == load_qrels(anserini)
