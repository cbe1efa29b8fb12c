"""What the machine does fast: bf16 pays off on GPUs that support it and on CPUs with native bf16 dot products
(AVX512_BF16 or AMX); elsewhere (AVX2-only CPUs) PyTorch emulates it and bf16 runs several times slower. And how
big the CPU's last-level cache is, which bounds the batch a CPU encodes at full GEMM speed."""
from __future__ import annotations

import functools
from pathlib import Path

import torch

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
CPU_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where there is no such file)."""
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        return frozenset()
    for line in info.read_text(errors="replace").splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def bf16_is_fast(device: torch.device | str) -> bool:
    device = torch.device(device)
    if device.type == "cuda":  # native from Ampere (8.0) on; is_bf16_supported() also says yes where it is emulated
        if not torch.cuda.is_available():
            return False
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_capability(index) >= (8, 0)
    if device.type == "cpu":
        return any(flag in cpu_flags() for flag in NATIVE_BF16_CPU_FLAGS)
    return False


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int | None:
    """Size of CPU 0's largest level-3-or-beyond data or unified cache (sysfs' ``index*/level`` and ``size``, for
    example ``3`` and ``32768K``); None where sysfs lists none (not Linux, some containers, CPUs whose last level
    is L2), so a caller does not mistake a private L2 for the shared cache."""
    sizes = []
    for index in CPU_CACHE.glob("index*"):
        try:
            kind, level, text = ((index / name).read_text().strip() for name in ("type", "level", "size"))
        except OSError:
            continue
        size = parse_cache_size(text)
        if kind != "Instruction" and level.isdigit() and int(level) >= 3 and size:
            sizes.append(size)
    return max(sizes) if sizes else None


def parse_cache_size(text: str) -> int | None:
    """Bytes of a sysfs cache size (``32768K``, ``1M``, ``512``); None for anything else."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in UNITS else (text, "")
    return int(number) * UNITS.get(unit, 1) if number.isdigit() else None
