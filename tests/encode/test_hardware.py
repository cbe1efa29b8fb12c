"""bf16 is chosen only where the hardware runs it natively."""
from retromae_ir import hardware


def test_cpu_bf16_follows_the_native_flags(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert not hardware.bf16_is_fast("cpu")
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert hardware.bf16_is_fast("cpu")
    monkeypatch.setattr(hardware, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    assert hardware.bf16_is_fast("cpu")


def test_meta_device_is_never_bf16():
    assert not hardware.bf16_is_fast("meta")
