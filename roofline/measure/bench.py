"""`measure`'s run: every kernel of the plan on one device, as the JSON-shaped result (method:
roofline.measure.timing)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from roofline.errors import UsageError
from roofline.measure.planner import MeasurePlan
from roofline.measure.timing import (
    MATMUL_DTYPES,
    METHOD_VERSION,
    SCHEMA_VERSION,
    STORAGE,
    Clock,
    matmul_flops,
    pick_device,
    summary,
    torch_module,
)
from roofline.units import MiB


def run(
    device: str = "auto",
    dtypes: list[str] | None = None,
    threads: int | None = None,
    quick: bool = False,
    weight_dtype: str = "bf16",
    plan: MeasurePlan | None = None,
    on_step: Callable[[str], None] = lambda label: None,
    budget_s: float | None = None,
) -> dict[str, Any]:
    """Measure this machine within a time budget (20 s, or 5 s quick, torch's import included); returns the
    JSON-shaped result (see the README's contract). `plan` overrides the planner (tests use a tiny one)."""
    from roofline.measure import allocator, machine, planner
    from roofline.measure.kernels import attention, decode_curve, elementwise, matmul_scan, op_overhead, shrinking

    started = time.perf_counter()
    budget = budget_s if budget_s is not None else planner.QUICK_BUDGET_S if quick else planner.BUDGET_S
    if not 1 <= budget <= 3600:
        raise UsageError(f"expected a budget from 1 s to 1 h, got {budget!r}", "budget_s")
    kept = allocator.keep_freed_memory()  # before the first buffer: freshly mapped pages would fault on every call
    torch = torch_module()  # its import counts against the budget
    kind = pick_device(torch, device)
    if threads is not None:
        if threads < 1:
            raise UsageError(f"--threads: expected an integer >= 1, got {threads}")
        torch.set_num_threads(threads)
    wanted = dtypes or [d for d in MATMUL_DTYPES if d != "tf32" or kind == "cuda"]
    for d in [*wanted, weight_dtype]:
        if d not in MATMUL_DTYPES:
            raise UsageError(f"--dtype: unknown dtype {d!r} (expected some of {', '.join(MATMUL_DTYPES)})")
    deadline = started + planner.PLANNED_SHARE * budget - planner.RESERVE_S
    context = {**machine.context(torch, kind), "allocator": kept}
    notes: list[str] = []
    dev = torch.device(kind)
    try:  # draw on the device itself: a 1 GiB GPU weight should not be made on the host
        generator, where = torch.Generator(device=dev).manual_seed(0), dev
    except RuntimeError:
        generator, where = torch.Generator().manual_seed(0), torch.device("cpu")

    def tensor(*shape: int, dtype: str):
        """Uniform values in [-1, 1), non-trivial to verify. Large tensors tile a 1 Mi-value random block:
        drawing hundreds of MiB of random numbers would cost more than timing them."""
        count = math.prod(shape)
        block = torch.empty(min(count, 2**20), dtype=getattr(torch, STORAGE[dtype]), device=where).uniform_(
            -1.0, 1.0, generator=generator
        )
        return block.repeat(-(-count // block.numel()))[:count].view(*shape).to(dev)

    measured = [d for d in wanted if d != "tf32" or kind == "cuda"]
    if len(measured) < len(wanted):
        notes.append(f"tf32 applies to CUDA tensor cores only; not measured on {kind}")
    on_step("probe")
    free = torch.cuda.mem_get_info()[0] if kind == "cuda" else machine.available_memory()
    read_probe, rate_probe = _probe(torch, kind, tensor, dev, measured)
    fast = [d for d in rate_probe if d not in slow_dtypes(rate_probe)]  # slow dtypes get their probe shape only
    here = planner.Machine(kind, context["last_level_cache_bytes"], free, read_probe, max(rate_probe.values()))
    curve_dtypes = len({weight_dtype, *fast} - {"tf32"})  # the weight dtype's curve runs though its matmul is not asked
    plan = plan or planner.plan(here, quick, deadline - time.perf_counter(), len(fast), curve_dtypes)
    if plan.note:
        notes.append(plan.note)
    clock = Clock(torch, kind, plan, deadline)

    def phase(name: str) -> None:  # each phase may run to its share of the budget (with the planner's slack)
        clock.deadline = min(
            deadline, time.perf_counter() + planner.SLACK * planner.SHARES[name] * max(plan.budget_s, 0.5)
        )

    phase("matmul")
    matmul = {}
    for d in measured:
        on_step(f"matmul {d}")
        if d not in fast:  # the plan budgets the fast dtypes only: a slow one's scan and rounds had taken their time
            matmul[d] = probe_entry(torch, tensor, d, rate_probe[d])
            notes.append(
                f"matmul {d}: its 256^3 probe only ({rate_probe[d] / 1e9:.3g} GFLOP/s, under a tenth of the fastest "
                "dtype's)"
            )
            continue
        matmul[d] = matmul_scan(torch, clock, tensor, d, notes, on_step)
    slow = slow_dtypes({d: m["best_flop_per_s"] for d, m in matmul.items()})
    read_dtype = weight_dtype if weight_dtype not in slow else max(matmul, key=lambda d: matmul[d]["best_flop_per_s"])
    if read_dtype != weight_dtype:
        notes.append(f"weights_read in {read_dtype}: {weight_dtype} matmuls run at under 10% of the fastest dtype's")

    on_step("bandwidth and headline rounds")
    bandwidth = shrinking(
        torch,
        lambda size: _rounds(torch, clock, tensor, dev, size, read_dtype, plan, matmul, notes, on_step, phase),
        plan.buffer_bytes,
        "bandwidth buffers",
        notes,
    )
    read_rate = max(bandwidth["read"]["best_bytes_per_s"], bandwidth["weights_read"]["best_bytes_per_s"])
    ladder = bandwidth["read"].get("by_working_set") or {}
    knee_bytes = ladder.get("knee_bytes") if ladder.get("reached") else None  # past it the curve's reads stream

    phase("curve")
    curves, gemv = {}, None
    for d in dict.fromkeys([weight_dtype, *(x for x in matmul if x != "tf32")]):
        on_step(f"decode-shaped matmul {d}")
        if d in slow and quick:
            notes.append(
                f"decode-shaped {d}: skipped in a quick run, its matmuls run at under 10% of the fastest dtype's"
            )
            continue
        if d in slow:  # e.g. 16-bit without native arithmetic: a short curve keeps the run in budget
            notes.append(
                f"decode-shaped {d}: M = 1 and 2 at k = {plan.decode_ks[-1]} only, its matmuls run at under 10% of the "
                "fastest dtype's"
            )
        short = plan._replace(decode_m=plan.decode_m[:2], decode_ks=plan.decode_ks[-1:]) if d in slow else plan
        curve_clock = Clock(
            torch, kind, short, deadline
        )  # decode_curve opens its own window once its weights are filled
        ceiling = bandwidth["weights_read"]["best_bytes_per_s"] if d == read_dtype else None  # the same GEMV's rounds
        curve = lambda size: decode_curve(  # noqa: E731
            torch, curve_clock, tensor, d, matmul.get(d), read_rate, size, notes, ceiling, knee_bytes
        )
        curves[d], entry = shrinking(torch, curve, plan.buffer_bytes, f"decode-shaped {d} weight", notes)
        if d == weight_dtype:
            gemv = entry
    bandwidth["gemv"] = gemv

    phase("attention")
    attentions, elementwises = {}, {}
    for d in dict.fromkeys([weight_dtype, *(x for x in matmul if x != "tf32")]):
        on_step(f"decode attention {d}")
        if quick and d not in curves:
            continue
        found = attention(torch, clock, tensor, d, matmul[d]["best_flop_per_s"] if d in matmul else None, notes)
        if found:
            attentions[d] = found
            on_step(f"elementwise kernels {d}")
            elementwises[d] = elementwise(torch, clock, tensor, d)
    phase("overhead")
    on_step("per-op overhead")
    overhead = op_overhead(torch, clock)
    phase("engine")
    on_step("engine fixed costs (tiny models)")
    from roofline.measure import engine_costs

    eager = engine_costs.of("eager", kind, read_dtype, quick, clock.deadline)
    return {
        "schema_version": SCHEMA_VERSION,
        "method_version": METHOD_VERSION,
        "device": context,
        "plan": {
            "budget_s": budget,
            "planned_s": plan.budget_s,
            "buffer_bytes": plan.buffer_bytes,
            "rounds": plan.rounds,
            "last_level_cache_bytes": context["last_level_cache_bytes"],
            "note": plan.note or None,
            "probe": {"read_bytes_per_s": read_probe, "flop_per_s": rate_probe},
        },
        "matmul": matmul,
        "bandwidth": bandwidth,
        "decode_matmul": curves,
        "decode_attention": attentions,
        "elementwise": elementwises,
        "op_overhead_s": overhead,
        "engines": {"eager": eager},
        **ridges(matmul, bandwidth, notes),
        "notes": notes,
        "elapsed_s": time.perf_counter() - started,
    }


SLOW_SHARE = 0.1  # a dtype whose matmuls run under this share of the fastest dtype's has no native units here


def slow_dtypes(rates: dict[str, float]) -> set[str]:
    """The dtypes whose matmul rate [FLOP/s] is under SLOW_SHARE of the fastest's: 16-bit on a CPU without native
    16-bit arithmetic (bf16 1.3 GFLOP/s against fp32's 137-154 on a 2-core AVX2 Zen 3 VM, measured)."""
    fastest = max(rates.values(), default=0.0)
    return {d for d, r in rates.items() if r < SLOW_SHARE * fastest}


def _probe(torch, kind: str, tensor, dev, dtypes: list[str]) -> tuple[float, dict[str, float]]:
    """(read bytes/s, {dtype: FLOP/s}) from a few quick calls: a sum over 64 MiB and a 256^3 matmul per dtype;
    the planner sizes buffers and time shares with them."""
    probe_clock = Clock(torch, kind, None)
    buffer = torch.ones(16 * 2**20, dtype=torch.float32, device=dev)
    times = probe_clock.times(lambda: buffer.sum(), min_reps=3, min_time=0.0, max_time=0.3)
    read = summary(buffer.numel() * 4, times)[0]
    buffer = None  # free it before the matmul probes
    return read, matmul_probe(torch, kind, tensor, dtypes)


def probe_entry(torch, tensor, dtype: str, rate: float) -> dict[str, Any]:
    """A dtype's matmul entry from its probe's rate [FLOP/s] alone, its result verified on one 256^3 call."""
    from roofline.measure.timing import verify_matmul

    a = tensor(256, 256, dtype=dtype)
    verify_matmul(a, a, torch.matmul(a, a), dtype, f"matmul {dtype} 256^3")
    return {
        "best_flop_per_s": rate,
        "median_flop_per_s": rate,
        "best_shape": [256, 256, 256],
        "verified": True,
        "probe_flop_per_s": rate,
        "probe_only": True,
    }


def matmul_probe(torch, kind: str, tensor, dtypes: list[str]) -> dict[str, float]:
    """{dtype: FLOP/s} of a 256^3 matmul, the best of a few calls (`tensor(*shape, dtype=d)` makes the operand)."""
    from roofline.measure.timing import tf32_mode

    probe_clock = Clock(torch, kind, None)
    rates = {}
    for d in dtypes:
        a = tensor(256, 256, dtype=d)
        with tf32_mode(torch, probe_clock, d):
            rates[d] = summary(
                matmul_flops(256, 256, 256), probe_clock.times(lambda: a @ a, min_reps=2, min_time=0.0, max_time=0.3)
            )[0]
    return rates


def _round_prefill(scanned: dict[str, Any], plan) -> bool:
    """Whether a scanned shape is an LLM shape whose call fits the rounds' cap (plan.max_call) at its scanned rate."""
    return (
        len(set(scanned["shape"])) > 1 and matmul_flops(*scanned["shape"]) / scanned["best_flop_per_s"] <= plan.max_call
    )


def timed_again(scanned: dict[str, Any], rounds: list[tuple[float, float]]) -> dict[str, Any]:
    """A scanned shape's figures once the headline rounds timed it again ((best, median) FLOP/s a round): the best
    of all calls, and the typical rate that prices prefills (calibrate.typical), the median over the scan's median
    and each round's, spread over the run."""
    return {
        "best_flop_per_s": max(scanned["best_flop_per_s"], *(b for b, _ in rounds)),
        "median_flop_per_s": statistics.median([scanned["median_flop_per_s"], *(m for _, m in rounds)]),
        "median_over": "scan and rounds",
        "rounds": len(rounds),
    }


def _rounds(torch, clock, tensor, dev, size, read_dtype, plan, matmul, notes, on_step, phase) -> dict[str, Any]:
    """The headline figures in interleaved rounds: each dtype's best matmul shape, then copy, read and
    weights_read, round after round, so drift in the machine's speed hits all alike. Updates `matmul` with
    each dtype's rounds (best, median over rounds, cv, unstable) and returns the bandwidth entries."""
    from roofline.measure.kernels import Bandwidth, BestShape, knee, read_ladder, shrinking, stability

    kernels = Bandwidth(torch, clock, tensor, dev, size, read_dtype, plan.decode_ks[-1])
    timed = {d: m for d, m in matmul.items() if "shapes" in m}  # not the dtypes a quick run only probed
    shapes = {d: BestShape(torch, clock, tensor, d, m["best_shape"]) for d, m in timed.items()}
    # Each dtype's first LLM-shaped result whose call fits a round (the prefill that calibrated TTFTs rise toward):
    # one timing of it in the scan had caught a slow moment (267 GFLOP/s against 401-407 in the next quick runs), so
    # it is timed again too. The scan lets LLM shapes take longer calls than a round's (kernels._scan).
    prefill = {d: next((s for s in m["shapes"] if _round_prefill(s, plan)), None) for d, m in timed.items()}
    for d, scanned in prefill.items():
        if scanned:
            shapes[f"{d} prefill"] = BestShape(torch, clock, tensor, d, scanned["shape"])
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in [*shapes, *kernels.kernels()]}
    phase("rounds")  # the share starts once the buffers are filled
    for r in range(plan.rounds):
        on_step(f"round {r + 1} of {plan.rounds}")
        for d, shape in shapes.items():
            rates[d].append(shape.time(plan.round_time, plan.round_time))
        for name, (_, moved) in kernels.kernels().items():
            rates[name].append(summary(moved, kernels.time(name, plan.round_time, plan.round_time)))
        if clock.left() <= 0 and r + 1 < plan.rounds:
            notes.append(f"headline rounds: {r + 1} of {plan.rounds} ran within the time budget")
            break
    for d, scanned in prefill.items():
        if scanned and rates[f"{d} prefill"]:
            scanned.update(timed_again(scanned, rates[f"{d} prefill"]))
    for d in timed:
        s = stability([b for b, _ in rates[d]], [m for _, m in rates[d]])
        best = max(matmul[d]["best_flop_per_s"], s["best_bytes_per_s"])
        matmul[d].update(
            best_flop_per_s=best,
            median_flop_per_s=s["median_bytes_per_s"],
            rounds=s["rounds"],
            cv=s["cv"],
            unstable=s["unstable"],
        )
    bandwidth = {name: kernels.entry(name, rates[name]) for name in kernels.kernels()}
    kernels.free()
    del shapes
    on_step("read bandwidth by working set")
    phase("ladder")
    ladder = lambda size: read_ladder(torch, clock, dev, size, plan.round_time / 4)  # noqa: E731
    points = shrinking(torch, ladder, max(plan.ladder_bytes, size), "read ladder buffer", notes)
    if points and points[-1]["bytes"] < max(plan.ladder_bytes, size):
        notes.append(
            f"read ladder: reached {points[-1]['bytes'] / MiB:.3g} MiB of the "
            f"{max(plan.ladder_bytes, size) // MiB} MiB planned (its time share or free memory ended it)"
        )
    bandwidth["read"]["by_working_set"] = {"points": points, **knee(points)}
    return bandwidth


def decode_bandwidth(bandwidth: dict[str, Any]) -> tuple[str, float]:
    """The bandwidth that predicts decode: the best read kernel (the sum, weights_read, or the curve's M = 1),
    each carried to memory speed by the read ladder (a buffer that still fits a cache reads faster than memory:
    roofline.calc.cache.at_memory).

    Decode streams weights and KV: a read. Copy pays a write (and on CPUs write-allocate traffic), so it
    understates what a read-dominated step can reach; it stays in the output as the conventional figure.
    The best of the read kernels is a ceiling that a real decode should not beat.
    """
    from roofline.calc.cache import at_memory, ladder

    points = ladder({"bandwidth": bandwidth})
    candidates = {
        name: at_memory(points, bandwidth[name]["best_bytes_per_s"], bandwidth[name].get("buffer_bytes", 0.0))
        for name in ("read", "weights_read", "gemv")
        if bandwidth.get(name)
    }
    name = max(candidates, key=candidates.get)
    return name, candidates[name]


def ridges(matmul: dict[str, Any], bandwidth: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """Ridge point per dtype = its best matmul FLOP/s / the decode bandwidth; the headline ridge is the fastest
    dtype's. A note says when 16-bit dtypes run slower than fp32 (no native 16-bit matrix units)."""
    source, rate = decode_bandwidth(bandwidth)
    points = {d: m["best_flop_per_s"] / rate for d, m in matmul.items()}
    if not points:
        return {
            "ridge_point_flop_per_byte": None,
            "ridge_dtype": None,
            "ridge_points": {},
            "decode_bandwidth": source,
            "decode_bandwidth_bytes_per_s": rate,
        }
    fastest = max(matmul, key=lambda d: matmul[d]["best_flop_per_s"])
    sixteen = [d for d in ("bf16", "fp16") if d in matmul]
    if (
        "fp32" in matmul
        and sixteen
        and all(matmul[d]["best_flop_per_s"] < matmul["fp32"]["best_flop_per_s"] for d in sixteen)
    ):
        notes.append(
            f"{' and '.join(sixteen)} matmuls run slower than fp32 here (no native 16-bit matrix units): "
            f"the headline ridge is fp32's"
        )
    return {
        "ridge_point_flop_per_byte": points[fastest],
        "ridge_dtype": fastest,
        "ridge_points": points,
        "decode_bandwidth": source,
        "decode_bandwidth_bytes_per_s": rate,  # at memory speed (the saved memory_bandwidth)
    }
