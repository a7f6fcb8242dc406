"""What this machine is: device name, cores, memory, last-level cache, free memory (for `measure`)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from roofline.units import MiB


def context(torch, kind: str) -> dict[str, Any]:
    """The measurement's context: device kind and name, threads, torch version, memory as reported, date."""
    from roofline.measure.timing import METHOD_VERSION

    if kind == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        name, memory, cache = props.name, float(props.total_memory), float(getattr(props, "L2_cache_size", 0))
    else:
        name, memory, cache = cpu_name(), system_memory(), cpu_cache()
        if kind == "mps":
            name = f"{name} GPU"
    return {
        "kind": kind,
        "name": name,
        "threads": torch.get_num_threads(),
        "cores": os.cpu_count(),
        "torch_version": str(torch.__version__),
        "memory_capacity_bytes": memory,
        "last_level_cache_bytes": cache,
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "method_version": METHOD_VERSION,
        "record": record(torch),
    }


# CPU flags (as /proc/cpuinfo names them) that decide which matmul kernels torch and llama.cpp can run.
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_tile",
         "amx_bf16", "amx_int8", "asimd", "sve", "bf16", "i8mm")  # fmt: skip


def record(torch=None) -> dict[str, Any]:
    """What this machine is, for a result to say where it was measured: the CPU's model, the kernel-relevant flags
    it reports, each cache level's size from sysfs (per instance, and the instances), and torch's build (its CPU
    capability and BLAS); none of it is used to price anything."""
    out: dict[str, Any] = {"cpu": cpu_name(), "cpu_flags": cpu_flags(), "caches": cache_levels()}
    if torch is not None:
        cpu = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)()
        out["torch"] = {
            "version": str(torch.__version__),
            "cuda": getattr(torch.version, "cuda", None),
            "cpu_capability": cpu,
            "mkldnn": bool(torch.backends.mkldnn.is_available()),
            "mkl": bool(torch.backends.mkl.is_available()),
        }
    return out


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The FLAGS this CPU reports (/proc/cpuinfo's flags or Features line), in FLAGS' order."""
    try:
        for line in Path(cpuinfo).read_text(encoding="utf-8").splitlines():
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in FLAGS if f in have]
    except OSError:
        pass
    return []


def cache_levels(root: str = "/sys/devices/system/cpu") -> dict[str, dict[str, int]]:
    """Cache level (L1d, L1i, L2, L3) -> {bytes: one instance's size, instances: distinct CPU groups sharing one},
    from sysfs (empty where the OS does not say)."""
    seen: dict[str, dict[str, int]] = {}
    groups: dict[str, set[str]] = {}
    for index in sorted(Path(root).glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text().strip())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        seen[name] = {"bytes": size}
        groups.setdefault(name, set()).add(shared)
    for name, shared in groups.items():
        seen[name]["instances"] = len(shared)
    return dict(sorted(seen.items()))


def cpu_name() -> str:
    """The CPU model string as the OS reports it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        return _sysctl("machdep.cpu.brand_string") or "Apple"
    return platform.processor() or platform.machine()


def system_memory() -> float:
    """Total memory as the OS reports it [B]."""
    info = _meminfo()
    if "MemTotal" in info:
        return info["MemTotal"]
    value = _sysctl("hw.memsize")
    return float(value) if value else float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def available_memory() -> float:
    """Memory available without swapping [B]."""
    info = _meminfo()
    return info.get("MemAvailable", system_memory() / 2)


def cpu_cache() -> float:
    """Total last-level cache [B]: the highest cache level, summed over the distinct groups of CPUs sharing it."""
    groups: dict[tuple[int, str], int] = {}
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            level = int((index / "level").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
            groups[(level, shared)] = _size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
    if groups:
        top = max(level for level, _ in groups)
        return float(sum(size for (level, _), size in groups.items() if level == top))
    value = _sysctl("hw.perflevel0.l2cachesize") or _sysctl("hw.l2cachesize")
    return float(value) if value else 32.0 * MiB


def _size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _meminfo() -> dict[str, float]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    return {
        k: float(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in lines) if v.strip().endswith("kB")
    }


def _sysctl(key: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
