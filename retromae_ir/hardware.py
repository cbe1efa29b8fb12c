"""What the machine does fast: bf16 pays off on GPUs that support it and on CPUs with native bf16 dot products
(AVX512_BF16 or AMX); elsewhere (AVX2-only CPUs) PyTorch emulates it and bf16 runs several times slower. And how
big the CPU's last-level cache is, which bounds the batch a CPU encodes at full GEMM speed, and how much memory
there is for an index's pages."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# AMD GPUs with bf16 matrix instructions: MI100 (gfx908), MI200 (gfx90a), MI300 (gfx94x), MI350 (gfx95x), RDNA3 and
# RDNA4 (gfx11xx, gfx12xx); not MI50/MI60 (gfx906) or RDNA2 (gfx103x)
NATIVE_BF16_ROCM_ARCHS = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")
CPU_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
MEMINFO = Path("/proc/meminfo")
OWN_CGROUPS = Path("/proc/self/cgroup")
MOUNTS = Path("/proc/self/mountinfo")
CGROUP_ROOT = Path("/sys/fs/cgroup")  # where the hierarchies usually are, when mountinfo does not say
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
    if device.type == "cuda":  # is_bf16_supported() also says yes where bf16 is emulated
        if not torch.cuda.is_available():
            return False
        return gpu_bf16_is_native(device.index if device.index is not None else torch.cuda.current_device())
    if device.type == "cpu":
        return any(flag in cpu_flags() for flag in NATIVE_BF16_CPU_FLAGS)
    return False


def gpu_bf16_is_native(index: int) -> bool:
    """NVIDIA: from Ampere (capability 8.0) on. ROCm reports the gfx version as the capability (gfx906 and gfx90a
    both read 9.0), so there the architecture name decides."""
    if torch.version.hip:
        return torch.cuda.get_device_properties(index).gcnArchName.startswith(NATIVE_BF16_ROCM_ARCHS)
    return torch.cuda.get_device_capability(index) >= (8, 0)


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


def memory_available() -> int | None:
    """Bytes this process could fill (page cache included) before the kernel has to drop pages to make room:
    ``MemAvailable``, or less where a cgroup of this process (its own or one above it; v1 or v2, whose limits count
    page cache too) has a memory limit: that limit less what its processes hold outside the page cache. None where
    /proc/meminfo says nothing (not Linux)."""
    available = None
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if available is None:
        return None
    return min([available, *_cgroup_rooms()])


def _cgroup_rooms():
    """For each cgroup from this process's own up to the root with a memory limit (v2: the lower of memory.max
    and memory.high): the limit less the memory held there outside the page cache."""
    try:
        lines = OWN_CGROUPS.read_text().splitlines()
    except OSError:
        return
    mounts = _cgroup_mounts()
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        v2 = number == "0" and controllers == ""
        if not v2 and "memory" not in controllers.split(","):
            continue
        within, root = mounts.get(v2, ("/", CGROUP_ROOT if v2 else CGROUP_ROOT / "memory"))
        if within != "/" and (path + "/").startswith(within.rstrip("/") + "/"):
            path = path[len(within.rstrip("/")):]  # the mount shows the hierarchy from `within` down
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), -1, -1):
            folder = root.joinpath(*parts[:depth])
            names = ("memory.max", "memory.high") if v2 else ("memory.limit_in_bytes",)
            limits = [limit for limit in (_read_limit(folder / name) for name in names) if limit is not None]
            if limits:
                yield max(0, min(limits) - _held_outside_cache(folder, v2))


def _cgroup_mounts() -> dict[bool, tuple[str, Path]]:
    """Where the memory hierarchies are mounted ({v2: (the hierarchy's folder the mount shows, mount point)}),
    from /proc/self/mountinfo: v1's memory controller may share a mount with others (``/sys/fs/cgroup/cpu,memory``)
    and a container's mount may show its own cgroup as the root. Empty where the file cannot be read."""
    mounts: dict[bool, tuple[str, Path]] = {}
    try:
        lines = MOUNTS.read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        fields, _, tail = line.partition(" - ")
        fields, tail = fields.split(), tail.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        within, point = (_unescape(field) for field in fields[3:5])
        if tail[0] == "cgroup2":
            mounts.setdefault(True, (within, Path(point)))
        elif tail[0] == "cgroup" and "memory" in tail[2].split(","):
            mounts.setdefault(False, (within, Path(point)))
    return mounts


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda escape: chr(int(escape.group(1), 8)), field)


def _read_limit(path: Path) -> int | None:
    """A cgroup memory limit file's bytes: None for 'max', v1's 'no limit' (a page-rounded 2**63), or no file."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= 1 << 62:
        return None
    return int(text)


def _held_outside_cache(folder: Path, v2: bool) -> int:
    """A cgroup's memory use less its page cache (memory.current or memory.usage_in_bytes, less memory.stat's
    ``file``, or v1's ``total_cache``); 0 where the files cannot be read."""
    try:
        usage = int((folder / ("memory.current" if v2 else "memory.usage_in_bytes")).read_text())
        stat = dict(line.split()[:2] for line in (folder / "memory.stat").read_text().splitlines() if line.strip())
        cache = int(stat["file"] if v2 else stat.get("total_cache", stat["cache"]))
    except (OSError, ValueError, KeyError):
        return 0
    return max(0, usage - cache)
