"""The kernels `roofline measure` times: matmul shape scans, copy / read bandwidth, the decode-shaped curve,
decode attention and the per-op overhead (torch passed in; the method: roofline.measure.timing)."""

import statistics
import time
from collections.abc import Callable
from typing import Any

from roofline.measure.planner import ATTENTION_SHAPES, ELEMENTWISE_KERNELS, ELEMENTWISE_WIDTH, PREFILL_ATTENTION
from roofline.measure.timing import (
    STORAGE,
    Clock,
    MeasureError,
    copy_bytes,
    matmul_flops,
    summary,
    synchronizer,
    tf32_mode,
    verify_close,
    verify_matmul,
)
from roofline.units import MiB


def matmul_scan(torch, clock: Clock, tensor, dtype: str, notes: list[str], on_step) -> dict[str, Any]:
    """Best and median FLOP/s over the plan's shapes that fit the time budget."""
    with tf32_mode(torch, clock, dtype):
        return _scan(torch, clock, tensor, dtype, notes, on_step)


class BestShape:
    """One dtype's best matmul shape from the scan, kept allocated to be timed again in every round."""

    def __init__(self, torch, clock: Clock, tensor, dtype: str, shape: list[int]):
        m, k, n = shape
        self.torch, self.clock, self.dtype, self.flops = torch, clock, dtype, matmul_flops(m, k, n)
        self.a, self.b = tensor(m, k, dtype=dtype), tensor(k, n, dtype=dtype)
        self.out = torch.empty(m, n, dtype=self.a.dtype, device=self.a.device)

    def time(self, min_time: float, max_time: float) -> tuple[float, float]:
        """(best, median) FLOP/s of a few calls."""
        with tf32_mode(self.torch, self.clock, self.dtype):
            times = self.clock.times(
                lambda: self.torch.matmul(self.a, self.b, out=self.out),
                min_reps=1,
                min_time=min_time,
                max_time=max_time,
            )
        return summary(self.flops, times)


def _scan(torch, clock: Clock, tensor, dtype: str, notes: list[str], on_step) -> dict[str, Any]:
    """Shapes in increasing FLOPs; each call's time is estimated from the best rate so far (a 256^3 probe
    first). A square whose single call would exceed the plan's max_call is skipped (the rounds time the best square
    again, within a round's time); an LLM shape is narrowed to fit a third of its own scan time (fitting_outputs; a
    warm-up and two calls or more, about the planner's 1.5 x plan.max_time), or skipped when it cannot be. An LLM
    shape prices prefills beyond the curve, so its cap is its own: held to max_call, a quick fp32 scan on a 2-core
    Zen 4 VM (196 GFLOP/s) skipped 256 x 4096 x 1024 by 3% (11.0 against 10.7 ms) and priced 512- and 2048-token
    prefills at the 128-row shape's 133 GFLOP/s, 1.23-1.44x slow, where 256-row shapes ran 157-161. The time the
    planner gave a skipped shape goes to the next LLM shape: on a 2-core Zen 3 VM a quick fp32 scan skipped both
    squares and then the 512-row shape too (1792 outputs over its 20 ms cap), and 512- and 2048-token prefills were
    priced at the 128-row shape's rate (118 GFLOP/s, 109 at the rounds' level), 1.17-1.43x slow on all 16 held-out
    rows. Where no planned square ran, the probe is timed again and reported as one: that takes about one more
    plan.max_time than the planner counts (the skipped squares' time went to the LLM shapes), which keeps the square
    from the process's first timed calls (on the same VM its first timing ran 87-89 GFLOP/s in two quick runs of
    six, against rounds of 145-175; scaled to the rounds' level, one run's 512- and 2048-token prefills came out
    0.64-0.95 of measured)."""
    plan, probe = clock.plan, 256
    a, b = tensor(probe, probe, dtype=dtype), tensor(probe, probe, dtype=dtype)
    out = torch.matmul(a, b)
    verify_matmul(a, b, out, dtype, f"matmul {dtype} {probe}^3")
    probe_rate = summary(matmul_flops(probe, probe, probe), clock.times(lambda: torch.matmul(a, b, out=out)))[0]
    shapes = sorted([(n, n, n) for n in plan.squares] + list(plan.shapes), key=lambda s: matmul_flops(*s))
    rate, results, skipped, spare = probe_rate, [], {}, 0.0
    for m, k, n in shapes:
        planned, square = (m, k, n), m == k == n
        own = plan.max_time + plan.max_call if square else 1.5 * plan.max_time  # what the planner gave it
        cap = plan.max_call if square else (own + spare) / 3
        if not square:  # an LLM shape: narrowed to fit, since a prefill's rate is priced from it
            n = fitting_outputs(m, k, n, rate * cap)
        if not n or matmul_flops(m, k, n) / rate > cap:
            skipped.setdefault(cap, []).append(f"{'x'.join(map(str, planned))} ({matmul_flops(*planned) / rate:.3g} s)")
            spare += own
            continue
        on_step(f"matmul {dtype} {m}x{k}x{n}")
        try:
            results.append(_matmul_shape(torch, clock, tensor, dtype, m, k, n, None if square else 2 * cap))
            if not square:
                spare = 0.0  # spent
        except out_of_memory(torch):
            _free(torch)
            notes.append(f"matmul {dtype} {m}x{k}x{n}: out of device memory, skipped")
            spare += own
            continue
        if n != planned[2]:
            results[-1]["planned_shape"] = list(planned)
            notes.append(
                f"matmul {dtype}: {'x'.join(map(str, planned))} timed with {n} outputs, to fit {cap:g} s "
                f"per call at {rate / 1e9:.3g} GFLOP/s"
            )
        rate = max(rate, results[-1]["best_flop_per_s"])
    for cap, names in skipped.items():
        notes.append(f"matmul {dtype}: {', '.join(names)} skipped, over {cap:g} s per call")
    if not any(len(set(r["shape"])) == 1 for r in results):  # no planned square fit the cap: report the probe's
        times = clock.times(lambda: torch.matmul(a, b, out=out))
        best, median = summary(matmul_flops(probe, probe, probe), times)
        results.append(
            {"shape": [probe] * 3, "best_flop_per_s": best, "median_flop_per_s": median, "calls": len(times)}
        )
    top = max(results, key=lambda r: r["best_flop_per_s"])
    return {
        "best_flop_per_s": top["best_flop_per_s"],
        "median_flop_per_s": top["median_flop_per_s"],
        "best_shape": top["shape"],
        "verified": True,
        "probe_flop_per_s": probe_rate,
        "shapes": results,
    }


# An LLM shape is narrowed to no fewer output features: a narrower weight fits a cache and runs faster than the layers
# it stands for (on a 2-core Zen 3 VM, fp32 512 x 4096 x 896 ran 128-132 GFLOP/s where 512-row layers of 1024 x 4096
# and 4096 x 4096 ran 78-108).
MIN_OUTPUTS = 1024
OUTPUT_STEP = 256  # narrowed in steps of 256 outputs, as every planned shape's outputs are (planner.SHAPES)


def fitting_outputs(m: int, k: int, n: int, flops: float) -> int | None:
    """The output features of an m x k x n matmul whose FLOPs fit `flops` (a call's cap at the rate so far): n where
    it fits, else the most that do in multiples of OUTPUT_STEP, keeping its rows m (the prefill's tokens, where its
    rate is priced) and its row length k (the hidden size); None under MIN_OUTPUTS. On a 2-core AVX2 Zen 3 VM every
    LLM shape of the scan was over the cap and prefills rose toward a 512^3 square in cache (154 GFLOP/s best),
    where 512 x 1024 x 4096 ran 0.76x as fast."""
    if matmul_flops(m, k, n) <= flops:
        return n
    fit = int(flops // matmul_flops(m, k, 1)) // OUTPUT_STEP * OUTPUT_STEP
    return fit if fit >= MIN_OUTPUTS else None


def _matmul_shape(
    torch, clock: Clock, tensor, dtype: str, m: int, k: int, n: int, max_time: float | None = None
) -> dict[str, Any]:
    a, b = tensor(m, k, dtype=dtype), tensor(k, n, dtype=dtype)
    out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    times = clock.times(lambda: torch.matmul(a, b, out=out), max_time=max_time)
    verify_matmul(a, b, out, dtype, f"matmul {dtype} {m}x{k}x{n}")
    best, median = summary(matmul_flops(m, k, n), times)
    return {"shape": [m, k, n], "best_flop_per_s": best, "median_flop_per_s": median, "calls": len(times)}


def out_of_memory(torch) -> tuple[type[BaseException], ...]:
    """The exception types of a device allocation failure (CUDA's OutOfMemoryError)."""
    return tuple(
        t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t
    )


def _free(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def shrinking(torch, fn: Callable[[int], Any], size: int, what: str, notes: list[str], floor: int = 16 * MiB) -> Any:
    """fn(size); on an out-of-memory error, free the cache, halve the size and retry down to `floor` bytes."""
    while True:
        try:
            return fn(size)
        except out_of_memory(torch):
            _free(torch)
            if size // 2 < floor:
                raise MeasureError(f"{what}: out of device memory even at {size} bytes") from None
            notes.append(f"{what}: out of device memory at {size} bytes; retried at half the size")
            size //= 2


class Bandwidth:
    """The bandwidth kernels, their buffers allocated once and each timed again in every round.

    copy: dst.copy_(src), read + write bytes (STREAM); read: a sum over the buffer; weights_read: F.linear at
    M = 1 over a cycle of cold weights of layer sizes (1, 4, 16, 64 MiB, round robin) whose total is the
    buffer size, the way a decode step reads its weights. Each is verified once, after its first timing.
    """

    def __init__(self, torch, clock: Clock, tensor, dev, buffer_bytes: int, weight_dtype: str, k: int):
        import torch.nn.functional as F

        self.torch, self.clock, self.F = torch, clock, F
        count = buffer_bytes // 4
        self.src = torch.ones(count, dtype=torch.float32, device=dev)
        self.dst = torch.zeros_like(self.src)
        self.src[-1] = 2.0  # a marker, so a copy that skips the tail fails the check
        self.buffer_bytes, self.dtype = count * 4, weight_dtype
        size = torch.finfo(getattr(torch, STORAGE[weight_dtype])).bits // 8
        self.weights, total, sizes = [], 0, (1, 4, 16, 64)
        while total < buffer_bytes or len(self.weights) < 2:
            n = max(256, min(sizes[len(self.weights) % 4] * MiB, buffer_bytes) // (k * size) // 256 * 256)
            self.weights.append(tensor(n, k, dtype=weight_dtype))
            total += n * k * size
        self.weight_bytes, self.x = total, tensor(1, k, dtype=weight_dtype)
        self.checked: set[str] = set()
        self.out: dict[str, Any] = {}

    def kernels(self) -> dict[str, tuple[Callable[[], Any], float]]:
        """name -> (one call, bytes it moves)."""
        return {
            "copy": (lambda: self.dst.copy_(self.src), copy_bytes(self.buffer_bytes)),
            "read": (lambda: self.out.__setitem__("sum", self.src.sum()), float(self.buffer_bytes)),
            "weights_read": (
                lambda: self.out.__setitem__("y", [self.F.linear(self.x, w) for w in self.weights]),
                float(self.weight_bytes),
            ),
        }

    def time(self, name: str, min_time: float, max_time: float) -> list[float]:
        fn, _ = self.kernels()[name]
        times = self.clock.times(fn, min_reps=2, min_time=min_time, max_time=max_time)
        if name not in self.checked:
            self._verify(name)
            self.checked.add(name)
        return times

    def _verify(self, name: str) -> None:
        torch = self.torch
        if name == "copy" and not torch.equal(self.dst, self.src):
            raise MeasureError("copy: the destination differs from the source after the timed copies")
        if name == "read":
            expected = self.buffer_bytes // 4 + 1.0  # ones plus the marker's extra 1
            if not abs(self.out["sum"].item() - expected) <= 1e-4 * expected:
                raise MeasureError(f"read: the sum {self.out['sum'].item():.9g} differs from {expected:.9g}")
        if name == "weights_read":
            verify_matmul(self.x, self.weights[-1].t(), self.out["y"][-1], self.dtype, f"weights_read {self.dtype}")

    def entry(self, name: str, rates: list[tuple[float, float]]) -> dict[str, Any]:
        """The JSON of one kernel from its per-round (best, median) rates [B/s]."""
        e = {
            **stability([best for best, _ in rates], [median for _, median in rates]),
            "buffer_bytes": self.buffer_bytes,
            "verified": True,
            "counts": {"copy": "read + write", "read": "read", "weights_read": "weight read"}[name],
        }
        if name == "weights_read":
            e.update(
                buffer_bytes=self.weight_bytes,
                dtype=self.dtype,
                weights=len(self.weights),
                shapes=sorted({tuple(w.shape) for w in self.weights}),
            )
            e["shapes"] = [list(s) for s in e["shapes"]]
        return e

    def free(self) -> None:
        del self.src, self.dst, self.weights


def read_ladder(torch, clock: Clock, dev, total: int, min_time: float, smallest: int = 256 * 2**10) -> list[dict]:
    """Read bandwidth by working set (the cache-aware roofline: a working set that fits a cache level reads at
    that level's speed): a sum over the first `bytes` of a buffer of `total` bytes, from `smallest` doubling up to
    the whole, each the best of its calls over `min_time` after two warm-up calls. The buffer is filled as the
    ladder climbs, and the ladder stops before a fill that the rate of the fills so far says would pass the clock's
    deadline: first-touching memory on a VM ran 0.6-4.3 GB/s here (820 MiB took 0.2-1.5 s), so a fill sized
    beforehand could spend a whole phase's time. Each point records the first-touch rate of the bytes it added
    (`fill_bytes_per_s`: page faults included). The largest working set's sum is verified."""
    src = torch.empty(total // 4, dtype=torch.float32, device=dev)  # reserved, not yet touched
    sync = synchronizer(torch, dev.type)
    out: dict[str, Any] = {}

    def fill(lo: int, hi: int) -> None:
        src[lo // 4 : hi // 4].fill_(1.0)
        sync()

    def read_s(size: int) -> float:
        view = src[: size // 4]
        return min(clock.times(lambda: out.__setitem__("part", view.sum()), 2, 3, min_time, 2 * min_time))

    points = climb(fill, read_s, total, smallest, clock.left)
    if out and out["part"].item() != points[-1]["bytes"] // 4:
        raise MeasureError(f"read ladder: the sum {out['part'].item():.9g} differs from {points[-1]['bytes'] // 4:.0f}")
    return points


def climb(
    fill: Callable[[int, int], None],
    read_s: Callable[[int], float],
    total: int,
    smallest: int,
    left: Callable[[], float],
) -> list[dict[str, float]]:
    """A read ladder's loop (torch's read_ladder, numpy's llamacpp_profile.numpy_ladder): working sets from
    `smallest` doubling up to `total` bytes (the last one `total` itself), each first-touched as it is reached
    (`fill(lo, hi)` writes bytes lo to hi) and then read (`read_s(size)`: the best call's seconds). It stops before
    a fill that the rate of the fills so far says would pass `left()` seconds."""
    points, size, filled, fill_s = [], smallest, 0, 0.0
    while size <= total:
        if filled and (size - filled) * fill_s / filled > left():
            break
        begin = time.perf_counter()
        fill(filled, size)
        chunk_s = time.perf_counter() - begin
        fill_rate, filled, fill_s = (size - filled) / max(chunk_s, 1e-9), size, fill_s + chunk_s
        points.append({"bytes": float(size), "bytes_per_s": size / read_s(size), "fill_bytes_per_s": fill_rate})
        size = size * 2 if size * 2 <= total or size == total else total
    return points


PLATEAU = 1.25  # a working set reads at memory speed when within this factor of the largest one's bandwidth


def knee(points: list[dict[str, float]]) -> dict[str, Any]:
    """Where the ladder reaches memory speed: the plateau is the largest working set's bandwidth; the knee is the
    smallest working set from which every larger one reads within PLATEAU of it, and the cache a run really gets
    is the largest working set above that (null when even the smallest is at the plateau). `reached` is false
    when the buffer ends while still faster than PLATEAU x the point before it, so the plateau may be a cache."""
    if len(points) < 2:
        return {"plateau_bytes_per_s": None, "knee_bytes": None, "cache_bytes": None, "reached": False}
    plateau = points[-1]["bytes_per_s"]
    at = len(points) - 1
    while at > 0 and points[at - 1]["bytes_per_s"] <= PLATEAU * plateau:
        at -= 1
    reached = at < len(points) - 1  # the plateau spans two working sets or more
    return {
        "plateau_bytes_per_s": plateau,
        "knee_bytes": points[at]["bytes"],
        "cache_bytes": points[at - 1]["bytes"] if at > 0 else None,
        "reached": reached,
    }


UNSTABLE_CV = 0.10  # a headline figure whose rounds vary more than this is flagged


def stability(bests: list[float], medians: list[float]) -> dict[str, Any]:
    """Best, median and spread of a figure over rounds: the best round's rate, the median of the rounds'
    medians, and the coefficient of variation of the rounds' best rates (population standard deviation / mean)."""
    mean = statistics.fmean(bests)
    cv = statistics.pstdev(bests) / mean if len(bests) > 1 and mean > 0 else 0.0
    return {
        "best_bytes_per_s": max(bests),
        "median_bytes_per_s": statistics.median(medians),
        "rounds": len(bests),
        "cv": cv,
        "unstable": cv > UNSTABLE_CV,
    }


SMALL_ROWS = 128  # rows of the decode curve's small weights
MIN_COLD = 16 * MiB  # the decode curve's cold set, at least
CURVE_PASSES = 3  # interleaved passes over the decode curve's points


def pass_rate(bests: list[float]) -> float:
    """A curve point's rate [FLOP/s] from its passes' best rates: the median of those within drift.SPLIT of the
    fastest. A shared machine only ever slows a kernel, so a pass that far under the fastest stalled; the median
    of the rest is robust to one more stall and not biased fast the way the best of more calls is. On the Zen 5
    VM one quick profile's passes ran its M = 1 points at 17.8 GFLOP/s while one pass's best call reached 29.1,
    the next two profiles' 30.5-30.7: priced from the median of all three passes, 16 of 24 held-out bf16 rows
    came within 15%; replayed on the saved profile with each point's best call for its passes where it beat them
    by more than 1.25x (the passes themselves are not saved), 20."""
    from roofline.measure.drift import SPLIT

    fastest = max(bests)
    return statistics.median(b for b in bests if b * SPLIT >= fastest)


def fast_passes(reference: list[float], ceiling: float | None) -> set[int]:
    """The curve passes to leave out of every point: those whose reference point (M = 1 at the longest k, bytes/s)
    read more than SPLIT x `ceiling`, the best of the headline rounds' weights_read (the same GEMV, timed round after
    round across the profile), unless that would leave none. pass_rate's stall rule keeps the fastest pass; a pass
    faster than anything the rounds saw is no steady rate to keep: on the Zen 4 VM one full bf16 profile's passes
    ran its M = 1 points at k = 1024 and 4096 at 18.8 and 20.5 GB/s while its rounds' best was 16.0 and five other
    profiles' points 13.8-14.4 and 15.7-16.0; batch-1 TPOTs priced from the full profiles spread 13-31%."""
    from roofline.measure.drift import SPLIT

    fast = {j for j, rate in enumerate(reference) if ceiling and rate > SPLIT * ceiling}
    return set() if len(fast) == len(reference) else fast


class Rotation:
    """Where the decode curve's next read begins in its pool [elements]. Each call reads `group` weights of n x k
    viewed back to back from there, and the place moves on by what was read, whichever point reads next; a weight
    that would run past the pool's end begins again at 0. With a pool of the largest cold set plus the largest
    weight, a byte is read again only after the pool less two weights was, at least the largest set less its
    largest weight (the bound of the whole-set calls before: their 64 MiB weights came back after 64 MiB). A call
    reads a part of the cold set, not all of it: the set's size costs no time, and a point's calls stay within its
    pass's share (on a 2-core Zen 4 VM calls that read the whole 128 MiB set took 0.27-0.36 s a pass, and the quick
    profile's curves kept one or two of their three passes). Views are made once per place, outside the timing of
    later calls (a slice and a view cost a few microseconds, a small weight's call about ten)."""

    def __init__(self, pool) -> None:
        self.pool, self.at, self.views = pool, 0, {}

    def read(self, linear, x, n: int, k: int, group: int) -> tuple[Any, Any]:
        """`linear(x, w)` for `group` weights w of n x k from the current place; (the last output, its weight)."""
        for _ in range(group):
            if self.at + n * k > self.pool.numel():
                self.at = 0
            key = (self.at, n, k)
            if key not in self.views:
                self.views[key] = self.pool[self.at : self.at + n * k].view(n, k)
            w = self.views[key]
            y = linear(x, w)
            self.at += n * k
        return y, w


def decode_curve(
    torch,
    clock: Clock,
    tensor,
    dtype: str,
    matmul: dict | None,
    read_rate: float,
    buffer_bytes: int,
    notes: list[str],
    ceiling: float | None = None,
    knee_bytes: float | None = None,
):
    """F.linear(x[M x k], weight[n x k]) for M in the plan and each row length k: FLOP/s and weight bytes/s.

    The weights are sized like real layers (planner.weight_rows: about 4k rows, 1 to 64 MiB) and cold, as in
    a decode step: each series' weights fill the buffer, more than the last-level cache where the budget allows, and
    the calls read them in rotation (Rotation: each call a group of them, as many as fit half its pass's share by
    the shape's first timed call), so that every read streams from memory. GEMV speed depends on the row length k
    (short rows run slower), so the curve is measured per k; one more series at the shortest k uses
    two tall weights of half the buffer each (like an lm_head, whose many rows run slower at small M), and one of small
    weights of SMALL_ROWS rows (like a narrow model's K and V projections, where each call's own cost shows). Each
    point records its rows per weight n and the weights a call read. Every point is timed in CURVE_PASSES
    interleaved passes; its rate is the median of the passes' best calls, stalled passes left out (pass_rate), and
    passes faster than `ceiling` (the rounds' best weights_read, bytes/s, over the same buffer) allows left out of
    every point that keeps a pass (fast_passes; not when the cold set is under both the buffer and `knee_bytes`, the
    read ladder's smallest working set at memory speed, whose reads may then hit the cache). Returns (curve, the
    M = 1 entry of the longest rows: the GEMV bandwidth).
    """
    import torch.nn.functional as F

    from roofline.measure.drift import SPLIT
    from roofline.measure.planner import curve_points, weight_rows

    plan = clock.plan
    size = torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8
    rate = matmul["best_flop_per_s"] if matmul else None
    cap = max(plan.max_call, plan.curve_time / 2)  # the longest call a point may take
    # The cold set: the buffer, or what one read of it all would take within the cap at the measured read rate (the
    # planner sized the buffer with a probe that a cache can inflate; a curve with no points would leave no
    # calibration at all; each tall weight is half the set). Not the ladder's knee: a call reads a group of
    # the set's weights (Rotation), so the set's size costs no time, and at the knee a cyclic read may still hit the
    # cache (on a 2-core Zen 4 VM the ladder put its knee at 64 MiB in some quick runs and 128 in others, the 64 MiB
    # set reading 1.2x the plateau).
    cold = min(buffer_bytes, max(MIN_COLD, int(cap * read_rate)))
    if cold < buffer_bytes:
        notes.append(
            f"decode-shaped {dtype}: cold weights of {cold // MiB} MiB, not the {buffer_bytes // MiB} MiB buffer, "
            f"so that one call fits {cap:.3g} s at the measured {read_rate / 1e9:.3g} GB/s"
        )
    streams = cold == buffer_bytes or bool(knee_bytes and cold >= knee_bytes)  # no cache hits, by the ladder
    # The tall weights (like an lm_head): half the cold set each, and at least 8x a layer's rows.
    short = plan.decode_ks[0]
    rows = max(8 * weight_rows(short, size), cold // 2 // (short * size) // 256 * 256)
    # (k, n): the layer-sized weights of each k, the tall ones, and small ones (a narrow model's K and V projections)
    series = [(k, weight_rows(k, size)) for k in plan.decode_ks] + [(short, rows), (short, SMALL_ROWS)]
    small, layers = series[-1], set(series[:-2])
    counts = {(k, n): max(2, cold // (n * k * size)) for k, n in series}  # a series' weights in the cold set it cycles
    # One pool of values, filled once: the largest of those sets and one more of the largest weights, read in
    # rotation (Rotation: a byte is read again only after the set less its largest weight was, at least).
    pool = tensor(max(c * n * k for (k, n), c in counts.items()) + max(n * k for k, n in series), dtype=dtype)
    rotation = Rotation(pool)
    window = plan.curve_window or 3 * plan.curve_time * curve_points(plan.decode_m, plan.decode_ks)
    clock.deadline = min(clock.deadline, time.perf_counter() + window)
    points = []  # (label, k, n, count, m): what fits the budget, in order
    for k, n in series:
        count = counts[(k, n)]
        for m in plan.decode_m:
            estimate = max(matmul_flops(m, k, n) / rate if rate else 0.0, n * k * size / read_rate)  # one weight
            if estimate > cap and m > plan.decode_m[0]:  # M = 1 always runs: it is what decode is priced from
                notes.append(f"decode-shaped {dtype} k={k} n={n}: M = {m} and above skipped, over the time budget")
                break
            points.append(({"series": "small"} if (k, n) == small else {}, k, n, count, m))
    # Interleaved passes over every point, each a share of its time: a slow moment of a shared machine then lands
    # on a different point in each pass, and a point's rate (pass_rate) outlives a stall.
    times: list[list[list[float]]] = [[] for _ in points]  # per point, each pass's calls
    inputs: dict[tuple[int, int], Any] = {}
    group = [1] * len(points)  # weights a call reads, per point (set by its first pass)
    for done in range(CURVE_PASSES):
        for i, (_, k, n, count, m) in enumerate(points):
            # Past the deadline only the first pass's M = 1 points still run: a curve is never empty, even when the
            # phases before it spent the budget (a slow first torch call, a slow moment of a shared machine).
            if clock.left() <= 0 and (done > 0 or m > plan.decode_m[0]):
                continue
            x = inputs.setdefault((m, k), tensor(m, k, dtype=dtype))
            out = {}
            if done == 0:  # the shape's first call (a kernel's setup) on one weight, then one timed on the next
                rotation.read(F.linear, x, n, k, 1)
                clock.sync()
                begin = time.perf_counter()
                rotation.read(F.linear, x, n, k, 1)
                clock.sync()
                one = time.perf_counter() - begin
                group[i] = max(1, min(count, int(plan.curve_time / CURVE_PASSES / 2 / max(one, 1e-9))))
            times[i].append(
                clock.times(
                    lambda: out.__setitem__("y", rotation.read(F.linear, x, n, k, group[i])),
                    warmup=0,
                    min_reps=max(1, plan.curve_reps // CURVE_PASSES),
                    min_time=plan.curve_time / CURVE_PASSES,
                    max_time=plan.curve_time / CURVE_PASSES,
                )
            )
            if done == 0:
                y, w = out["y"]
                verify_matmul(x, w.t(), y, dtype, f"decode-shaped matmul {dtype} M={m} k={k} n={n}")
    if any(len(passes) < CURVE_PASSES for passes in times):
        notes.append(
            f"decode-shaped {dtype}: the time budget ran out within the curve's passes; points keep the passes they had"
        )
    ref = next(
        (i for i, (_, k, n, _, m) in enumerate(points) if m == 1 and k == plan.decode_ks[-1] and (k, n) in layers), None
    )
    if ref is not None and times[ref]:
        _, k, n, count, _ = points[ref]
        reference = [group[ref] * n * k * size / min(calls) for calls in times[ref]]
        fast = fast_passes(reference, ceiling if streams else None)  # a smaller cold set may hit cache
        if fast:
            notes.append(
                f"decode-shaped {dtype}: pass {', '.join(str(j + 1) for j in sorted(fast))} of {len(reference)} left "
                f"out, its M = 1 reference reading {max(reference[j] for j in fast) / 1e9:.3g} GB/s, over "
                f"{SPLIT}x the headline rounds' best weights_read ({ceiling / 1e9:.3g} GB/s)"
            )
            times = [[calls for j, calls in enumerate(passes) if j not in fast] or passes for passes in times]
    curve, first = [], None
    for i, ((label, k, n, count, m), passes, per_call) in enumerate(zip(points, times, group)):
        if not passes:
            continue
        flops, call_bytes = matmul_flops(m, k, per_call * n), per_call * n * k * size
        timed = [t for calls in passes for t in calls]
        best_flops, median_flops = summary(flops, timed)
        rate_flops = pass_rate([flops / min(calls) for calls in passes])
        curve.append(
            {
                "m": m,
                "k": k,
                "n": n,
                **label,
                "flop_per_s": rate_flops,
                "bytes_per_s": call_bytes * rate_flops / flops,
                "best_flop_per_s": best_flops,
                "median_flop_per_s": median_flops,
                "buffer_bytes": count * n * k * size,  # the cold set cycled: the working set the ladder carries from
                "weights_per_call": per_call,
                "passes": len(passes),
            }
        )
        if i == ref:  # the layer weights' M = 1 at the longest k, not the tall ones
            best, median = summary(call_bytes, timed)  # the headline read candidate: the best, as the others
            first = {
                "best_bytes_per_s": best,
                "median_bytes_per_s": median,
                "buffer_bytes": count * n * k * size,
                "verified": True,
                "counts": "weight read",
                "dtype": dtype,
                "shape": [count * n, k],
                "weights_per_call": per_call,
            }
    del pool
    return curve, first


def attention(torch, clock: Clock, tensor, dtype: str, rate: float | None, notes: list[str]) -> dict[str, Any] | None:
    """Decode attention (SDPA, one query token over a KV cache) at an MHA and a 4:1 GQA shape, and causal prefill
    attention (SDPA over a whole prompt) at up to three prompt lengths (a call over the plan's cap is skipped).

    Decode: FLOPs = 4 x batch x heads x context x head_dim; bytes = the K and V read. The GQA shape has 4x the
    FLOPs per byte, so it gives the kernel's FLOP/s and the MHA shape its bytes/s: a decode step's attention then
    takes max(FLOPs / flop_per_s, bytes / bytes_per_s). Prefill: FLOPs = 4 x batch x heads x head_dim x the
    prompt x (prompt + 1) / 2 causal pairs; `prefill` lists its FLOP/s by prompt length.
    """

    size = torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8
    shapes = []
    for name, (b, h, kv, d, ctx) in ATTENTION_SHAPES.items():
        flops, nbytes = 4.0 * b * h * ctx * d, 2.0 * b * kv * ctx * d * size
        if rate and flops / rate > 100 * clock.plan.max_call:  # matmuls this slow: attention would be too
            notes.append(f"decode attention {dtype}: skipped, this dtype's matmuls run at {rate / 1e9:.3g} GFLOP/s")
            return None
        q, k, v = (
            tensor(b, h, 1, d, dtype=dtype),
            tensor(b, kv, ctx, d, dtype=dtype),
            tensor(b, kv, ctx, d, dtype=dtype),
        )
        best = _sdpa_time(torch, clock, q, k, v, False, dtype, f"decode attention {dtype} {name}")
        shapes.append(
            {
                "shape": name,
                "batch": b,
                "heads": h,
                "kv_heads": kv,
                "head_dim": d,
                "context": ctx,
                "time_s": best,
                "flop_per_s": flops / best,
                "bytes_per_s": nbytes / best,
            }
        )
    prefill = []
    for b, h, kv, d, prompt in PREFILL_ATTENTION:
        flops = 4.0 * b * h * d * prompt * (prompt + 1) / 2
        if prefill and flops / max(p["flop_per_s"] for p in prefill) > clock.plan.max_call:
            notes.append(
                f"prefill attention {dtype}: prompts of {prompt} tokens and more skipped, over the time budget"
            )
            break
        q, k, v = (tensor(b, heads, prompt, d, dtype=dtype) for heads in (h, kv, kv))
        best = _sdpa_time(torch, clock, q, k, v, True, dtype, f"prefill attention {dtype} {prompt} tokens")
        prefill.append(
            {"batch": b, "heads": h, "kv_heads": kv, "head_dim": d, "prompt": prompt, "flop_per_s": flops / best}
        )
    return {
        "flop_per_s": shapes[1]["flop_per_s"],
        "bytes_per_s": shapes[0]["bytes_per_s"],
        "shapes": shapes,
        "prefill": prefill,
    }


# Calls before an elementwise kernel is timed. In a fresh process bf16 silu over 2048 x 1024 ran its first 4-8 calls
# at 6-9 GB/s and then 18-27 (three processes, 2-core Zen 5 VM); one quick profile, timing a few calls, saved it at
# 1.0 GB/s (others 18-25) and priced Llama-shaped prefills 1.2-1.5x slow.
ELEMENTWISE_WARMUP = 8


def elementwise(torch, clock: Clock, tensor, dtype: str) -> dict[str, Any]:
    """Bytes/s of the kernels a prefill runs between its matmuls, each on one activation-sized tensor (the plan's,
    4 MiB in rows of 1024: a 2048-token bf16 prefill at width 1024), out of place as an eager engine runs them:
    a binary multiply (counted as 2 reads + 1 write), silu, tanh, tanh-GELU, RMSNorm and LayerNorm over rows of
    1024 (1 read + 1 write each). Their rates differ by 10x on one CPU (bf16 on a 2-core Zen 5 VM: multiply
    ~35-50 GB/s, silu ~10-13, tanh-GELU ~3.7), so each is priced at its own (roofline.calc.elementwise). Each
    result is checked against float64."""
    import torch.nn.functional as F

    width = ELEMENTWISE_WIDTH
    rows = clock.plan.elementwise_bytes // (width * (torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8))
    a, b = tensor(rows, width, dtype=dtype), tensor(rows, width, dtype=dtype)
    kernels = {
        "binary": (lambda x: x * b, lambda x: x * b.cpu().double(), 3),
        "silu": (F.silu, F.silu, 2),
        "tanh": (torch.tanh, torch.tanh, 2),
        "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), 2),
        "rms_norm": (lambda x: F.rms_norm(x, (width,)), lambda x: F.rms_norm(x, (width,)), 2),
        "layer_norm": (lambda x: F.layer_norm(x, (width,)), lambda x: F.layer_norm(x, (width,)), 2),
    }
    element = a.element_size()
    rates = {}
    for name in ELEMENTWISE_KERNELS:  # the planner budgets them by name
        kernel, reference, passes = kernels[name]
        out = {}
        times = clock.times(
            lambda: out.__setitem__("y", kernel(a)),
            warmup=ELEMENTWISE_WARMUP,
            min_reps=clock.plan.curve_reps,
            min_time=clock.plan.attention_time,
            max_time=clock.plan.attention_time,
        )
        verify_close(out["y"], reference(a.cpu().double()), dtype, f"elementwise {dtype} {name}")
        rates[name] = passes * rows * width * element / min(times)
    return {"shape": [rows, width], "bytes_per_s": rates}


def _sdpa_time(torch, clock: Clock, q, k, v, causal: bool, dtype: str, what: str) -> float:
    """The best time [s] of SDPA(q, k, v), its output checked against float64 on the host for the query heads of the
    first KV head (one head where there are as many KV heads as query heads)."""
    import torch.nn.functional as F

    gqa = q.shape[1] != k.shape[1]
    out = {}
    times = clock.times(
        lambda: out.__setitem__("y", F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)),
        min_reps=clock.plan.curve_reps,
        min_time=clock.plan.attention_time,
        max_time=clock.plan.attention_time,
    )
    group = q.shape[1] // k.shape[1]  # the query heads of the first KV head
    host = [t.cpu().double() for t in (q[:, :group], k[:, :1], v[:, :1])]  # float64 on the host: MPS has none
    reference = F.scaled_dot_product_attention(*host, is_causal=causal)
    verify_close(out["y"][:, :group], reference, dtype, what)
    return min(times)


def op_overhead(torch, clock: Clock, calls: int = 100) -> float:
    """Seconds of one tiny eager op (a layer norm over 64 values): the fixed cost every kernel launch pays."""
    import torch.nn.functional as F

    x = torch.zeros(1, 64, device=clock.device)

    def burst():
        for _ in range(calls):
            F.layer_norm(x, (64,))

    return statistics.median(clock.times(burst, min_reps=3, min_time=0.0)) / calls
