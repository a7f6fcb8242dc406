"""Disaggregated prefill/decode (DistServe, Zhong et al. 2024; Splitwise, Patel et al. 2024): x prefill and y
decode instances of tp x pp devices. TTFT = prefill + the KV transfer of the batch's prompts (each device sends its
share); prefill pool rate = x B / prefill time, decode pool rate = y B / ((O - 1) TPOT); the fleet serves the
minimum. With one output token there is no decode step: the decode pool never limits (its rate is null).
"""

import re
from typing import Any, NamedTuple

from roofline.calc.knobs import Knobs
from roofline.errors import UsageError
from roofline.units import si


class Disagg(NamedTuple):
    prefill_instances: int
    decode_instances: int
    prefill_devices: int
    decode_devices: int
    kv_transfer_s: float  # the batch's prompt KV, prefill pool -> decode pool
    prefill_requests_per_s: float  # what the prefill pool can serve
    decode_requests_per_s: float | None  # None: no decode step (output 1), the decode pool never limits
    requests_per_s: float  # the fleet: the slower pool
    bottleneck: str  # "prefill" or "decode"
    ttft_s: float  # prefill + transfer


def parse(text: str) -> tuple[int, int]:
    """'1P:3D' -> (1, 3): prefill and decode instances."""
    match = re.fullmatch(r"\s*(\d{1,6})\s*[pP]\s*:\s*(\d{1,6})\s*[dD]\s*", text) if isinstance(text, str) else None
    if not match or not int(match[1]) or not int(match[2]):
        raise UsageError(f"expected prefill:decode instances like 1P:3D, got {text!r}", "disagg")
    return int(match[1]), int(match[2])


def check(k: Knobs) -> None:
    """The pools' own form and the combination not modelled, once per setup."""
    if k.disagg is None:
        return
    parse(k.disagg)
    if k.chunk_tokens is not None:
        raise UsageError(
            "disaggregated pools have no prefill in the decode steps: chunked prefill does not apply", "disagg"
        )


def combine(
    prefill_instances: int,
    decode_instances: int,
    devices_per_instance: int,
    batch: int,
    prefill_s: float,
    transfer_s: float,
    decode_s: float,
) -> Disagg:
    """`decode_s`: a batch's decode time, (O - 1) x TPOT (0: no decode step, the decode pool never limits)."""
    x, y = prefill_instances, decode_instances
    prefill_rate = x * batch / prefill_s
    decode_rate = y * batch / decode_s if decode_s > 0 else None
    rate = prefill_rate if decode_rate is None else min(prefill_rate, decode_rate)
    return Disagg(
        x,
        y,
        x * devices_per_instance,
        y * devices_per_instance,
        transfer_s,
        prefill_rate,
        decode_rate,
        rate,
        "prefill" if rate == prefill_rate else "decode",
        prefill_s + transfer_s,
    )


def price(p: Any, B: int, P: int, colocated_ttft: float, latency_s: float, notes: list[str]) -> Disagg | None:
    """The pools' rates and TTFT for a batch whose colocated prefill takes `colocated_ttft` and request `latency_s`."""
    if p.pools is None:
        return None
    k, shape = p.knobs, p.shape
    x, y, (link, latency) = p.pools
    group = k.tp * k.pp
    transfer = B * shape.kv_cached(P) * shape.kv_share / k.pp / link + latency  # every device sends its share at once
    decode_time = latency_s - colocated_ttft  # (O - 1) x TPOT: the decode pool's time per batch
    result = combine(x, y, group, B, colocated_ttft, transfer, decode_time)
    notes.append(
        f"disagg {x}P:{y}D: {x * group} prefill + {y * group} decode devices; each request's KV "
        f"({si(shape.kv_cached(P), 'B')}) moves once to the decode pool; fleet rate = the slower pool's "
        f"({result.bottleneck}); the decode pool runs no prefill"
    )
    return result
