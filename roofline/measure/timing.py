"""`measure`: microbenchmarks of matmul FLOP/s and memory bandwidth on this machine (torch, imported lazily).

Method (version METHOD_VERSION):
- Every timed kernel is warmed up, then repeated until both a minimum count and a minimum time are
  reached (capped by a maximum time). CUDA is timed with events around each call and read after a
  synchronize; CPU and MPS with a wall clock around a synchronized call. Best and median are reported.
- Matmul: 2 m k n FLOP per call over a small scan of squares and LLM-like shapes, keeping the best (as
  mamf-finder does: the best shape is rarely the biggest square). A dtype is probed first so a slow one
  (fp16 on CPUs without native fp16 arithmetic) is measured at the shapes that fit the time budget.
- Bandwidth: copy (dst.copy_(src), counted as read + write bytes: the STREAM convention), read-only
  (a sum over the buffer) and the decode-shaped curve (F.linear with M rows against one large weight;
  bytes = weight bytes). Buffers are >= 4x the last-level cache, capped by free memory.
- Every kernel's result is verified against float64 (matmul entries, the sum) or exactly (the copy).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, NamedTuple

from roofline.errors import RooflineError, UsageError
from roofline.units import MiB

METHOD_VERSION = 1
SCHEMA_VERSION = 1
DEVICES = ("auto", "cpu", "cuda", "mps")
MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16")
STORAGE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Relative tolerance of a result against float64 from the same (rounded) inputs: output rounding plus
# fp32 accumulation; tf32 also rounds the inputs to a 10-bit mantissa.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "bf16": 3e-2, "fp16": 1e-2}


class MeasureError(RooflineError):
    """A kernel's result failed verification, or the device could not run a measurement."""


class Plan(NamedTuple):
    """What to measure and for how long."""

    squares: tuple[int, ...]
    shapes: tuple[tuple[int, int, int], ...]  # LLM-like (m tokens, k in, n out)
    decode_m: tuple[int, ...]
    decode_ks: tuple[int, ...]  # row lengths of the decode-shaped curve; the last also gives the GEMV bandwidth
    buffer_floor: int  # bytes; buffers are max(floor, 4 x last-level cache)
    min_reps: int
    min_time: float  # seconds per kernel
    max_time: float  # seconds per kernel, whatever min_reps says
    max_call: float  # skip a shape whose single call is estimated to take longer
    curve_reps: int = 3  # per decode-curve point (each call already streams buffer bytes)
    curve_time: float = 0.05


CPU_PLAN = Plan((512, 1000, 1536, 2000), ((256, 4096, 4096), (512, 4096, 14336)), (1, 2, 4, 16, 64, 256), (512, 1024, 4096), 128 * MiB, 5, 0.15, 2.0, 0.3)
CPU_QUICK = Plan((1000, 1536), ((256, 4096, 4096),), (1, 4, 16), (512, 4096), 64 * MiB, 2, 0.03, 0.4, 0.15, 2, 0.01)
GPU_PLAN = Plan((2048, 4096, 6144, 8192, 16384), ((4096, 8192, 8192), (8192, 8192, 28672), (16384, 8192, 28672)), (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), (1024, 8192), 1024 * MiB, 20, 0.2, 2.0, 0.5, 10, 0.1)
GPU_QUICK = Plan((4096, 8192), ((8192, 8192, 28672),), (1, 8, 64, 256), (1024, 8192), 512 * MiB, 10, 0.05, 0.5, 0.2, 5, 0.02)


def torch_module(command: str = "measure"):
    """Import torch, or say which command needs it and which extra installs it."""
    try:
        import torch
    except ImportError:
        raise RooflineError(f"roofline {command} needs torch: pip install 'roofline[measure]'") from None
    return torch


# ---------------------------------------------------------------- accounting (pure)


def matmul_flops(m: int, k: int, n: int) -> float:
    """FLOPs of an (m x k) @ (k x n) matmul = 2 m k n (one multiply-add per output per k)."""
    return 2.0 * m * k * n


def copy_bytes(buffer_bytes: int) -> float:
    """Bytes moved by a copy of `buffer_bytes`: read + write (STREAM convention; write-allocate not counted)."""
    return 2.0 * buffer_bytes


def summary(work: float, times: list[float]) -> tuple[float, float]:
    """(best, median) rate = work / time over per-call times [work/s]."""
    return work / min(times), work / statistics.median(times)


# ---------------------------------------------------------------- timing


class Clock:
    """Times calls on one device: CUDA events after a synchronize, else a wall clock around synced calls."""

    def __init__(self, torch, kind: str, plan: Plan):
        self.torch, self.kind, self.plan = torch, kind, plan
        self.device = torch.device(kind)

    def sync(self) -> None:
        if self.kind == "cuda":
            self.torch.cuda.synchronize()
        elif self.kind == "mps":
            self.torch.mps.synchronize()

    def times(self, fn: Callable[[], Any], warmup: int = 1, min_reps: int | None = None, min_time: float | None = None) -> list[float]:
        """Per-call seconds after `warmup` calls, until min_reps and min_time (the plan's unless given) are met
        or the plan's max_time passes."""
        for _ in range(warmup):
            fn()
        self.sync()
        reps = self.plan.min_reps if min_reps is None else min_reps
        least = self.plan.min_time if min_time is None else min_time
        times, start = [], time.perf_counter()
        while len(times) < reps or sum(times) < least:
            times += self._events(fn, max(1, reps // 2)) if self.kind == "cuda" else [self._wall(fn)]
            if time.perf_counter() - start > self.plan.max_time:
                break
        return times

    def _wall(self, fn: Callable[[], Any]) -> float:
        begin = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - begin

    def _events(self, fn: Callable[[], Any], count: int) -> list[float]:
        cuda = self.torch.cuda
        pairs = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(count)]
        for begin, end in pairs:
            begin.record()
            fn()
            end.record()
        cuda.synchronize()
        return [begin.elapsed_time(end) / 1e3 for begin, end in pairs]


# ---------------------------------------------------------------- verification


def verify_close(result, reference, dtype: str, what: str) -> None:
    """Raise MeasureError unless `result` matches the float64 `reference` within `dtype`'s tolerance."""
    result = result.cpu().double()  # on the host: MPS has no float64
    reference = reference.cpu().double()
    scale = reference.abs().max().item() or 1.0
    error = (result - reference).abs().max().item() / scale
    if not error <= TOLERANCE[dtype]:  # also catches NaN
        raise MeasureError(f"{what}: result differs from the float64 reference by {error:.3g} (tolerance {TOLERANCE[dtype]:g} for {dtype})")


def verify_matmul(a, b, out, dtype: str, what: str, samples: int = 16) -> None:
    """Check a spread of up to samples x 4 samples entries of out = a @ b against float64 dot products."""
    rows = sorted({(i * 7919) % a.shape[0] for i in range(samples)})
    cols = sorted({(j * 104729) % b.shape[1] for j in range(4 * samples)})
    reference = a[rows].cpu().double() @ b[:, cols].cpu().double()
    verify_close(out[rows][:, cols], reference, dtype, what)


# ---------------------------------------------------------------- the measurement


def pick_device(torch, device: str) -> str:
    """'auto' -> cuda, then mps, then cpu; a requested device must be available."""
    if device not in DEVICES:
        raise UsageError(f"--device: expected one of {', '.join(DEVICES)}, got {device!r}")
    cuda = torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if device == "auto":
        return "cuda" if cuda else "mps" if mps else "cpu"
    if (device == "cuda" and not cuda) or (device == "mps" and not mps):
        raise UsageError(f"--device: {device} is not available here (torch {torch.__version__})")
    return device
