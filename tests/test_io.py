"""Atomic writes keep the user's umask; one writer per output."""
import os

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
