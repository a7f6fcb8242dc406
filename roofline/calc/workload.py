"""A serving workload: requests with a prompt length, an output length and (open loop) an arrival time.

Arrivals (open loop at rate R): poisson (exponential gaps of mean 1/R), gamma (gaps with mean 1/R and coefficient
of variation CV: shape 1/CV^2; CV 1 is Poisson, CV > 1 bursty) or constant (every 1/R). A closed loop of N clients
has no arrival times: each client sends its next request when its last one finishes. Lengths are the means given,
drawn per request from fixed (default), exponential, uniform (on [1, 2 x mean - 1]) or lognormal:CV (the mean kept,
sigma^2 = ln(1 + CV^2)); each at least 1 token. A trace gives every request's lengths and, optionally, its arrival.
The same seed gives the same requests (Python's Mersenne Twister).
"""

import math
import random
import re
from typing import NamedTuple

from roofline.errors import UsageError
from roofline.specs.trace import MAX_REQUESTS  # noqa: F401 (the cap on requests, shared with traces)

ARRIVALS = ("poisson", "gamma", "constant")


class Request(NamedTuple):
    arrival_s: float | None  # None in a closed loop: sent when its client's last request finishes
    prompt_tokens: int
    output_tokens: int


class Lengths(NamedTuple):
    """A length distribution: 'fixed', 'exponential', 'uniform' or 'lognormal' with its CV, and its mean."""

    kind: str
    mean: float
    cv: float = 0.0

    def draw(self, rng: random.Random) -> int:
        m = self.mean
        if self.kind == "fixed":
            value = m
        elif self.kind == "exponential":
            value = rng.expovariate(1 / m)
        elif self.kind == "uniform":
            value = rng.uniform(1, 2 * m - 1)
        else:  # lognormal with mean m and coefficient of variation cv
            sigma2 = math.log(1 + self.cv**2)
            value = rng.lognormvariate(math.log(m) - sigma2 / 2, math.sqrt(sigma2))
        return max(1, round(value))


def lengths(text: str | None, mean: int, flag: str) -> Lengths:
    """'fixed' (default), 'exponential', 'uniform' or 'lognormal:CV' around `mean` tokens."""
    if text is None or text == "fixed":
        return Lengths("fixed", mean)
    if text in ("exponential", "uniform"):
        return Lengths(text, mean)
    match = re.fullmatch(r"lognormal:([0-9.]+)", text)
    if match and _positive(match[1]):
        return Lengths("lognormal", mean, float(match[1]))
    raise UsageError(f"expected fixed, exponential, uniform or lognormal:CV (e.g. lognormal:1.5), got {text!r}", flag)


def _positive(text: str) -> bool:
    try:
        return 0 < float(text) < float("inf")
    except ValueError:
        return False


def open_loop(
    rate: float, arrival: str, cv: float, count: int, prompt: Lengths, output: Lengths, seed: int
) -> list[Request]:
    """`count` requests arriving at `rate` per second by the `arrival` process."""
    if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 < rate < float("inf")):
        raise UsageError(f"expected a positive, finite rate in requests per second, got {rate!r}", "rate")
    if arrival not in ARRIVALS:
        raise UsageError(f"expected one of {', '.join(ARRIVALS)}, got {arrival!r}", "arrival")
    if not (isinstance(cv, (int, float)) and 0 < cv < 1e3):
        raise UsageError(f"expected a coefficient of variation above 0, got {cv!r}", "cv")
    rng = random.Random(seed)
    shape = 1 / cv**2
    t, out = 0.0, []
    for _ in range(count):
        out.append(Request(t, prompt.draw(rng), output.draw(rng)))
        if arrival == "poisson":
            t += rng.expovariate(rate)
        elif arrival == "gamma":
            t += rng.gammavariate(shape, 1 / (rate * shape))
        else:
            t += 1 / rate
    return out


def closed_loop(count: int, prompt: Lengths, output: Lengths, seed: int) -> list[Request]:
    """`count` requests without arrival times: clients send them one after another."""
    rng = random.Random(seed)
    return [Request(None, prompt.draw(rng), output.draw(rng)) for _ in range(count)]
