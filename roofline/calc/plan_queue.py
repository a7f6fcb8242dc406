"""`plan` with queueing: a replica's capacity is the largest arrival rate at which its simulated latencies meet the
SLOs at their percentile unsaturated (roofline.calc.simulate: vLLM V1's scheduler, chunked prefill, Poisson
arrivals), found by bisection between a light load and the replica's saturation rate; replicas = ceil(rate /
capacity), so no replica runs at its saturation rate and each option shows its utilization (its share of the rate
over the saturation rate) and the percentile latencies at that share. Options run in parallel processes, one per
core.
"""

import math
from collections.abc import Callable, Iterable
from typing import Any

from roofline.errors import UsageError

REQUESTS = 1500  # per simulated rate: enough for a p99 (15 requests beyond it), ~30 ms of simulation
ROUNDS = 8  # bisection steps: the capacity to 1/256 of the saturation rate
LONG = 20_000  # the rate found is run again this long, and lowered by STEP until it holds (LONG below)
STEP = 0.95


def options(work: list[tuple], progress: Callable[[int, int], None] | None = None) -> list[Any]:
    """One plan Option per (model, hardware, tp, ...) tuple of `work`, in parallel processes when there are
    several; `progress(done, total)` before the first and after each (in the work's order)."""
    import os

    def done(results: Iterable[Any]) -> list[Any]:
        found = []
        if progress is not None:
            progress(0, len(work))
        for result in results:
            found.append(result)
            if progress is not None:
                progress(len(found), len(work))
        return found

    if len(work) < 4 or (os.cpu_count() or 1) < 2:
        return done(option(*w) for w in work)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        return done(pool.map(_star, work))


def _star(args: tuple) -> Any:
    return option(*args)


def option(model, h, tp, prompt, output, rate, tpot_slo, ttft_slo, q, price, knobs) -> Any:
    """The queued plan option (roofline.calc.options.Option) of one device at one tp degree, refused with the reason
    when none meets the SLOs."""
    from roofline.calc.options import refused_option, served_option
    from roofline.calc.prepare import prepare
    from roofline.calc.presets import beyond_runs
    from roofline.calc.simulate import run_simulation
    from roofline.calc.workload import lengths, open_loop

    def refused(reason: str):
        return refused_option(h, tp, 1, None, reason, method="simulated")

    if tp > 1 and h.interconnect_bandwidth is None:
        return refused("no interconnect_bandwidth for tp")
    try:
        p = prepare(model, h, **knobs, tp=tp)
        first = run_simulation(
            p, open_loop(1.0, "poisson", 1.0, 400, lengths(None, prompt, ""), lengths(None, output, ""), 0), warmup=40
        )
    except UsageError as e:
        return refused(e.detail)
    stable = first.max_stable_rate_per_s

    def at(r: float, count: int = REQUESTS):
        reqs = open_loop(r, "poisson", 1.0, count, lengths(None, prompt, ""), lengths(None, output, ""), 0)
        return run_simulation(
            p, reqs, warmup=count // 10, capacity=False, ttft_slo=ttft_slo, tpot_slo=tpot_slo, slo_percentile=q
        )

    low, high = 0.02 * stable, 0.98 * stable
    light = at(low)
    if not _meets(light, ttft_slo, tpot_slo, q):
        why = _miss(light, ttft_slo, tpot_slo, q)
        verb = "misses the SLOs" if _missed(light, ttft_slo, tpot_slo, q) else "saturates"
        return refused(f"{verb} even at 2% of its saturation rate ({why})")
    if _meets(at(high), ttft_slo, tpot_slo, q):
        low = high
    else:
        for _ in range(ROUNDS):
            mid = (low + high) / 2
            low, high = (mid, high) if _meets(at(mid), ttft_slo, tpot_slo, q) else (low, mid)
    capacity = _held(low, lambda r: _meets(at(r, LONG), ttft_slo, tpot_slo, q))
    if capacity is None:
        return refused(f"its queue runs away over {LONG:,} requests even at half the rate {REQUESTS:,} held")
    replicas = max(1, math.ceil(rate / capacity - 1e-9))
    share = at(rate / replicas)
    caveat = beyond_runs(p.preset, share.batch["mean"]) if p.preset is not None and p.preset_setup else None
    return served_option(
        h, tp, 1, None, replicas, None, replicas * tp, share.ttft_s["mean"], share.tpot_s["mean"], rate * output,
        price, caveat, method="simulated", utilization=(rate / replicas) / stable, ttft_p99_s=_q(share.ttft_s, q),
        tpot_p99_s=_q(share.tpot_s, q),
    )  # fmt: skip


def _held(rate: float, holds) -> float | None:
    """`rate`, lowered by STEP until `holds` it over LONG requests; None when even half of it does not. A burst that
    fills the KV cache can come thousands of requests in: Llama-3.1-8B on an H100 (1024/256 tokens, Poisson, seed
    0) ran 1,500 requests at 42/s without a preemption, preempted once in 20,000 and ran away at 38/s served within
    30,000; over 100,000 requests and five seeds 38/s never preempted, 40/s preempted in two without running away,
    42/s ran away in three (2026-12-07)."""
    floor = rate / 2
    while rate >= floor:
        if holds(rate):
            return rate
        rate *= STEP
    return None


def _q(summary: dict, q: float) -> float:
    """The SLO percentile from a summary (p50, p90, p95, p99; max beyond p99)."""
    for name, level in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
        if q <= level + 1e-9:
            return summary[name]
    return summary["max"]


def _meets(s, ttft_slo, tpot_slo, q) -> bool:
    """Whether a simulated share of the load meets the SLOs at their percentile and is not saturated (simulate: a
    queue growing, or preemptions while the waits grow and the served rate trails the arrivals). Any preemption was
    refused for a while: on a replica whose KV cache holds a few requests two that overlap preempt at a few percent
    of its capacity with a flat queue, and Llama-3.1-8B on an L4 (4096/512 tokens, 10/s) was sized 217 replicas
    where 121 meet the SLOs; the long run in _held guards the slow runaway instead."""
    return not s.saturated and not _missed(s, ttft_slo, tpot_slo, q)


def _missed(s, ttft_slo, tpot_slo, q) -> list[str]:
    """The SLOs a simulated share misses at their percentile, as said: ['TTFT 2.11e+03 ms', ...]."""
    parts = []
    for name, slo, summary in (("TTFT", ttft_slo, s.ttft_s), ("TPOT", tpot_slo, s.tpot_s)):
        if slo is not None and _q(summary, q) > slo:
            parts.append(f"{name} {_q(summary, q) * 1e3:.3g} ms")
    return parts


def _miss(s, ttft_slo, tpot_slo, q) -> str:
    parts = _missed(s, ttft_slo, tpot_slo, q)
    if s.preemptions:
        parts.append(f"{s.preemptions} preemption(s): requests outgrow its KV cache")
    return ", ".join(parts) or "saturated"
