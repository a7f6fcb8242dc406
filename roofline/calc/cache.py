"""Bandwidth by working set: what `roofline measure`'s read ladder (measured.bandwidth.read.by_working_set) says of
a step that streams `nbytes`, against the memory speed the profile's memory_bandwidth stands for.

The ladder is read bandwidth over working sets doubling from 256 KiB; its last point, the largest working set, is
the memory plateau (roofline.measure.kernels.knee). A working set that fits a cache reads faster: its speedup is
the ladder at its size over the plateau, interpolated log-log and held beyond the ends, never below 1. The same
ratio carries a figure measured on a buffer of B bytes to memory speed: x plateau / ladder(B). Source: the
cache-aware roofline (Ilic, Pratas, Sousa, "Cache-aware Roofline model", IEEE CAL 2014).
"""

from __future__ import annotations

import statistics
from typing import Any

from roofline.calc.interpolation import interpolate


def ladder(measured: dict[str, Any] | None) -> list[tuple[float, float]] | None:
    """(bytes, B/s) points of a profile's read ladder, or None when it has none (datasheets, older profiles)."""
    found = (((measured or {}).get("bandwidth") or {}).get("read") or {}).get("by_working_set") or {}
    points = sorted((p["bytes"], p["bytes_per_s"]) for p in found.get("points") or [])
    return falling(points) if len(points) >= 2 else None


def falling(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The ladder beyond its fastest point made non-increasing: a larger working set fits fewer caches, so a point
    slower than a larger working set's caught a slow moment of the machine and reads at that set's speed instead
    (the points before the fastest, where a small read's call cost shows, stay). On a 2-core Zen 4 VM one quick
    profile read 16.8 GB/s at 128 MiB against 34.1 and 33.6 at 256 and 512 MiB (34.6 at 128 MiB a run before):
    taken at face value, as the curve's 128 MiB buffer's speed, it priced every batch-1 fp32 decode at half."""
    peak = max(range(len(points)), key=lambda i: points[i][1])
    out = list(points)
    for i in range(len(out) - 2, peak - 1, -1):
        out[i] = (out[i][0], max(out[i][1], out[i + 1][1]))
    return out


def speedup(points: list[tuple[float, float]] | None, nbytes: float) -> float:
    """How much faster than memory a working set of `nbytes` reads [ratio >= 1]: 1 without a ladder."""
    if not points or nbytes <= 0:
        return 1.0
    return max(interpolate(points, nbytes) / points[-1][1], 1.0)


def at_memory(points: list[tuple[float, float]] | None, rate: float, buffer_bytes: float) -> float:
    """A bandwidth measured over `buffer_bytes` carried to memory speed [B/s]: rate / speedup(buffer)."""
    return rate / speedup(points, buffer_bytes)


# A kernel reading at this fraction of the ladder's speed at its working set, or more, is memory-bound.
MEMORY_BOUND = 0.8


def curve_bytes(profile: dict[str, Any], curve: list[dict[str, Any]]) -> float:
    """The working set a decode curve cycled [B]: its points' cold sets (the median), else the plan's buffer."""
    sizes = [p["buffer_bytes"] for p in curve if p.get("buffer_bytes")]
    return statistics.median(sizes) if sizes else (profile.get("plan") or {}).get("buffer_bytes", 0.0)


def carried(profile: dict[str, Any], seconds: float, nbytes: float, working_set: float, cycled: float) -> float:
    """A decode-curve time [s] (`nbytes` of weights, timed over a cold set of `cycled` bytes) carried to a step that
    streams `working_set` bytes. In the roofline's terms the curve's time is max(bytes / ladder(buffer), the
    kernel's own time): when it read at the buffer's ladder speed (memory-bound) it scales with the ladder,
    ladder(buffer) / ladder(working set); when it read slower, the kernel's own time stays and the step's memory
    time can only raise it. Unchanged without a ladder."""
    points = ladder(profile)
    if not points or seconds <= 0:
        return seconds
    curve = interpolate(points, cycled or points[-1][0])
    step = interpolate(points, working_set) if working_set > 0 else points[-1][1]
    if nbytes / seconds >= MEMORY_BOUND * curve:
        return seconds * curve / step
    return max(seconds, nbytes / step)
