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


def test_a_gpu_is_bf16_only_from_ampere_on_and_the_one_asked_about(monkeypatch):
    """torch.cuda.is_bf16_supported() says yes on a T4 or V100 too (emulated, slower and less precise than fp32),
    and answers for the current device, not the one asked about."""
    import torch

    capability = {0: (7, 5), 1: (8, 0), 2: (9, 0)}  # a T4, an A100, an H100
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not hardware.bf16_is_fast("cuda")  # no CUDA here: no, not an error
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability[index])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert not hardware.bf16_is_fast("cuda") and not hardware.bf16_is_fast("cuda:0")
    assert hardware.bf16_is_fast("cuda:1") and hardware.bf16_is_fast("cuda:2")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert hardware.bf16_is_fast("cuda") and not hardware.bf16_is_fast("cuda:0")
