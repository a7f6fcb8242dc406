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
    }


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
