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
    monkeypatch.setattr(torch.version, "hip", None)  # a CUDA build, wherever the test runs
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


def test_an_amd_gpu_is_bf16_by_its_architecture_not_its_capability(monkeypatch):
    """ROCm's capability is the gfx version: an MI50 (gfx906) and an MI250 (gfx90a) both read (9, 0), an RX 6800
    (gfx1030) reads (10, 3); only the MI250 runs bf16 natively."""
    import types

    import torch

    archs = {0: "gfx906:sramecc+:xnack-", 1: "gfx90a:sramecc+:xnack-", 2: "gfx1030", 3: "gfx942:sramecc+:xnack-",
             4: "gfx1100"}
    capability = {0: (9, 0), 1: (9, 0), 2: (10, 3), 3: (9, 4), 4: (11, 0)}
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability[index])
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(gcnArchName=archs[index]))
    assert [hardware.bf16_is_fast(f"cuda:{i}") for i in range(5)] == [False, True, False, True, True]


def test_memory_available_is_meminfo_capped_by_the_lowest_cgroup_room_above(tmp_path, monkeypatch):
    """v1 and v2 limits of the process's cgroup and of those above it, less what each holds outside the page
    cache; 'max' and v1's page-rounded 2**63 are none; v2's memory.high counts where lower than memory.max."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    monkeypatch.setattr(hardware, "MEMINFO", meminfo)
    monkeypatch.setattr(hardware, "CGROUP_ROOT", tmp_path / "cg")
    own = tmp_path / "cgroup"
    monkeypatch.setattr(hardware, "OWN_CGROUPS", own)
    monkeypatch.setattr(hardware, "MOUNTS", tmp_path / "no-mountinfo")  # the usual mount points
    own.write_text("4:memory:/a/b:c\n1:cpu:/a\n0::/x/y\n")
    assert hardware.memory_available() == 20000000 * 1024  # no limit files at all
    v1 = tmp_path / "cg/memory/a/b:c"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1.parent / "memory.limit_in_bytes").write_text(f"{3 << 30}\n")
    assert hardware.memory_available() == 3 << 30  # usage unknown: the limit
    (v1.parent / "memory.usage_in_bytes").write_text(f"{2 << 30}\n")
    (v1.parent / "memory.stat").write_text(f"cache {1 << 30}\nrss {1 << 30}\ntotal_cache {(1 << 30) + (1 << 29)}\n")
    assert hardware.memory_available() == (3 << 30) - (1 << 29)  # 2 GiB used, 1.5 GiB of it cache
    v2 = tmp_path / "cg/x"
    (v2 / "y").mkdir(parents=True)
    (v2 / "y/memory.max").write_text("max\n")
    (v2 / "memory.max").write_text(f"{2 << 30}\n")
    (v2 / "memory.high").write_text(f"{1 << 30}\n")
    (v2 / "memory.current").write_text(f"{1 << 29}\n")
    (v2 / "memory.stat").write_text(f"anon {1 << 28}\nfile {1 << 28}\n")
    assert hardware.memory_available() == (1 << 30) - (1 << 28)
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n")
    assert hardware.memory_available() == 1000 * 1024
    monkeypatch.setattr(hardware, "MEMINFO", tmp_path / "absent")
    assert hardware.memory_available() is None


def test_the_memory_hierarchy_is_found_where_mountinfo_says(tmp_path, monkeypatch):
    """v1's memory controller mounted with cpu (``cpu,memory``, at a path with a space), showing the container's
    own cgroup ``/docker/c1`` as its root: its limit is found at the mount point, not under /sys/fs/cgroup/memory
    (where nothing was found before, exit 0 with MemAvailable)."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   20000000 kB\n")
    monkeypatch.setattr(hardware, "MEMINFO", meminfo)
    monkeypatch.setattr(hardware, "CGROUP_ROOT", tmp_path / "elsewhere")
    (tmp_path / "cgroup").write_text("5:cpu,memory:/docker/c1/job\n")
    monkeypatch.setattr(hardware, "OWN_CGROUPS", tmp_path / "cgroup")
    point = tmp_path / "fs cg" / "cpu,memory"
    (point / "job").mkdir(parents=True)
    (point / "memory.limit_in_bytes").write_text(f"{2 << 30}\n")
    mounts = tmp_path / "mountinfo"
    escaped = str(point).replace(" ", "\\040")
    mounts.write_text("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
                      f"35 31 0:32 /docker/c1 {escaped} rw,relatime shared:9 - cgroup cgroup rw,cpu,memory\n")
    monkeypatch.setattr(hardware, "MOUNTS", mounts)
    assert hardware.memory_available() == 2 << 30
    (point / "job" / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    assert hardware.memory_available() == 1 << 30
