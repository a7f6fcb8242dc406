"""`measure`'s method (version METHOD_VERSION): timing, verification and accounting (torch passed in).

- A run has a time budget (roofline.measure.planner): 20 s by default, 5 s with --quick, torch's import
  included. Every timed kernel is warmed up, then repeated until a minimum count and time are reached,
  capped by its share of the budget and by the run's deadline. CUDA is timed with events around each call
  and read after a synchronize; CPU and MPS with a wall clock around a synchronized call.
- Matmul: 2 m k n FLOP per call over a small scan of squares and LLM-like shapes (as mamf-finder does: the
  best shape is rarely the biggest square). A dtype is probed first so a slow one (16-bit without native
  arithmetic) is measured only at the shapes that fit.
- Bandwidth: copy (dst.copy_(src), counted as read + write bytes: the STREAM convention), read-only (a sum)
  and weights_read (F.linear at M = 1 over many cold weights of layer sizes, as decode reads them).
- The headline figures (each dtype's best matmul shape, the three bandwidth kernels) are then timed again in
  interleaved rounds, so drift hits all alike: best, median over rounds and the coefficient of variation.
- Every kernel's result is verified against float64 (matmul entries, the sum) or exactly (the copy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from roofline.errors import RooflineError, UsageError

METHOD_VERSION = 2  # 2: a time-budget planner, interleaved rounds, weights_read, layer-sized curve weights
SCHEMA_VERSION = 1
DEVICES = ("auto", "cpu", "cuda", "mps")
MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16")
STORAGE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Relative tolerance of a result against float64 from the same (rounded) inputs: output rounding plus
# fp32 accumulation; tf32 also rounds the inputs to a 10-bit mantissa.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "bf16": 3e-2, "fp16": 1e-2}


class MeasureError(RooflineError):
    """A kernel's result failed verification, or the device could not run a measurement."""


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


def synchronizer(torch, kind: str) -> Callable[[], None]:
    """The call that waits for the device `kind` (cuda, mps; cpu: nothing to wait for)."""
    if kind == "cuda":
        return torch.cuda.synchronize
    if kind == "mps":
        return torch.mps.synchronize
    return lambda: None


class Clock:
    """Times calls on one device: CUDA events after a synchronize, else a wall clock around synced calls.

    Every timing loop also ends at `deadline` (a time.perf_counter() value), after at least one call: the
    run's time budget holds even where the planner misjudged the machine."""

    def __init__(self, torch, kind: str, plan, deadline: float = float("inf")):
        self.torch, self.kind, self.plan, self.deadline = torch, kind, plan, deadline
        self.device = torch.device(kind)
        self.sync = synchronizer(torch, kind)

    def left(self) -> float:
        """Seconds to the deadline."""
        return self.deadline - time.perf_counter()

    def times(
        self,
        fn: Callable[[], Any],
        warmup: int = 1,
        min_reps: int | None = None,
        min_time: float | None = None,
        max_time: float | None = None,
    ) -> list[float]:
        """Per-call seconds after `warmup` calls, until min_reps and min_time (the plan's unless given) are met,
        or max_time (the plan's unless given) or the deadline passes."""
        for _ in range(warmup):
            fn()
        self.sync()
        reps = self.plan.min_reps if min_reps is None else min_reps
        least = self.plan.min_time if min_time is None else min_time
        most = self.plan.max_time if max_time is None else max_time
        times, start = [], time.perf_counter()
        while len(times) < reps or sum(times) < least:
            times += self._events(fn, max(1, min(reps, 4) // 2)) if self.kind == "cuda" else [self._wall(fn)]
            now = time.perf_counter()
            if now - start > most or now > self.deadline:
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
        raise MeasureError(
            f"{what}: result differs from the float64 reference by {error:.3g} (tolerance {TOLERANCE[dtype]:g} for "
            f"{dtype})"
        )


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


@contextmanager
def tf32_mode(torch, clock: Clock, dtype: str):
    """On CUDA, fp32 matmuls use tensor cores (tf32) exactly when `dtype` is tf32; the setting is restored after."""
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        if clock.kind == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
