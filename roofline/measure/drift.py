"""This machine's drift since its profile, for `validate`: the profile's reference point of the decode curve (F.linear
at M = 1 over cold weights of its longest row length k, the way a decode step streams) timed again before every
timed run and after the last, so each run is bracketed by two timings.

drift = the profile's rate there / its rate now: 1.3 means the machine runs 30% slower now than when the profile was
measured, and a TPOT ratio (predicted / measured) times the drift is the ratio the profile's moment would have
given. A shared VM moves 30-45% between runs, and on the Zen 5 VM once 25-32% from one run to the next a minute
apart; a batch's own drift is taken from the timings around its runs.
"""

from __future__ import annotations

import statistics
from typing import Any

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


class Reference:
    """The reference point's weights, allocated once (the cold set the profile cycled), timed again on demand."""

    def __init__(self, torch, device: str, dtype: str, point: dict[str, Any], buffer_bytes: float):
        import torch.nn.functional as F

        self.F, self.clock, self.rate = F, Clock(torch, device, None), point["flop_per_s"]
        k, n = point["k"], point["n"]
        size = torch.finfo(getattr(torch, STORAGE[dtype])).bits // 8
        count = max(2, round((point.get("buffer_bytes") or buffer_bytes) / (n * k * size)))
        pool = torch.empty(count * n * k, dtype=getattr(torch, STORAGE[dtype]), device=device).uniform_(-1, 1)
        self.weights = [pool[i * n * k : (i + 1) * n * k].view(n, k) for i in range(count)]
        self.x = torch.ones(1, k, dtype=pool.dtype, device=device)
        self.flops = matmul_flops(1, k, count * n)
        self.now: list[float] = []

    def time(self) -> None:
        """The rate now [FLOP/s]: the best of CALLS calls after a warm-up, kept in `now`."""
        calls = self.clock.times(lambda: [self.F.linear(self.x, w) for w in self.weights], 1, CALLS, 0.0, float("inf"))
        self.now.append(self.flops / min(calls))

    def drift(self) -> float | None:
        """The profile's rate / the median rate now (None before any timing)."""
        return self.rate / statistics.median(self.now) if self.now else None

    def around(self, runs: list[int]) -> float:
        """The drift of the runs at these positions (0 = the first timed run): the profile's rate / the median of
        the timings just before and just after each (run i lies between timings i and i + 1)."""
        return self.rate / statistics.median(self.now[j] for i in runs for j in (i, i + 1))
