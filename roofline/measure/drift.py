"""This machine's drift since its profile, for `validate`: the profile's kernels timed again before every timed run
and after the last, so each run is bracketed by two timings. For decode, the reference point of the decode curve
(F.linear at M = 1 over cold weights of its longest row length k, the way a decode step streams), and for a batch
nearest a curve M above 1 that M's layer points at every k (batch_points); for prompts, the scan's LLM-shaped
matmul that the headline rounds timed again (128 x 1024 x 4096 in a quick CPU profile), the rate that prices
prefill linears of its rows.

drift = the profile's rate there / its rate now: 1.3 means the machine runs 30% slower now than when the profile was
measured, and a TPOT ratio (predicted / measured) times the drift is the ratio the profile's moment would have
given; a TTFT ratio times the prompt drift likewise. A shared VM moves 30-45% between runs, and on the Zen 5 VM once
25-32% from one run to the next a minute apart; a batch's own drift is taken from the timings around its runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from roofline.calc.calibrate import typical
from roofline.measure.timing import STORAGE, Clock, matmul_flops

CALLS = 3  # timed calls per timing, after one warm-up: the best is kept
SPLIT = 1.25  # a reference point whose best call beat its passes' median by more than this caught a slow moment


def caught_slow(point: dict[str, Any]) -> str | None:
    """A note when the profile's reference point came out of passes that disagree (its best call / the median of
    its passes' best calls above SPLIT): the profile's curve caught a slow moment there, so the curve's prediction
    and the drift both carry it. On the Zen 5 VM one quick profile's layer-sized M = 1 points read 0.58-0.75 of
    the next profile's, best 29 against a median of 18 GFLOP/s at the reference, while the same profile's
    interleaved weights_read rounds had a cv of 1%. Since curve points leave stalled passes out
    (kernels.pass_rate, whose rate is never under the best / SPLIT), this fires only on profiles saved before it."""
    best, median = point.get("best_flop_per_s"), point["flop_per_s"]
    if not best or best <= SPLIT * median:
        return None
    return (
        f"the profile's drift reference (M = 1, k = {point['k']}) ran its passes at {median / 1e9:.1f} GFLOP/s "
        f"against a best call of {best / 1e9:.1f}: its decode curve caught a slow moment, and the prediction and "
        "the drift both carry it (measure again)"
    )


def reference_point(measured: dict[str, Any] | None, dtype: str) -> dict[str, Any] | None:
    """The curve point the drift is timed at: M = 1 on the layer-sized weights of the longest k (None without)."""
    curve = ((measured or {}).get("decode_matmul") or {}).get(dtype) or []
    layer = [p for p in curve if p["m"] == 1 and "series" not in p and "n" in p]
    if not layer:
        return None
    longest = max(p["k"] for p in layer)
    return min((p for p in layer if p["k"] == longest), key=lambda p: p["n"])


def prompt_point(measured: dict[str, Any] | None, dtype: str) -> dict[str, Any] | None:
    """The scan's shape the prompt drift is timed at: the LLM-shaped matmul the headline rounds timed again (its entry
    has `rounds`; None without, as in profiles measured before it)."""
    shapes = (((measured or {}).get("matmul") or {}).get(dtype) or {}).get("shapes") or []
    return next((s for s in shapes if "rounds" in s), None)


class Reference:
    """One kernel of the profile, allocated once and timed again on demand: `call` does `flops` FLOPs, which the
    profile saw run at `rate` [FLOP/s]."""

    def __init__(self, clock: Clock, call: Callable[[], Any], flops: float, rate: float):
        self.clock, self.call, self.flops, self.rate = clock, call, flops, rate
        self.now: list[float] = []

    def time(self) -> None:
        """The rate now [FLOP/s]: the best of CALLS calls after a warm-up, kept in `now`."""
        self.now.append(self.flops / min(self.clock.times(self.call, 1, CALLS, 0.0, float("inf"))))

    def drift(self) -> float | None:
        """The profile's rate / the median rate now (None before any timing)."""
        return self.rate / statistics.median(self.now) if self.now else None

    def around(self, runs: list[int]) -> float:
        """The drift of the runs at these positions (0 = the first timed run): the profile's rate / the median of
        the timings just before and just after each (run i lies between timings i and i + 1)."""
        return self.rate / statistics.median(self.now[j] for i in runs for j in (i, i + 1))


def decode_references(
    torch, device: str, dtype: str, groups: list[list[dict[str, Any]]], buffer_bytes: float
) -> list[Reference]:
    """One Reference per group of curve points of one M (the M = 1 reference point; a batch's layer points at every
    k): F.linear over the cold set of weights the profile cycled, each k's weights a view of one pool that all the
    groups share (one buffer held beside the model, not one per group), timed as one call; the profile's rate is
    their FLOPs over the time their rates give."""
    import torch.nn.functional as F

    size = torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8
    shapes = [
        [
            (p["m"], p["k"], p["n"], max(2, round((p.get("buffer_bytes") or buffer_bytes) / (p["n"] * p["k"] * size))))
            for p in points
        ]
        for points in groups
    ]
    largest = max(c * n * k for group in shapes for _, k, n, c in group)
    pool = torch.empty(largest, dtype=getattr(torch, STORAGE[dtype]), device=device).uniform_(-1, 1)
    references = []
    for points, group in zip(groups, shapes):
        calls = [
            (
                torch.ones(m, k, dtype=pool.dtype, device=device),
                [pool[i * n * k : (i + 1) * n * k].view(n, k) for i in range(c)],
            )
            for m, k, n, c in group
        ]
        flops = [matmul_flops(m, k, c * n) for m, k, n, c in group]
        call = lambda calls=calls: [F.linear(x, w) for x, weights in calls for w in weights]  # noqa: E731
        rate = sum(flops) / sum(f / p["flop_per_s"] for f, p in zip(flops, points))
        references.append(Reference(Clock(torch, device, None), call, sum(flops), rate))
    return references


def offset(torch, device: str, dtype: str, measured: dict[str, Any]) -> float | None:
    """How far a profile's moment is from this machine now: the largest |log(profile's rate / rate now)| over its
    decode reference point and its prompt reference, each timed once (None when it has neither). Best calls
    against best calls: the prompt shape at its best, not the typical rate that prices prefills (on the Zen 4 VM
    fp32's 128 x 1024 x 4096 ran a median 110 GFLOP/s over the scan and rounds, its best 129)."""
    point, prompt = reference_point(measured, dtype), prompt_point(measured, dtype)
    buffer = (measured.get("plan") or {}).get("buffer_bytes", 0)
    found = decode_references(torch, device, dtype, [[point]], buffer) if point else []
    found += [prompt_reference(torch, device, dtype, {**prompt, "median_flop_per_s": None})] if prompt else []
    for x in found:
        x.time()
    return max((abs(math.log(x.drift())) for x in found), default=None)


def batch_points(measured: dict[str, Any] | None, dtype: str, batch: int) -> list[dict[str, Any]]:
    """The curve's layer-sized points at the curve M nearest the batch (in log2; the smaller on a tie), one per k:
    the kernels a decode step of that batch runs. Empty when that M is 1 (reference_point times it) or there is
    no curve. A quick profile on the Zen 4 VM caught a slow moment at M = 16 alone (46-48 GFLOP/s at k = 512 and
    1024 against 57-64 in five other profiles that day, its M = 1 and 4 points alike): only an M = 16 reference
    sees it."""
    curve = ((measured or {}).get("decode_matmul") or {}).get(dtype) or []
    layer = [p for p in curve if "series" not in p and "n" in p]
    ms = sorted({p["m"] for p in layer})
    if not ms:
        return []
    m = min(ms, key=lambda x: (abs(math.log2(x) - math.log2(batch)), x))
    if m == 1:
        return []
    at = [p for p in layer if p["m"] == m]
    return [min((p for p in at if p["k"] == k), key=lambda p: p["n"]) for k in sorted({p["k"] for p in at})]


def prompt_reference(torch, device: str, dtype: str, entry: dict[str, Any]) -> Reference:
    """The scan's rounds-timed LLM shape, run as the scan runs it (torch.matmul of M x k by k x n into one output),
    against the typical rate that priced prefills (calibrate.typical)."""
    from roofline.measure.timing import tf32_mode

    m, k, n = entry["shape"]
    store, clock = getattr(torch, STORAGE[dtype]), Clock(torch, device, None)
    a = torch.empty(m, k, dtype=store, device=device).uniform_(-1, 1)
    b = torch.empty(k, n, dtype=store, device=device).uniform_(-1, 1)
    out = torch.empty(m, n, dtype=store, device=device)

    def call() -> None:
        with tf32_mode(torch, clock, dtype):
            torch.matmul(a, b, out=out)

    return Reference(clock, call, matmul_flops(m, k, n), typical(entry))
