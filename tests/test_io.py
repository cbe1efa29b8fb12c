"""Atomic writes keep the user's umask; one writer per output."""
import os
from pathlib import Path

import pytest

from lock_holder import held_lock
from retromae_ir.io import OutputLockedError, atomic_dir, atomic_write, output_lock


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_atomic_write_keeps_umask_mode(tmp_path, umask_022):
    with atomic_write(tmp_path / "run.trec") as out:
        out.write("1 Q0 d 1 1.0 x\n")
    assert (tmp_path / "run.trec").stat().st_mode & 0o777 == 0o644


def test_atomic_dir_keeps_umask_mode(tmp_path, umask_022):
    with atomic_dir(tmp_path / "index") as tmp:
        (tmp / "docid").write_text("d\n")
    assert (tmp_path / "index").stat().st_mode & 0o777 == 0o755


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the umask where Linux shows it")
def test_the_umask_is_read_without_setting_it(tmp_path, monkeypatch):
    """Reading it through os.umask set it to 022 for a moment: a file another thread created then got 022's
    permissions instead of the user's 077."""
    old = os.umask(0o077)
    try:
        calls = []
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or 0o077)
        with atomic_write(tmp_path / "run.trec") as out:
            out.write("x\n")
        assert calls == [] and (tmp_path / "run.trec").stat().st_mode & 0o777 == 0o600
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_a_folder_replaced_again_is_never_left_half_deleted(tmp_path, monkeypatch):
    """Saving a folder over itself (a checkpoint saved again at the end of a resumed run) deleted the old one in
    place before the rename: a kill during the deletion left half of it, which later loaded as complete. Now the
    old copy is moved aside first: a kill while deleting it leaves the new folder whole."""
    import shutil
    from pathlib import Path

    import retromae_ir.io as io

    target = tmp_path / "step-10"
    target.mkdir()
    for name in ("weights", "trainer_state", "projection"):
        (target / name).write_text("old")
    real_rmtree, killed = shutil.rmtree, []

    def killed_while_deleting(path, *args, **kwargs):
        if not killed:  # the first deletion is of the old copy: kill it midway
            killed.append(path)
            next(Path(path).iterdir()).unlink()
            raise KeyboardInterrupt
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(io.shutil, "rmtree", killed_while_deleting)
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(target) as tmp:
            for name in ("weights", "trainer_state", "projection"):
                (tmp / name).write_text("new")
    assert killed and {f.name: f.read_text() for f in target.iterdir()} == dict.fromkeys(
        ("weights", "trainer_state", "projection"), "new")
    monkeypatch.setattr(io.shutil, "rmtree", real_rmtree)
    assert io.remove_stale_temporaries(tmp_path)  # the old copy's remains, under a temporary's name
    assert [p.name for p in tmp_path.iterdir()] == ["step-10"]


def test_second_writer_is_refused_with_the_holders_pid(tmp_path):
    out = tmp_path / "idx"
    with held_lock(out) as pid:
        with pytest.raises(OutputLockedError, match=f"PID {pid}"):
            with output_lock(out):
                pass
    # the kernel released the dead holder's lock: the next writer gets it
    with output_lock(out):
        pass


def test_distinct_outputs_do_not_block_each_other(tmp_path):
    with output_lock(tmp_path / "a"):
        with output_lock(tmp_path / "b"):
            pass
    with output_lock(tmp_path / "a"):  # released at the end of the block
        pass


def test_a_settled_file_is_hashed_once_and_again_after_any_write(tmp_path, monkeypatch):
    """file_digest remembers a file untouched for a while by its stat; a rewrite of the same size with the mtime
    put back still changes the ctime, so it is hashed again."""
    import hashlib
    import os
    import time as clock

    import retromae_ir.io as io

    path = tmp_path / "corpus.jsonl"
    path.write_text("alpha\n")
    later = clock.time() + 60
    monkeypatch.setattr(io.time, "time", lambda: later)  # the file looks settled
    assert io.file_digest(path) == hashlib.sha256(b"alpha\n").hexdigest()
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: reads.append(a[0]) or real_open(*a, **k))
    assert io.file_digest(path) == hashlib.sha256(b"alpha\n").hexdigest() and reads == []  # remembered
    monkeypatch.undo()
    monkeypatch.setattr(io.time, "time", lambda: later)
    stat = path.stat()
    clock.sleep(0.1)
    path.write_text("omega\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert io.file_digest(path) == hashlib.sha256(b"omega\n").hexdigest()


def test_a_folder_replaced_after_its_check_is_a_one_line_error_exit_2(tmp_path, capsys):
    """``check_unchanged``'s refusal is something the user fixes (run again, one index folder per run): the
    command convention's one ``error:`` line and exit 2, not a traceback."""
    from retromae_ir.cli import command
    from retromae_ir.io import check_unchanged

    manifest = tmp_path / "index" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text("the checked one")

    @command
    def main(argv=None):
        manifest.write_text("another process's")
        check_unchanged(manifest, "the checked one")

    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "was replaced by another process" in err[0]


def test_a_hub_checkpoint_is_keyed_by_its_cached_revision(tmp_path, monkeypatch):
    """A hub name keyed by its name resumed a cross-encoder's partial scores after a newer revision was fetched
    (one file of two teachers), and kept a chain's scored file current. Keyed by the cached snapshot's files,
    another revision is another key; a snapshot without weights yet is no key at all (the name stands)."""
    from types import SimpleNamespace

    from retromae_ir.chain.stages import artifact_digest
    from retromae_ir.io import cached_checkpoint_key, checkpoint_file_digests
    from retromae_ir.rerank.score import score_key

    cache = tmp_path / "hub"
    repo = cache / "models--someone--reranker"

    def revision(commit: str, weights: bytes | None) -> None:
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
        if weights is not None:
            (snapshot / "model.safetensors").write_bytes(weights)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    assert cached_checkpoint_key("someone/reranker") == "someone/reranker"  # nothing cached: the name
    revision("0" * 40, None)
    assert cached_checkpoint_key("someone/reranker") == "someone/reranker"  # no weights yet: the name
    revision("a" * 40, b"old")
    old = cached_checkpoint_key("someone/reranker")
    assert old == checkpoint_file_digests(repo / "snapshots" / ("a" * 40)) and "model.safetensors" in old
    revision("b" * 40, b"new")
    new = cached_checkpoint_key("someone/reranker")
    assert new not in (old, "someone/reranker")
    assert artifact_digest(Path("someone/reranker")) == new  # the chain's soft-label stage input
    scored = tmp_path / "mined.jsonl"
    scored.write_text("")
    model = SimpleNamespace(args=SimpleNamespace(model="someone/reranker", max_length=256), device="cpu",
                            weights_key=None)
    assert score_key(model, SimpleNamespace(input=str(scored), corpus=None, batch_size=64, chunk_queries=64))["model_weights"] == new
    local = tmp_path / "local"
    local.mkdir()
    (local / "config.json").write_text("{}")
    assert cached_checkpoint_key(local) == checkpoint_file_digests(local) != {}  # a local folder: checkpoint_key


def test_a_training_start_from_the_hub_is_keyed_by_the_files_its_load_reads(tmp_path, monkeypatch):
    """A hub start was keyed by its name: a resume after the hub's revision moved on (another tokenizer) went on,
    and a chain kept every stage made from the old revision. start_key fetches the snapshot first, so a first run
    keys the files it is about to download, and a later key follows the revision the load would read."""
    import huggingface_hub
    from types import SimpleNamespace

    from retromae_ir.io import checkpoint_file_digests, start_key

    cache = tmp_path / "hub"
    repo = cache / "models--someone--encoder"
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    hub = {"revision": "a" * 40, "weights": b"old", "online": True, "asked": []}

    def model_info(self, name):
        if not hub["online"]:
            raise OSError("offline")
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=f) for f in
                                         ("config.json", "model.safetensors", "pytorch_model.bin", "vocab.txt")])

    def snapshot_download(name, allow_patterns):
        hub["asked"].append(sorted(allow_patterns))
        snapshot = repo / "snapshots" / hub["revision"]
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text("{}")
        (snapshot / "model.safetensors").write_bytes(hub["weights"])
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(hub["revision"])
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    first = start_key("someone/encoder")  # nothing cached yet: fetched, then keyed by its files
    assert first == checkpoint_file_digests(repo / "snapshots" / ("a" * 40)) and "model.safetensors" in first
    assert "*.safetensors" in hub["asked"][0] and "*.bin" not in hub["asked"][0]  # one weight format
    hub["online"] = False
    assert start_key("someone/encoder") == first  # offline: the cached snapshot, as the resume will load it
    hub.update(online=True, revision="b" * 40, weights=b"new")
    assert start_key("someone/encoder") not in (first, "someone/encoder")  # the hub moved on: another start
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty"))
    hub["online"] = False
    assert start_key("someone/encoder") == "someone/encoder"  # neither fetched nor cached: its name


@pytest.mark.parametrize("name", ["C:\\models\\x", "my model", "../x", "a/b/c", "x" * 200])
def test_a_name_that_is_no_hub_name_is_keyed_by_itself(name, tmp_path, monkeypatch):
    from retromae_ir.io import cached_checkpoint_key

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    assert cached_checkpoint_key(name) == name
