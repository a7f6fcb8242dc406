"""`measure`'s run: every kernel of the plan on one device, as the JSON-shaped result (method: roofline.measure.timing)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from roofline.errors import UsageError
from roofline.measure.timing import (
    CPU_PLAN, CPU_QUICK, GPU_PLAN, GPU_QUICK, MATMUL_DTYPES, METHOD_VERSION, SCHEMA_VERSION, STORAGE, Clock, Plan, pick_device, torch_module,
)


def run(
    device: str = "auto",
    dtypes: list[str] | None = None,
    threads: int | None = None,
    quick: bool = False,
    weight_dtype: str = "bf16",
    plan: Plan | None = None,
    on_step: Callable[[str], None] = lambda label: None,
) -> dict[str, Any]:
    """Measure this machine; returns the JSON-shaped result (see the README's contract)."""
    from roofline.measure import machine
    from roofline.measure.kernels import attention, bandwidths, decode_curve, matmul_scan, op_overhead, shrinking

    torch = torch_module()
    started = time.perf_counter()
    kind = pick_device(torch, device)
    if threads is not None:
        if threads < 1:
            raise UsageError(f"--threads: expected an integer >= 1, got {threads}")
        torch.set_num_threads(threads)
    plan = plan or ((GPU_QUICK if quick else GPU_PLAN) if kind != "cpu" else (CPU_QUICK if quick else CPU_PLAN))
    wanted = dtypes or [d for d in MATMUL_DTYPES if d != "tf32" or kind == "cuda"]
    for d in [*wanted, weight_dtype]:
        if d not in MATMUL_DTYPES:
            raise UsageError(f"--dtype: unknown dtype {d!r} (expected some of {', '.join(MATMUL_DTYPES)})")
    context = machine.context(torch, kind)
    notes: list[str] = []
    clock = Clock(torch, kind, plan)
    dev = torch.device(kind)
    try:  # draw on the device itself: a 1 GiB GPU weight should not be made on the host
        generator, where = torch.Generator(device=dev).manual_seed(0), dev
    except RuntimeError:
        generator, where = torch.Generator().manual_seed(0), torch.device("cpu")

    def tensor(*shape: int, dtype: str):
        """Uniform values in [-1, 1), non-trivial to verify. Large tensors tile a 1 Mi-value random block:
        drawing hundreds of MiB of random numbers would cost more than timing them."""
        count = math.prod(shape)
        block = torch.empty(min(count, 2**20), dtype=getattr(torch, STORAGE[dtype]), device=where).uniform_(-1.0, 1.0, generator=generator)
        return block.repeat(-(-count // block.numel()))[:count].view(*shape).to(dev)

    matmul = {}
    for d in wanted:
        if d == "tf32" and kind != "cuda":
            notes.append(f"tf32 applies to CUDA tensor cores only; not measured on {kind}")
            continue
        on_step(f"matmul {d}")
        matmul[d] = matmul_scan(torch, clock, tensor, d, notes, on_step)
    buffer_bytes = machine.buffer_bytes(torch, kind, context, plan)
    on_step("bandwidth")
    bandwidth = shrinking(torch, lambda size: bandwidths(torch, clock, dev, size), buffer_bytes, "bandwidth buffers", notes)
    curves, gemv = {}, None
    fastest = max((m["best_flop_per_s"] for m in matmul.values()), default=0.0)
    for d in dict.fromkeys([weight_dtype, *(x for x in matmul if x != "tf32")]):
        on_step(f"decode-shaped matmul {d}")
        slow = d in matmul and matmul[d]["best_flop_per_s"] < 0.1 * fastest
        if slow and quick:
            notes.append(f"decode-shaped {d}: skipped in a quick run, its matmuls run at under 10% of the fastest dtype's")
            continue
        if slow:  # e.g. fp16 without native arithmetic: a short curve keeps the run in budget
            notes.append(f"decode-shaped {d}: M = 1 and 2 at k = {clock.plan.decode_ks[-1]} only, its matmuls run at under 10% of the fastest dtype's")
        short = clock.plan._replace(decode_m=clock.plan.decode_m[:2], decode_ks=clock.plan.decode_ks[-1:]) if slow else clock.plan
        curve = lambda size: decode_curve(torch, Clock(torch, kind, short), tensor, d, matmul.get(d), bandwidth, size, notes)  # noqa: E731
        curves[d], entry = shrinking(torch, curve, buffer_bytes, f"decode-shaped {d} weight", notes)
        if d == weight_dtype:
            gemv = entry
    bandwidth["gemv"] = gemv
    attentions = {}
    for d in dict.fromkeys([weight_dtype, *(x for x in matmul if x != "tf32")]):
        on_step(f"decode attention {d}")
        if quick and d not in curves:
            continue
        found = attention(torch, clock, tensor, d, matmul[d]["best_flop_per_s"] if d in matmul else None, notes)
        if found:
            attentions[d] = found
    on_step("per-op overhead")
    overhead = op_overhead(torch, clock)
    return {
        "schema_version": SCHEMA_VERSION,
        "method_version": METHOD_VERSION,
        "device": context,
        "matmul": matmul,
        "bandwidth": bandwidth,
        "decode_matmul": curves,
        "decode_attention": attentions,
        "op_overhead_s": overhead,
        **_ridge(matmul, bandwidth),
        "notes": notes,
        "elapsed_s": time.perf_counter() - started,
    }


def decode_bandwidth(bandwidth: dict[str, Any]) -> tuple[str, float]:
    """The bandwidth that predicts decode: the best read kernel (sum, or the M = 1 matrix-vector product).

    Decode streams weights and KV: a read. Copy pays a write (and on CPUs write-allocate traffic), so it
    understates what a read-dominated step can reach; it stays in the output as the conventional figure.
    """
    candidates = {name: bandwidth[name]["best_bytes_per_s"] for name in ("read", "gemv") if bandwidth.get(name)}
    name = max(candidates, key=candidates.get)
    return name, candidates[name]


def _ridge(matmul: dict[str, Any], bandwidth: dict[str, Any]) -> dict[str, Any]:
    source, rate = decode_bandwidth(bandwidth)
    dtype = "bf16" if "bf16" in matmul else next(iter(matmul), None)
    if dtype is None:
        return {"ridge_point_flop_per_byte": None, "ridge_dtype": None, "decode_bandwidth": source}
    return {"ridge_point_flop_per_byte": matmul[dtype]["best_flop_per_s"] / rate, "ridge_dtype": dtype, "decode_bandwidth": source}
