"""The MKL vendor shim: built once, loaded only where preloaded, and the same products with or without it."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from retromae_ir import mkl_shim

needs_cc = pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None, reason="no C compiler")

PROBE = """
import json, torch
from retromae_ir.mkl_shim import loaded
torch.manual_seed(0)
a, b = torch.randn(300, 200), torch.randn(200, 100)
q, k, v = (torch.randn(2, 12, 40, 32) for _ in range(3))
mask = torch.zeros(2, 1, 40, 40); mask[1, ..., 30:] = float("-inf")
attention = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
print(json.dumps({"loaded": loaded(), "product": (a @ b).tolist(), "attention": attention.flatten().tolist()}))
"""


def probe(env_extra):
    env = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"} | env_extra
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@needs_cc
def test_the_library_is_built_once_and_reused(tmp_path):
    library = mkl_shim.build(tmp_path)
    assert library == tmp_path / mkl_shim.LIBRARY and library.stat().st_size > 0
    built = library.stat().st_mtime_ns
    assert mkl_shim.build(tmp_path) == library and library.stat().st_mtime_ns == built
    assert [path.name for path in tmp_path.iterdir()] == [mkl_shim.LIBRARY]  # no temporaries left


@needs_cc
def test_preloaded_only_where_asked_and_the_same_results(tmp_path):
    """Loaded in the process given LD_PRELOAD, not in one without. The products agree to rounding (on an AMD CPU
    with AVX-512 they come from other kernels; elsewhere from the same ones)."""
    import numpy as np

    library = mkl_shim.build(tmp_path)
    default, shimmed = probe({}), probe({"LD_PRELOAD": str(library)})
    assert (default["loaded"], shimmed["loaded"]) == (False, True)
    np.testing.assert_allclose(shimmed["product"], default["product"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(shimmed["attention"], default["attention"], rtol=1e-5, atol=1e-5)


def test_a_missing_compiler_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(FileNotFoundError, match="no C compiler 'no-such-cc' on PATH"):
        mkl_shim.build(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_default_place_is_under_the_toolkit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RETROMAE_IR_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "mkl_shim" / mkl_shim.LIBRARY)):
        mkl_shim.build()


def test_a_compiler_with_a_launcher_is_split(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "env cc")  # a launcher before the compiler, as "ccache gcc" is
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    assert mkl_shim.build(tmp_path).is_file()


@needs_cc
def test_the_command_prints_the_library_path(tmp_path, capsys):
    assert mkl_shim.main(["--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / mkl_shim.LIBRARY)


def test_the_command_exits_2_on_a_failed_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    with pytest.raises(SystemExit) as exit_:
        mkl_shim.main(["--cache-dir", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: false could not build {tmp_path / mkl_shim.LIBRARY}")


@pytest.mark.parametrize("name", ["with space", "with:colon"])
def test_a_folder_ld_preload_would_split_is_refused_before_building(tmp_path, name, capsys):
    """The loader splits LD_PRELOAD on spaces and colons and skips what it cannot open, silently: the printed path
    would then run at the default's speed."""
    folder = tmp_path / name
    with pytest.raises(SystemExit) as exited:
        mkl_shim.main(["--cache-dir", str(folder)])
    assert exited.value.code == 2
    assert "LD_PRELOAD reads as a separator" in capsys.readouterr().err
    assert not folder.exists()
