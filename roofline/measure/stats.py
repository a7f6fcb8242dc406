"""Statistics of repeated timings (pure Python): interleaved schedules, percentiles, a bootstrap interval of
the median, and the verdict of a predicted / measured ratio against a tolerance.

Shared VMs swing 30-45% between runs, so one run cannot show a prediction within +-15%. validate runs R
rounds, interleaving the batches (each round in a rotated order, so drift hits every batch alike), and
reports the median step time with a 90% interval from a two-level bootstrap: resample the rounds, then the
steps within each drawn round (Davison & Hinkley 1997, sec. 3.8: clustered data), so that round-to-round
drift widens the interval as it should.
"""

from __future__ import annotations

import random
import statistics

from roofline.calc.formulas import percentile

LEVEL = 0.90  # the interval's coverage
RESAMPLES = 1000


def schedule(batches: list[int], rounds: int) -> list[tuple[int, int]]:
    """(round, batch) in run order: every batch once per round, each round's order rotated by one."""
    order = []
    for r in range(rounds):
        shift = r % len(batches)
        order += [(r, b) for b in batches[shift:] + batches[:shift]]
    return order


def median_interval(
    rounds: list[list[float]], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """A `level` bootstrap interval of the median of all samples, resampling rounds, then samples within them."""
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        drawn = [rounds[rng.randrange(len(rounds))] for _ in rounds]
        pooled = [s[rng.randrange(len(s))] for s in drawn for _ in s]
        medians.append(statistics.median(pooled))
    tail = (1 - level) / 2
    return percentile(medians, tail), percentile(medians, 1 - tail)


def verdict(low: float, high: float, tolerance: float) -> str:
    """'within' when the ratio's whole interval lies inside 1 +- tolerance, 'outside' when it lies wholly
    beyond one bound, else 'inconclusive' (the interval straddles a bound)."""
    if 1 - tolerance <= low and high <= 1 + tolerance:
        return "within"
    if high < 1 - tolerance or low > 1 + tolerance:
        return "outside"
    return "inconclusive"


def both(first: str, second: str) -> str:
    """Two verdicts together: 'outside' if either is, 'within' only if both are, else 'inconclusive'."""
    if "outside" in (first, second):
        return "outside"
    return "within" if first == second == "within" else "inconclusive"
