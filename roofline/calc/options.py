"""A fleet plan's option (one device at one layout) and the two ways one is built: refused with its reason, or
serving its rate with what that costs. Shared by roofline.calc.plan (static batches) and roofline.calc.plan_queue
(simulated replicas)."""

from typing import Any, NamedTuple


class Option(NamedTuple):
    hardware: str
    tp: int
    pp: int
    disagg: str | None  # "xP:yD" for disaggregated pools, None when prefill and decode share the replicas
    replicas: int | None
    batch: int | None
    devices: int | None
    ttft_s: float | None
    tpot_s: float | None
    meets_slo: bool
    output_tokens_per_s: float | None  # served by the whole fleet
    goodput_per_device: float | None
    cost_per_hour: float | None
    cost_per_million_tokens: float | None
    energy_j_per_million_tokens: float | None
    reason: str
    method: str = "little"  # "simulated" (a replica's capacity found by simulating it) or "little" (static batch)
    utilization: float | None = None  # a replica's rate over its saturation rate (simulated)
    ttft_p99_s: float | None = None  # at the SLO percentile, at each replica's share of the rate (simulated)
    tpot_p99_s: float | None = None


def refused_option(h, tp: int, pp: int, disagg: str | None, reason: str, **extra: Any) -> Option:
    """An option that meets no SLO, with the reason."""
    empty = dict.fromkeys(("replicas", "batch", "devices", "ttft_s", "tpot_s", "output_tokens_per_s"))
    prices = dict.fromkeys(("goodput_per_device", "cost_per_hour", "cost_per_million_tokens"))
    return Option(
        hardware=h.id, tp=tp, pp=pp, disagg=disagg, meets_slo=False, reason=reason,
        energy_j_per_million_tokens=None, **empty, **prices, **extra,
    )  # fmt: skip


MEETS = "meets the SLOs"  # a served option's reason, unless it carries a caveat


def served_option(
    h, tp, pp, disagg, replicas, batch, devices, ttft_s, tpot_s, served, price, caveat: str | None = None, **extra
) -> Option:
    """An option that meets the SLOs, serving `served` output tokens/s on `devices`: its goodput per device, its
    cost (at `price` per device-hour) and energy (at the datasheet's board power) per million tokens; `caveat`, a
    doubt on its figures, follows MEETS in its reason."""
    cost = price * devices if price is not None else None
    return Option(
        hardware=h.id,
        tp=tp,
        pp=pp,
        disagg=disagg,
        replicas=replicas,
        batch=batch,
        devices=devices,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        meets_slo=True,
        output_tokens_per_s=served,
        goodput_per_device=served / devices,
        cost_per_hour=cost,
        cost_per_million_tokens=cost / (served * 3600) * 1e6 if cost is not None else None,
        energy_j_per_million_tokens=h.power * devices / served * 1e6 if h.power is not None else None,
        reason=f"{MEETS}; {caveat}" if caveat else MEETS,
        **extra,
    )
