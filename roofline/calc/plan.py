"""`plan`: the smallest or cheapest fleet that serves a workload within latency objectives.

For each device x tensor-parallel degree, every batch from 1 to the memory-limited max (powers of two and the
max) is estimated; among the batches that fit and meet the SLOs, the one needing the fewest devices is kept:
- with a concurrency N, replicas = ceil(N / batch);
- with a request rate R, Little's law gives the requests in flight, R x request latency, and replicas =
  ceil(R x latency / batch) (Little 1961; each replica serves `batch` requests at once).
With `disagg="auto"` each device x tp x pp is also tried as disaggregated pools (roofline.calc.serving.disagg): per
batch, x = ceil(R / one prefill instance's rate) prefill and y = ceil(R x (O - 1) TPOT / batch) decode instances
(Little's law on each pool; with a concurrency N, y = ceil(N / batch) and R = N / request latency); TTFT includes
the KV transfer. Served output tokens/s = R x O (rate) or N x O / latency (concurrency). Cost per hour =
price x devices;
cost per million output tokens = cost per hour / (served tokens/s x 3,600) x 1e6; energy per million output
tokens = board power x devices / served tokens/s x 1e6 [J], an upper bound (boards rarely draw their TDP).
Unknown price or power gives null, never a made-up number.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.calc.checks import count
from roofline.calc.estimate import estimate_at, prepare
from roofline.calc.options import Option, refused_option, served_option
from roofline.calc.prepare import spec_of
from roofline.calc.simulate import scheduler_words
from roofline.calc.sweep import default_batches
from roofline.errors import UsageError
from roofline.specs.records import Hardware, Model

SCHEMA_VERSION = 1


class Plan(NamedTuple):
    inputs: dict[str, Any]
    options: list[Option]  # ranked: the options that meet the SLOs first
    schema_version: int = SCHEMA_VERSION

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options and self.options[0].meets_slo else None

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            "schema_version": self.schema_version,
            "inputs": self.inputs,
            "options": [o._asdict() for o in self.options],
            "best": best._asdict() if best else None,
        }

    def csv_rows(self) -> list[Option]:
        return self.options


def plan(
    model: Model,
    devices: list[Hardware],
    *,
    prompt_tokens: int,
    output_tokens: int,
    concurrency: int | None = None,
    rate: float | None = None,
    tpot_slo: float | None = None,
    ttft_slo: float | None = None,
    tps: tuple[int, ...] = (1, 2, 4, 8),
    pps: tuple[int, ...] = (1,),
    disagg: str | None = None,
    prices: dict[str, float] | None = None,
    queueing: bool = True,
    slo_percentile: float = 0.99,
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> Plan:
    """Rank device x tp options for the workload (see the module docstring); `options` are estimate's knobs;
    `progress(done, total)` before the first simulated option and after each."""
    if (concurrency is None) == (rate is None):
        raise UsageError(
            "give one workload: a concurrency (requests in flight) or a rate (requests per second)", "concurrency"
        )
    if concurrency is not None and not 1 <= concurrency <= 10**9:
        raise UsageError(f"expected 1 to 1e9 requests in flight, got {concurrency}", "concurrency")
    if rate is not None and not 1e-6 <= rate <= 1e9:  # below a request in 11 days, per-token figures overflow
        raise UsageError(f"expected a rate from 1e-6 to 1e9 requests/s, got {rate}", "rate")
    count(output_tokens, "output_tokens")  # at least 1: the plan serves output tokens (their rate, $ per million)
    if disagg not in (None, "auto"):
        raise UsageError(f"plan searches the pools itself: expected auto, got {disagg!r}", "disagg")
    prices = prices or {}
    model = spec_of(model, Model, "model")
    devices = [
        spec_of(h, Hardware, "devices") for h in ([devices] if isinstance(devices, (str, Hardware)) else devices)
    ]
    _preset_flags(options)
    modes = (False, True) if disagg else (False,)
    configs = [(h, tp, pp, split) for h in devices for tp in tps for pp in pps for split in modes]
    simulated = queueing and rate is not None
    queued = [k for k, c in enumerate(configs) if simulated and c[2] == 1 and not c[3]]  # one colocated replica
    found: dict[int, Option] = {}
    if queued:
        from roofline.calc import plan_queue

        work = [
            (
                model,
                configs[k][0],
                configs[k][1],
                prompt_tokens,
                output_tokens,
                rate,
                tpot_slo,
                ttft_slo,
                slo_percentile,
                prices.get(configs[k][0].id, configs[k][0].price_per_hour),
                options,
            )
            for k in queued
        ]
        found.update(zip(queued, plan_queue.options(work, progress)))
    for k, (h, tp, pp, split) in enumerate(configs):
        if k not in found:
            found[k] = _option(
                model,
                h,
                tp,
                pp,
                split,
                prompt_tokens,
                output_tokens,
                concurrency,
                rate,
                tpot_slo,
                ttft_slo,
                prices.get(h.id, h.price_per_hour),
                options,
            )
    found = [found[k] for k in range(len(configs))]
    good = [o for o in found if o.meets_slo]
    # With any price, rank by cost; options without one follow, by devices, and the devices lacking a price are named.
    priced = any(o.cost_per_hour is not None for o in good)
    by_devices = lambda o: (o.devices, o.energy_j_per_million_tokens or math.inf, o.tpot_s)  # noqa: E731
    key = (
        (lambda o: (o.cost_per_hour is None, o.cost_per_million_tokens or 0.0, *by_devices(o)))
        if priced
        else by_devices
    )
    ranked = sorted(good, key=key) + [o for o in found if not o.meets_slo]
    unpriced = sorted({h.id for h in devices if prices.get(h.id, h.price_per_hour) is None}) if priced else []
    engine = options.get("engine") or getattr(options.get("knobs"), "engine", None)
    inputs = {
        "model": model.id,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "concurrency": concurrency,
        "rate_per_s": rate,
        "tpot_slo_s": tpot_slo,
        "ttft_slo_s": ttft_slo,
        "tp": list(tps),
        "pp": list(pps),
        "disagg": disagg,
        "ranked_by": "cost" if priced else "devices",
        "unpriced": unpriced,
        "method": "simulated" if simulated else "little",
        "engine": engine,
        "scheduler": scheduler_words(engine) if simulated else None,
        "slo_percentile": slo_percentile,
    }
    return Plan(inputs, ranked)


def _option(model, h, tp, pp, split, prompt, output, concurrency, rate, tpot_slo, ttft_slo, price, options) -> Option:
    label = "auto" if split else None

    def refused(reason: str) -> Option:
        return refused_option(h, tp, pp, label, reason)

    if (tp > 1 or pp > 1 or split) and h.interconnect_bandwidth is None:
        return refused("no interconnect_bandwidth for tp, pp or disaggregation")
    # The decode pool runs no prefill, so chunking (which prices prefill's interference with decode) leaves it.
    chunking = {"chunk_tokens": None} if split else {}
    from roofline.calc.simulate import preset_knobs

    try:
        setup = prepare(model, h, **options, tp=tp, pp=pp, disagg="1P:1D" if split else None, **chunking)
        preset_knobs(setup)  # a preset's own memory fraction and efficiencies: a flag setting them would be ignored
    except UsageError as e:  # a combination not modelled (a pipeline with chunked prefill): this option only
        return refused(e.detail)
    preset = setup.preset is not None
    if preset and setup.preset_setup is None:
        name = setup.preset.name
        return refused(f"the {name} preset prices one colocated replica (no pipeline stages or disaggregated pools)")
    cache: dict = {}  # the critical batch per context, shared by every batch
    first = estimate_at(setup, 1, prompt, output, cache)
    # the batches the memory holds: the bound's at its memory fraction, or under the preset's own pool rule
    pool = estimate_at(setup.preset_setup, 1, prompt, output) if preset else first
    if not pool.fits:
        return refused(
            f"under the {setup.preset.name} preset's pool: {pool.fits_reason}" if preset else first.fits_reason
        )
    best = None
    for batch in default_batches(pool.max_batch):
        e = first if batch == 1 else estimate_at(setup, batch, prompt, output, cache)
        ttft_s, tpot_s, latency_s = _timing(e, preset, output)
        if (
            not (e.engine is not None if preset else e.fits)  # within the memory rule that prices it
            or (tpot_slo is not None and tpot_s > tpot_slo)
            or (ttft_slo is not None and ttft_s > ttft_slo)
        ):
            continue
        if concurrency is not None and batch > concurrency:
            continue  # a bigger batch than there are requests never fills
        if split:
            d = e.disagg
            load = rate if rate is not None else concurrency / latency_s  # requests/s through the pools
            x = _count(load / d.prefill_requests_per_s)
            no_decode = d.decode_requests_per_s is None  # output 1: the decode pool has no step to run
            y = (
                1
                if no_decode
                else _count(concurrency / batch if concurrency is not None else load / d.decode_requests_per_s)
            )
            replicas, name = x + y, f"{x}P:{y}D"
        else:
            in_flight = concurrency if concurrency is not None else rate * latency_s
            replicas, name = _count(in_flight / batch), None
        candidate = (replicas * tp * pp, tpot_s, replicas, batch, (ttft_s, tpot_s, latency_s), name)
        best = min(best, candidate, key=lambda c: (c[0], c[1])) if best else candidate
    if best is None:
        ttft_s, tpot_s, _ = _timing(first, preset, output)
        why = (
            f"TPOT {tpot_s * 1e3:.3g} ms"
            if tpot_slo is not None and tpot_s > tpot_slo
            else f"TTFT {ttft_s * 1e3:.3g} ms"
        )
        return refused(f"no batch meets the SLOs ({why} at batch 1)")
    devices, _, replicas, batch, (ttft_s, tpot_s, latency_s), name = best
    served = rate * output if rate is not None else concurrency * output / latency_s
    return served_option(h, tp, pp, name, replicas, batch, devices, ttft_s, tpot_s, served, price)


def _preset_flags(options: dict) -> None:
    """An engine preset sizes each replica at the memory fraction and efficiencies it was fitted with: one of them set
    apart from its default would be ignored, so it is refused before the search, for an engine that is a preset on
    every device (llama.cpp's is one on GPUs only, eager and measured engines never: preset_knobs refuses those
    option by option)."""
    from roofline.calc.inputs import is_preset
    from roofline.calc.knobs import knobs_of
    from roofline.calc.simulate import set_apart

    knobs = knobs_of(options.get("knobs"), {n: v for n, v in options.items() if n != "knobs"})
    engine = knobs.engine
    if engine is None or engine.startswith("llamacpp") or not is_preset(engine):
        return
    apart = set_apart(knobs)
    if apart:
        raise UsageError(f"the {engine} preset sizes each replica at its own (as fitted): leave this out", apart[0])


def _timing(e, preset: bool, output: int) -> tuple[float, float, float]:
    """(TTFT, TPOT, a request's latency) of an estimated batch: an engine preset's prediction where one is asked for
    (inf where its memory rule does not hold the batch), else the estimate's own."""
    if not preset:
        return e.ttft_s, e.tpot_s, e.request_latency_s
    if e.engine is None:
        return math.inf, math.inf, math.inf
    return e.engine.ttft_s, e.engine.tpot_s, e.engine.ttft_s + max(output - 1, 0) * e.engine.tpot_s


def _count(share: float) -> int:
    """Instances needed for `share` of one instance's load: at least 1, and rounding noise (3.0000000001) adds none."""
    return max(1, math.ceil(share - 1e-9))
