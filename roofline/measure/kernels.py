"""The kernels `roofline measure` times: matmul shape scans, copy / read bandwidth, the decode-shaped curve,
decode attention and the per-op overhead (torch passed in; see roofline.measure for the method)."""

import math
import statistics
from typing import Any, Callable

from roofline.units import MiB
from roofline.measure.timing import STORAGE, Clock, MeasureError, copy_bytes, matmul_flops, summary, verify_close, verify_matmul

CURVE_WEIGHTS = 16  # the decode-shaped curve cycles 16 weights of buffer / 16 bytes: layer-sized and cold


def matmul_scan(torch, clock: Clock, tensor, dtype: str, notes: list[str], on_step) -> dict[str, Any]:
    """Best and median FLOP/s over the plan's shapes that fit the time budget."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        if clock.kind == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        return _scan(torch, clock, tensor, dtype, notes, on_step)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _scan(torch, clock: Clock, tensor, dtype: str, notes: list[str], on_step) -> dict[str, Any]:
    """Shapes in increasing FLOPs; each call's time is estimated from the best rate so far (a 256^3 probe
    first), and the scan stops before a shape whose single call would exceed the plan's max_call."""
    plan, probe = clock.plan, 256
    a, b = tensor(probe, probe, dtype=dtype), tensor(probe, probe, dtype=dtype)
    out = torch.matmul(a, b)
    verify_matmul(a, b, out, dtype, f"matmul {dtype} {probe}^3")
    probe_rate = summary(matmul_flops(probe, probe, probe), clock.times(lambda: torch.matmul(a, b, out=out)))[0]
    shapes = sorted([(n, n, n) for n in plan.squares] + list(plan.shapes), key=lambda s: matmul_flops(*s))
    rate, results = probe_rate, []
    for index, (m, k, n) in enumerate(shapes):
        if matmul_flops(m, k, n) / rate > plan.max_call:
            skipped = ", ".join("x".join(map(str, s)) for s in shapes[index:])
            notes.append(f"matmul {dtype}: {skipped} skipped, over {plan.max_call:g} s per call at {rate / 1e9:.3g} GFLOP/s")
            break
        on_step(f"matmul {dtype} {m}x{k}x{n}")
        try:
            results.append(_matmul_shape(torch, clock, tensor, dtype, m, k, n))
        except out_of_memory(torch):
            _free(torch)
            notes.append(f"matmul {dtype} {m}x{k}x{n}: out of device memory, skipped")
            continue
        rate = max(rate, results[-1]["best_flop_per_s"])
    if not results:  # even the smallest planned shape is too slow: report the probe
        times = clock.times(lambda: torch.matmul(a, b, out=out))
        best, median = summary(matmul_flops(probe, probe, probe), times)
        results.append({"shape": [probe] * 3, "best_flop_per_s": best, "median_flop_per_s": median, "calls": len(times)})
    top = max(results, key=lambda r: r["best_flop_per_s"])
    return {
        "best_flop_per_s": top["best_flop_per_s"],
        "median_flop_per_s": top["median_flop_per_s"],
        "best_shape": top["shape"],
        "verified": True,
        "probe_flop_per_s": probe_rate,
        "shapes": results,
    }


def _matmul_shape(torch, clock: Clock, tensor, dtype: str, m: int, k: int, n: int) -> dict[str, Any]:
    a, b = tensor(m, k, dtype=dtype), tensor(k, n, dtype=dtype)
    out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    times = clock.times(lambda: torch.matmul(a, b, out=out))
    verify_matmul(a, b, out, dtype, f"matmul {dtype} {m}x{k}x{n}")
    best, median = summary(matmul_flops(m, k, n), times)
    return {"shape": [m, k, n], "best_flop_per_s": best, "median_flop_per_s": median, "calls": len(times)}


def out_of_memory(torch) -> tuple[type[BaseException], ...]:
    """The exception types of a device allocation failure (CUDA's OutOfMemoryError)."""
    return tuple(t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t)


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


def bandwidths(torch, clock: Clock, dev, buffer_bytes: int) -> dict[str, Any]:
    """Copy (read + write) and read-only bandwidth over float32 buffers of `buffer_bytes` each."""
    count = buffer_bytes // 4
    src = torch.ones(count, dtype=torch.float32, device=dev)
    dst = torch.zeros_like(src)
    src[-1] = 2.0  # a marker, so a copy that skips the tail fails the check
    times = clock.times(lambda: dst.copy_(src))
    if not torch.equal(dst, src):
        raise MeasureError("copy: the destination differs from the source after the timed copies")
    best, median = summary(copy_bytes(count * 4), times)
    copy = {"best_bytes_per_s": best, "median_bytes_per_s": median, "buffer_bytes": count * 4, "verified": True, "counts": "read + write"}
    total = {}
    times = clock.times(lambda: total.__setitem__("sum", src.sum()))
    expected = count + 1.0  # ones plus the marker's extra 1
    if not abs(total["sum"].item() - expected) <= 1e-4 * expected:
        raise MeasureError(f"read: the sum {total['sum'].item():.9g} differs from {expected:.9g}")
    best, median = summary(count * 4, times)
    read = {"best_bytes_per_s": best, "median_bytes_per_s": median, "buffer_bytes": count * 4, "verified": True, "counts": "read"}
    del src, dst
    return {"copy": copy, "read": read}


def decode_curve(torch, clock: Clock, tensor, dtype: str, matmul: dict | None, bandwidth: dict, buffer_bytes: int, notes: list[str]):
    """F.linear(x[M x k], W[n x k]) for M in the plan and each row length k: FLOP/s and weight bytes/s.

    The weights are cold, as in a decode step: each timed call cycles CURVE_WEIGHTS layer-sized weights of
    buffer / CURVE_WEIGHTS bytes, more than the last-level cache together, so every call streams them from
    memory. GEMV speed depends on the row length k (short rows run slower), so the curve is measured per k;
    one more series at the shortest k uses a single tall weight of the whole buffer (like an lm_head, whose
    many rows run slower at small M). Each point records its rows per weight n. Returns (curve, the M = 1
    entry of the longest layer-sized rows, which is the matrix-vector bandwidth).
    """
    import torch.nn.functional as F

    plan = clock.plan
    size = torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8
    rate = matmul["best_flop_per_s"] if matmul else None
    series = [(k, CURVE_WEIGHTS) for k in plan.decode_ks] + [(plan.decode_ks[0], 1)]
    curve, first = [], None
    for k, count in series:
        n = max(256, math.ceil(buffer_bytes / count / (k * size) / 256) * 256)
        weights = [tensor(n, k, dtype=dtype) for _ in range(count)]
        weight_bytes = count * n * k * size
        for m in plan.decode_m:
            flops = matmul_flops(m, k, count * n)
            estimate = max(flops / rate if rate else 0.0, weight_bytes / bandwidth["read"]["best_bytes_per_s"])
            if estimate > plan.max_call:
                notes.append(f"decode-shaped {dtype} k={k} n={n}: M = {m} and above skipped, over {plan.max_call:g} s per call")
                break
            x = tensor(m, k, dtype=dtype)
            out = {}
            times = clock.times(lambda: out.__setitem__("y", [F.linear(x, w) for w in weights]), min_reps=plan.curve_reps, min_time=plan.curve_time)
            verify_matmul(x, weights[-1].t(), out["y"][-1], dtype, f"decode-shaped matmul {dtype} M={m} k={k} n={n}")
            best_flops, median_flops = summary(flops, times)
            curve.append({"m": m, "k": k, "n": n, "flop_per_s": best_flops, "bytes_per_s": weight_bytes * best_flops / flops,
                          "median_flop_per_s": median_flops})
            if m == 1 and k == plan.decode_ks[-1] and count == CURVE_WEIGHTS:
                best, median = summary(weight_bytes, times)
                first = {"best_bytes_per_s": best, "median_bytes_per_s": median, "buffer_bytes": weight_bytes, "verified": True,
                         "counts": "weight read", "dtype": dtype, "shape": [count * n, k]}
        del weights
    return curve, first


ATTENTION_SHAPES = {"mha": (8, 16, 16, 128, 512), "gqa": (8, 32, 8, 128, 512)}  # batch, heads, kv heads, head_dim, context


def attention(torch, clock: Clock, tensor, dtype: str, rate: float | None, notes: list[str]) -> dict[str, Any] | None:
    """Decode attention (SDPA, one query token over a KV cache) at an MHA and a 4:1 GQA shape.

    FLOPs = 4 x batch x heads x context x head_dim; bytes = the K and V read. The GQA shape has 4x the FLOPs
    per byte, so it gives the kernel's FLOP/s and the MHA shape its bytes/s: a decode step's attention then
    takes max(FLOPs / flop_per_s, bytes / bytes_per_s).
    """
    import torch.nn.functional as F

    size = torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8
    shapes = []
    for name, (b, h, kv, d, ctx) in ATTENTION_SHAPES.items():
        flops, nbytes = 4.0 * b * h * ctx * d, 2.0 * b * kv * ctx * d * size
        if rate and flops / rate > 100 * clock.plan.max_call:  # matmuls this slow: attention would be too
            notes.append(f"decode attention {dtype}: skipped, this dtype's matmuls run at {rate / 1e9:.3g} GFLOP/s")
            return None
        q, k, v = tensor(b, h, 1, d, dtype=dtype), tensor(b, kv, ctx, d, dtype=dtype), tensor(b, kv, ctx, d, dtype=dtype)
        out = {}
        times = clock.times(lambda: out.__setitem__("y", F.scaled_dot_product_attention(q, k, v, enable_gqa=h != kv)),
                            min_reps=clock.plan.curve_reps, min_time=clock.plan.curve_time)
        host = [t.cpu().double() for t in (q, k, v)]  # float64 on the host: MPS has none
        reference = F.scaled_dot_product_attention(*host, enable_gqa=h != kv)
        verify_close(out["y"], reference, dtype, f"decode attention {dtype} {name}")
        best = min(times)
        shapes.append({"shape": name, "batch": b, "heads": h, "kv_heads": kv, "head_dim": d, "context": ctx,
                       "time_s": best, "flop_per_s": flops / best, "bytes_per_s": nbytes / best})
    return {"flop_per_s": shapes[1]["flop_per_s"], "bytes_per_s": shapes[0]["bytes_per_s"], "shapes": shapes}


def op_overhead(torch, clock: Clock, calls: int = 100) -> float:
    """Seconds of one tiny eager op (a layer norm over 64 values): the fixed cost every kernel launch pays."""
    import torch.nn.functional as F

    x = torch.zeros(1, 64, device=clock.device)

    def burst():
        for _ in range(calls):
            F.layer_norm(x, (64,))

    return statistics.median(clock.times(burst, min_reps=3, min_time=0.0)) / calls
