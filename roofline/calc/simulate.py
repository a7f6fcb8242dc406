"""`simulate`: latency percentiles of a continuously batched replica under a workload (roofline.calc.replica runs
it; roofline.calc.workload draws the requests).

Per request (the first `warmup` left out): TTFT = first token - arrival; TPOT = (finish - first token) / (O - 1)
(requests of one output token have none); E2E = finish - arrival; queue = admitted - arrival; ITL = every gap
between a request's tokens. Each is reported as mean, p50, p90, p95, p99 and max. Throughput counts what is
produced while arrivals last, from the first measured arrival to the last arrival (a closed loop: to the last
finish), each request's tokens for the share of its decoding inside that window; the running batch and the KV
cache's use are time averages over the same window. Goodput counts the requests that meet every SLO given;
`slo_met` says whether the SLO percentile (default p99) of each metric does. The replica's capacity
(`max_stable_rate_per_s`) is the completion rate of a closed loop that keeps it full (max_num_seqs clients, or as
many as its KV cache holds at the mean length, and with sliding-window layers as many as leave room for a prompt
chunk's step too, the faster; the same lengths, between its 25th and 75th percentile finishes; the clients out of
step); a run is `saturated` when arrivals outpace that (rate >= 0.98 x capacity) or when its queue
keeps growing (its last quarter waits over 4x its first quarter, and over a second; or over 2x after a preemption
with the served rate under 97% of the arrivals: with a vLLM-style scheduler a burst that fills the KV cache sets off
preemptions whose recompute serves fewer requests a second than a full replica, so a queue can start growing below
the capacity).
"""

import math
import random
import time
from typing import Any, NamedTuple

from roofline.calc import formulas as f
from roofline.calc.checks import count
from roofline.calc.estimate import plain, uncalibrated
from roofline.calc.knobs import OUTPUT_TOKENS, PROMPT_TOKENS, Knobs
from roofline.calc.prepare import Prepared, prepare
from roofline.calc.replica import POLICIES, Replica, Scheduler, engine_limits, full_share, held_tokens, padded_layers
from roofline.calc.stepmodel import StepModel
from roofline.calc.workload import MAX_REQUESTS, Request, closed_loop, lengths, open_loop
from roofline.errors import UsageError

SCHEMA_VERSION = 1
QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99))
METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s")
CAPACITY_REQUESTS = 400  # at least, in the closed loop that measures the capacity (4 per client)


class Simulation(NamedTuple):
    """The result of `simulate`; `to_dict()` is the stable JSON of `roofline simulate --json`."""

    inputs: dict[str, Any]
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    itl_s: dict[str, float]
    e2e_s: dict[str, float]
    queue_s: dict[str, float]
    output_tokens_per_s: float
    requests_per_s: float
    goodput_requests_per_s: float
    slo_attainment: float | None  # share of requests meeting every SLO (None without one)
    slo_met: dict[str, bool] | None  # each SLO at its percentile
    saturated: bool
    max_stable_rate_per_s: float | None
    preemptions: int
    batch: dict[str, float]  # running requests: time-weighted mean, max
    kv_utilization: dict[str, float]  # share of the KV blocks held: time-weighted mean, max
    requests: int  # measured (warm-up left out)
    steps: int
    simulated_s: float
    wall_s: float
    notes: list[str]
    per_request: list[dict[str, float]]  # every request's times (for --per-request)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = plain(self._asdict())
        out.pop("per_request")
        return out

    def csv_rows(self) -> list[dict[str, Any]]:
        return [self.to_dict()]


def summary(values: list[float]) -> dict[str, float]:
    """mean, p50, p90, p95, p99 and max of `values` (all null when there are none)."""
    if not values:
        return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None}
    ordered = sorted(values)
    return {
        "mean": sum(ordered) / len(ordered),
        **{k: f.percentile(ordered, q) for k, q in QUANTILES},
        "max": ordered[-1],
    }


def weighted_summary(pairs: list[tuple[float, float]]) -> dict[str, float]:
    if not pairs:
        return summary([])
    total = sum(w for _, w in pairs)
    values = f.weighted_percentiles(pairs, [q for _, q in QUANTILES])
    return {
        "mean": sum(v * w for v, w in pairs) / total,
        **{k: v for (k, _), v in zip(QUANTILES, values)},
        "max": max(v for v, _ in pairs),
    }


def request_overheads(preset: Any, count: int, seed: int = 0) -> list[float]:
    """Each request's time outside the engine loop [s] (HTTP, tokenizer, detokenizer: on its TTFT and E2E), by an
    engine preset: its request_overhead_s for every request, or with request_overhead_cv > 0 gamma draws of that
    mean and coefficient of variation (shape 1 / cv^2, scale mean x cv^2), the same for the same run and seed, on a
    stream apart from the workload's arrivals and lengths; none without a preset. The spread is what the published
    runs show at low load, where queueing cannot explain it: vLLM's TTFT p99 1.2-2.2x its p50 at fixed-rate arrivals
    and fixed lengths (docs/reality.md)."""
    mean = preset.request_overhead_s if preset is not None else 0.0
    cv = preset.request_overhead_cv if preset is not None else 0.0
    if mean <= 0 or cv < 1e-6:  # a CV this small is none (and 1 / cv^2 would overflow the gamma's shape)
        return [mean] * count
    rng = random.Random(f"request overhead {seed}")  # not the workload's stream (Random(seed)): independent draws
    return [rng.gammavariate(1 / cv**2, mean * cv**2) for _ in range(count)]


def replica_setup(p: Prepared, kv_unified: bool = False, policy: str = "vllm") -> tuple[StepModel, int, list[str]]:
    """The step model (an engine preset's efficiencies and step cost when one is asked for) and the KV budget in
    tokens of one replica, with what was assumed; `kv_unified`: llama.cpp's slots share one KV stream; `policy`: the
    scheduler's (vLLM's pads a windowed model's layer groups)."""
    notes = []
    setup, overhead = p, 0.0
    if p.preset is not None and p.preset_setup is not None:
        from roofline.calc.presets import step_cost

        setup, overhead = p.preset_setup, step_cost(p.preset, p.model, p.hardware)
        extra = p.preset.request_overhead_s
        notes.append(
            f"engine {p.preset.name}: the preset's efficiencies, memory fraction and +{overhead * 1e3:.2g} ms a step"
            + (f", +{extra * 1e3:.2g} ms a request outside the engine (TTFT, E2E)" if extra else "")
            + (f", spread {p.preset.request_overhead_cv:.2g} (CV)" if extra and p.preset.request_overhead_cv else "")
        )
    shape, k = setup.shape, setup.knobs
    budget = k.memory_fraction * setup.hardware.memory_capacity - shape.weights
    if setup.draft is not None:
        budget -= setup.draft.weights
    per_token = shape.kv_per_token * shape.kv_share / k.pp  # the replica counts a windowed layer's share by its window
    if budget <= 0:
        whose = f"{k.memory_fraction:.3g}" if setup is p else f"the {p.preset.name} preset's {k.memory_fraction:.3g}"
        raise UsageError(
            f"the weights ({shape.weights / 1e9:.3g} GB per device) leave no KV budget in {whose} x memory of "
            f"{setup.hardware.id}: split them over more devices (--tp), or store them in fewer bits",
            "memory_fraction" if setup is p else "engine",
        )
    llama = _llamacpp_step(p, notes, kv_unified)
    measured = None if llama else _measured_engine(p, notes)
    model = StepModel(setup, overhead, measured, llama)
    if model.window and model.sliding and model.full and policy == "vllm" and _vllm_allocator(p):
        full, sliding = padded_layers(model.full, model.sliding)
        if (full, sliding) != (model.full, model.sliding):
            per_token *= (full + sliding) / (model.full + model.sliding)
            model.budget_full_share = full / (full + sliding)
            notes.append(
                f"vLLM's hybrid KV cache pads {model.sliding} sliding-window and {model.full} full-attention layers "
                f"to groups of equal size: the budget holds {full + sliding} layers' KV a token ({sliding} and {full})"
            )
    return model, int(budget / per_token) * shape.dp, notes


def _vllm_allocator(p: Prepared) -> bool:
    """Whether the replica's KV cache is vLLM V1's (no engine preset, or a vLLM one; not llama.cpp's slots, measured
    or preset): its hybrid allocator pads."""
    if (p.inputs.engine or "").startswith("llamacpp"):
        return False
    name = getattr(p.preset, "name", None)
    return name is None or name.startswith("vllm")


def _llamacpp_step(p: Prepared, notes: list[str], kv_unified: bool):
    """A step as llama.cpp runs it (roofline.calc.llamacpp.Step), when the profile measured llama.cpp: cut into
    ubatches by slot runs (a KV stream per slot), or by 512 tokens when the slots share one stream."""
    from roofline.calc import llamacpp
    from roofline.calc.inputs import engine_costs

    profile = engine_costs(p.hardware).get("llamacpp") if p.inputs.engine == "llamacpp" else None
    a = p.model.arch
    if not profile or a is None:
        if not kv_unified and p.preset is not None and p.preset.name.startswith("llamacpp"):  # the CUDA/Metal preset
            notes.append(
                f"engine {p.preset.name}: a KV stream per slot (kv_unified off) is priced as one stream: the preset's "
                "steps are whole; a profile from `roofline measure --engine llamacpp` cuts them as the server does"
            )
        return None
    cannot = uncalibrated(p.model, p.hardware, p.inputs)  # a setup the profile does not price, as estimate's
    if cannot:
        notes += cannot
        return None
    weights = llamacpp.weights_of(p.model, p.shape, p.inputs.weight_dtype)
    notes.append(
        "engine llamacpp: each step priced by the profile's measured llama.cpp costs, in the ubatches llama-server "
        + (
            "cuts it into with its slots sharing one KV stream (-np auto or -kvu: 512 tokens each)"
            if kv_unified
            else "given --parallel N cuts it into (a KV stream per slot: a run of consecutive slots each, at most "
            "512 tokens)"
        )
    )
    server = (profile.get("server") or {}).get("step_s")
    notes.append(
        f"engine llamacpp: plus llama-server's own {server * 1e3:.2f} ms a step beyond llama-bench's (the profile's "
        "server probe: sampling and streaming the tokens)"
        if server is not None
        else "engine llamacpp: the profile has no server probe (measured before it, on a GPU build, without httpx, or "
        "the probe failed): steps priced as llama-bench's, without llama-server's own cost a step (0.6-1.0 ms on a "
        "2-core VM)"
    )
    heads = llamacpp.heads_of(a.num_heads, p.shape)
    return llamacpp.Step(profile, weights, heads, a.hidden_size, streams=not kv_unified, server_s=server or 0.0)


PRESET_KNOBS = ("memory_fraction", "compute_efficiency", "bandwidth_efficiency")


def set_apart(k: Knobs) -> list[str]:
    """The knobs an engine preset sets itself (PRESET_KNOBS) that `k` sets apart from their defaults."""
    return [name for name in PRESET_KNOBS if getattr(k, name) != getattr(Knobs(), name)]


def preset_knobs(p: Prepared) -> dict[str, float]:
    """The memory fraction and efficiencies the replica runs at: an engine preset's own (it was fitted with them),
    else the setup's. One set apart from its default beside a preset would be ignored, so it is refused."""
    if p.preset is None or p.preset_setup is None:
        return {name: getattr(p.inputs, name) for name in PRESET_KNOBS}
    apart = set_apart(p.knobs)
    if apart:
        own = getattr(p.preset_setup.inputs, apart[0])
        raise UsageError(
            f"the {p.inputs.engine} preset runs at its own ({own:.3g} on {p.hardware.id}, as fitted): leave this "
            "out, or --engine out to simulate at yours",
            apart[0],
        )
    return {name: getattr(p.preset_setup.inputs, name) for name in PRESET_KNOBS}


def _measured_engine(p: Prepared, notes: list[str]):
    """batch -> seconds: the fixed cost per step a measured profile holds for the engine (eager by default), or
    None (no profile, a preset, a params-only model). The profile's matmul rate and bandwidth are F and W already."""
    from roofline.calc.calibrate import engine_cost
    from roofline.calc.inputs import engine_costs_for

    name = p.inputs.engine or "eager"
    if name == "llamacpp":  # llama.cpp's profile prices whole steps (_llamacpp_step), never a fixed cost beside them
        return None
    measured = p.preset is None and p.hardware.measured
    costs = engine_costs_for(p.hardware, name, p.inputs.weight_dtype) if measured else None
    arch = p.model.arch
    if not costs or arch is None:
        return None
    from roofline.calc.estimate import costs_dtype

    notes.append(f"engine {name}: the profile's measured fixed cost per step (per step + per layer, by batch)")
    notes += costs_dtype(p.hardware, p.inputs)
    return lambda batch: engine_cost(costs, arch, batch)


def run_simulation(
    p: Prepared,
    requests: list[Request],
    *,
    concurrency: int | None = None,
    warmup: int = 0,
    scheduler: Scheduler | None = None,
    ttft_slo: float | None = None,
    tpot_slo: float | None = None,
    slo_percentile: float = 0.99,
    capacity: bool = True,
    inputs: dict | None = None,
    seed: int = 0,
) -> Simulation:
    """Simulate `requests` on one replica of the prepared setup `p` (see the module docstring); `seed` is the
    workload's, from which the requests' costs outside the engine are drawn on a stream of their own."""
    started = time.perf_counter()
    count(len(requests), "requests", 1, MAX_REQUESTS, "a number of requests")
    count(warmup, "warmup", 0, len(requests) - 1, "a number of warm-up requests")
    if concurrency is not None:
        count(concurrency, "concurrency", 1, MAX_REQUESTS, "a number of clients")
    sched = engine_scheduler(p, scheduler)
    check_scheduler(sched)
    preset_knobs(p)
    if p.knobs.pp > 1 or p.knobs.disagg or p.draft is not None:
        raise UsageError(
            "simulate models one colocated replica without pipeline stages, pools or drafting (estimate prices those)",
            "pp" if p.knobs.pp > 1 else "disagg" if p.knobs.disagg else "draft",
        )
    model, kv_tokens, notes = replica_setup(p, bool(sched.kv_unified), sched.policy)
    limit = p.model.max_context
    for r in requests:
        if limit is not None and r.prompt_tokens + r.output_tokens > limit:
            raise UsageError(
                f"a request of {r.prompt_tokens} + {r.output_tokens} tokens exceeds {p.model.id}'s context "
                f"of {limit:,}: shorten its prompt or output (--prompt, --output or their distributions, or the trace)"
            )
    from roofline.calc.serving import prefix

    hits = p.knobs.cached_tokens is not None or p.knobs.prefix_hit_rate is not None
    cached = (lambda prompt: prefix.cached_tokens(p.knobs, prompt)) if hits else None
    if hits:
        notes.append(
            "prefix caching: each request's cached prompt tokens are read, not computed; their KV counts per "
            "request (no sharing assumed)"
        )
    result = Replica(model, requests, sched, kv_tokens, concurrency, cached).run()
    measured = range(warmup, len(requests))
    preset = p.preset if p.preset is not None and p.preset_setup is not None else None
    extra = request_overheads(preset, len(requests), seed)
    ttft = [result.first[i] - result.arrival[i] + extra[i] for i in measured]
    tpot = [
        (result.finish[i] - result.first[i]) / (requests[i].output_tokens - 1)
        for i in measured
        if requests[i].output_tokens > 1
    ]
    e2e = [result.finish[i] - result.arrival[i] + extra[i] for i in measured]
    queue = [result.admitted[i] - result.arrival[i] for i in measured]
    window = _window(result, measured, concurrency)
    rate, tokens_per_s = _throughput(result, requests, window)
    batch, kv = _occupancy(result.spans, window)
    good, attainment, met = _slos(ttft, tpot, requests, measured, ttft_slo, tpot_slo, slo_percentile)
    offered = _offered(requests, concurrency)
    stable = _capacity(model, requests, sched, kv_tokens, cached) if capacity and concurrency is None else None
    over = bool(offered and stable and offered >= 0.98 * stable)
    behind = bool(offered) and result.preemptions > 0 and rate < 0.97 * offered  # served trails the arrivals
    growing = _growing(queue, behind)
    saturated = over or growing
    if over:
        notes.append(
            "saturated: requests arrive faster than the replica serves them, so the queue (and every latency) "
            "grows with the run's length"
        )
    elif growing and not result.preemptions:
        notes.append(
            "saturated: the queue kept growing over the run (its last quarter of requests waited over 4x its first "
            "and over a second) below the capacity, as a queue near it can over a finite run; more --requests tell "
            "whether it settles"
        )
    elif growing:
        notes.append(
            "saturated below the capacity: a burst filled the KV cache, and recomputing the preempted requests "
            "serves fewer a second than arrive, so the queue (and every latency) grows with the run's length"
        )
    spread = max(result.arrival) > window[0]  # arrivals over time, not all at once (the window's fallback)
    span = window[1] - window[0]
    if offered and spread and not saturated and e2e and span < 2 * f.percentile(sorted(e2e), 0.99):
        notes.append(
            f"short run: its arrivals span {span:.3g} s, under twice its p99 E2E, so its throughput "
            "and running batch include the ramp to a steady state; more --requests measure the steady state"
        )
    elif offered and spread and saturated and span < 2 * _service_p90(result, measured):
        notes.append(
            f"short run: its arrivals span {span:.3g} s, under twice the p90 of a request's time in service "
            "(admission to finish), so its throughput and running batch include the ramp to a full replica; more "
            "--requests measure the rate a saturated replica serves"
        )
    if p.preset is not None and p.preset_setup is not None:
        notes += _preset_error(p, batch["mean"], _at_once(result))
    per_request = [
        {
            "request": i,
            "prompt_tokens": requests[i].prompt_tokens,
            "output_tokens": requests[i].output_tokens,
            "arrival_s": result.arrival[i],
            "admitted_s": result.admitted[i],
            "first_token_s": result.first[i] + extra[i],  # as the client sees them: a preset's request cost on both
            "finish_s": result.finish[i] + extra[i],
            "request_overhead_s": extra[i],
        }
        for i in range(len(requests))
    ]
    return Simulation(
        inputs=inputs or {},
        ttft_s=summary(ttft),
        tpot_s=summary(tpot),
        itl_s=weighted_summary(result.itl),
        e2e_s=summary(e2e),
        queue_s=summary(queue),
        output_tokens_per_s=tokens_per_s,
        requests_per_s=rate,
        goodput_requests_per_s=rate * (good / len(measured)),
        slo_attainment=attainment,
        slo_met=met,
        saturated=saturated,
        max_stable_rate_per_s=stable,
        preemptions=result.preemptions,
        batch=batch,
        kv_utilization=kv,
        requests=len(measured),
        steps=result.steps,
        simulated_s=result.end_s,
        wall_s=time.perf_counter() - started,
        notes=[*p.notes, *notes],
        per_request=per_request,
    )


def _at_once(result) -> bool:
    """Whether every request was sent at one moment and some of them waited: admitted after it arrived, or preempted
    back into the queue (`vllm bench serve` at rate inf; a closed loop of at least as many clients as requests; a
    trace whose arrivals are all one time). An offline batch that all runs at once did not wait."""
    first = result.arrival[0]
    if any(a != first for a in result.arrival):
        return False
    return result.preemptions > 0 or any(ad > a for ad, a in zip(result.admitted, result.arrival))


def _preset_error(p: Prepared, batch: float, everyone: bool) -> list[str]:
    """The note on the preset's typical error at this mean running batch and load (`everyone`: every request sent at
    once, some waiting): its held-out error where its runs went, else why it does not apply: the load
    (presets.at_once), the batch (presets.beyond_runs), or both."""
    from roofline.calc.presets import at_once, beyond_runs, error_summary

    caveats = [c for c in (at_once(p.preset) if everyone else None, beyond_runs(p.preset, batch)) if c]
    if caveats:
        return caveats
    typical = error_summary(p.preset, p.hardware)
    return [f"engine {p.preset.name}: typical error {typical}"] if typical else []


# llama-server left to its defaults: -np auto, 4 slots sharing one KV stream (kv_unified; tools/server/server.cpp
# "n_parallel is set to auto, using n_parallel = 4 and kv_unified = true"), a batch of at most n_batch 2048 tokens
# (common/common.h)
LLAMA_SERVER_SLOTS, LLAMA_SERVER_BATCH = 4, 2048


SCHEDULER_WORDS = {"vllm": "vLLM V1's scheduler", "trtllm": "TensorRT-LLM's no-evict scheduler"}  # presets' policies


def scheduler_words(engine: str | None) -> dict[str, Any]:
    """What engine_scheduler runs a replica of `engine` under (plan's JSON inputs.scheduler and header): its policy,
    the one its preset names (engines/NAME.yaml `scheduler:`) or vLLM's, and in words (llama.cpp's: the server's
    slots, under the vllm policy with llama-server's limits); with vLLM's, its admission rule (reserve_full_isl)."""
    from roofline.specs import presets

    policy = presets.load(engine).scheduler if engine in presets.names() else "vllm"
    llama = (engine or "").startswith("llamacpp")
    words = {"policy": policy, "description": "llama-server's slots" if llama else SCHEDULER_WORDS[policy]}
    if policy == "vllm" and not llama:
        words["reserve_full_isl"] = full_isl_default(engine)
    return words


def engine_scheduler(p: Prepared, scheduler: Scheduler | None) -> Scheduler:
    """`scheduler` with its policy the engine preset's where it names none (else vllm), and each limit it leaves
    None that policy's engine default on the device (replica.engine_limits), the default sequences at most the
    step's tokens. For llama.cpp the defaults are llama-server's: 4 slots and 2048 tokens a step, the slots sharing
    one KV stream unless a slot count is given (as `--parallel N` turns kv_unified off) or kv_unified says."""
    given = scheduler or Scheduler(None)
    llama = (p.inputs.engine or "").startswith("llamacpp")  # its CUDA and Metal presets by name too
    if given.kv_unified is not None and not llama:
        raise UsageError("--kv-unified: llama-server's KV layout, only with --engine llamacpp", "kv_unified")
    policy = given.policy or getattr(p.preset, "scheduler", None) or "vllm"
    vllm = policy == "vllm" and not llama
    if given.reserve_full_isl is not None and not vllm:
        raise UsageError(
            "--scheduler-reserve-full-isl: vLLM's admission rule, only with its scheduler (--scheduler vllm)",
            "reserve_full_isl",
        )
    defaults = engine_limits(policy, p.hardware)
    if llama:
        defaults = (LLAMA_SERVER_SLOTS, LLAMA_SERVER_BATCH, defaults[2])
    seqs, tokens, block = (d if v is None else v for v, d in zip(given[1:4], defaults))
    if given.max_num_seqs is None:  # a default never outnumbers the step's tokens the user set (2048 > 1024)
        seqs = min(seqs, tokens)
    unified = (given.max_num_seqs is None if given.kv_unified is None else given.kv_unified) if llama else None
    default = full_isl_default(getattr(p.preset, "name", None))
    full = (default if given.reserve_full_isl is None else given.reserve_full_isl) if vllm else None
    return Scheduler(policy, seqs, tokens, block, unified, full)


FIRST_CHUNK_BUILDS = ("vllm-0.10", "vllm-legacy")  # presets of builds before 0.19, which admit on the first chunk


def full_isl_default(preset: str | None) -> bool:
    """Whether vLLM's scheduler admits on the whole prompt by default under `preset` (its name; None: no preset): yes
    as vLLM 0.19 and later (SchedulerConfig.scheduler_reserve_full_isl = True; 0.18 had no such rule) and SGLang (a
    request joins a prefill batch only if its whole input fits, PrefillAdder), no for the presets of older builds."""
    return preset not in FIRST_CHUNK_BUILDS


def scheduler_inputs(s: Scheduler) -> dict[str, Any]:
    """A resolved scheduler as the JSON's inputs.scheduler: kv_unified and reserve_full_isl only where they apply
    (llama.cpp; vLLM's scheduler)."""
    return {k: v for k, v in s._asdict().items() if v is not None}


def check_scheduler(s: Scheduler) -> None:
    if s.policy not in POLICIES:
        raise UsageError(f"expected one of {', '.join(POLICIES)}, got {s.policy!r}", "scheduler")
    count(s.max_num_seqs, "max_num_seqs")
    count(s.max_num_batched_tokens, "max_num_batched_tokens")
    count(s.block_size, "block_size", 1, 1024)
    if s.max_num_seqs > s.max_num_batched_tokens:
        raise UsageError(
            f"max_num_seqs ({s.max_num_seqs}) above max_num_batched_tokens ({s.max_num_batched_tokens}): "
            "every running request needs a token of the step's budget",
            "max_num_seqs",
        )


def _window(result, measured: range, concurrency: int | None) -> tuple[float, float]:
    """The span the load lasts: from the first measured arrival to the last arrival (a closed loop: to the last
    finish); the measured requests' whole run when that is empty (one request, or all at once)."""
    start = min(result.arrival[i] for i in measured)
    end = max(result.arrival) if concurrency is None else max(result.finish)
    if end <= start:
        end = max(result.finish[i] for i in measured)
    return start, end


def _service_p90(result, measured: range) -> float:
    """The p90 of the time a measured request spends admitted (admission to finish) [s]: how long a saturated
    replica's batch takes to turn over. Llama-3.1-8B on an H100 at 150/s (1024 / exponential 256 tokens) ramps up for
    about 3 s of lost output (1,000 requests: 4,608 output tokens/s over 6.1 s of arrivals; 3,000: 9,253 over 18 s;
    10,000 and 30,000: 10,879 and 10,827), where the p90 is 16-19 s: beyond twice it, the ramp costs under 10%."""
    return f.percentile(sorted(result.finish[i] - result.admitted[i] for i in measured), 0.9)


def _throughput(result, requests: list[Request], window: tuple[float, float]) -> tuple[float, float]:
    """(requests/s, output tokens/s) produced in the `window` the load lasts (_window): each request's tokens
    counted for the share of its decoding (first token to finish) inside it, so a short run's drain is not read as
    lost throughput."""
    start, end = window
    served = tokens = 0.0
    for i in range(len(requests)):  # the warm-up's tokens inside the window are made in it too
        a, b = result.first[i], result.finish[i]
        share = (max(0.0, min(b, end) - max(a, start)) / (b - a)) if b > a else float(start <= b <= end)
        served += share
        tokens += share * requests[i].output_tokens
    span = end - start
    return (served / span, tokens / span) if span > 0 else (math.inf, math.inf)


def _occupancy(spans: list, window: tuple[float, float]) -> tuple[dict, dict]:
    """The running batch's and the KV cache's used share's time averages and maxima over the `window` the
    throughput counts (_window: an open loop's warm-up ramp and drain left out, a closed loop's drain kept):
    ({mean, max} of each). A span is one step or a run of decode steps: (start, seconds, running, KV share at its
    start, at its end), the share linear in between."""
    start, end = window
    batch = kv = 0.0
    batch_max, kv_max = 0, 0.0
    for t0, dt, running, s0, s1 in spans:
        a, b = max(t0, start), min(t0 + dt, end)
        if b < a or (b == a and dt > 0):
            continue
        sa, sb = ((s0 + (s1 - s0) * (t - t0) / dt) if dt > 0 else s1 for t in (a, b))  # the share at a and b
        batch += running * (b - a)
        kv += (sa + sb) / 2 * (b - a)
        batch_max, kv_max = max(batch_max, running), max(kv_max, sa, sb)
    span = end - start  # > 0: _window falls back to the measured requests' whole run
    return {"mean": batch / span, "max": batch_max}, {"mean": kv / span, "max": kv_max}


def _growing(queue: list[float], behind: bool = False) -> bool:
    """A queue that keeps growing: the last quarter's mean wait over 4x the first quarter's, and over a second; or over
    2x at any length when the replica preempted and serves under 97% of the arrival rate (`behind`): a burst filled its
    KV cache, and recomputing the preempted serves fewer requests a second than arrive. Llama-3.1-8B on an H100,
    1024/256 tokens, Poisson, seed 0, no warm-up left out: at 44/s the first 1,000 requests' waits went 0.010 -> 0.049 s
    with 4 preemptions at 37.9/s served, and 30,000 ran away at 38.3/s; at 40/s 0-8 preemptions in 100,000 requests
    (five seeds) left the queue flat (2026-12-08). Without the served rate, bursty arrivals on an L4 (gamma CV 6, 0.6/s)
    that preempted and waited 2.8 -> 8.6 s while serving 0.563/s of 0.549 read saturated.
    """
    q = len(queue) // 4
    if q < 10:
        return False
    first, last = sum(queue[:q]) / q, sum(queue[-q:]) / q
    return last > 1.0 and last > 4 * first or behind and last > 2 * first


def _offered(requests: list[Request], concurrency: int | None) -> float | None:
    """The open loop's arrival rate (requests over the span of arrivals); None for a closed loop."""
    if concurrency is not None or len(requests) < 2:
        return None
    times = sorted(r.arrival_s for r in requests)
    return (len(times) - 1) / (times[-1] - times[0]) if times[-1] > times[0] else math.inf


def _capacity(model: StepModel, requests: list[Request], sched: Scheduler, kv_tokens: int, cached=None) -> float:
    """Completions per second of a closed loop that keeps the replica full (max_num_seqs clients, or as many as the
    KV cache holds at the mean length, so it does not thrash on preemptions), the requests' lengths, counted between
    its 25th and 75th percentile finishes: the steady state, not the ramp or the tail.

    The clients start out of step: the first request of client i of N stops after (i + 1) / N of its output. Started
    together on fixed lengths, they stayed in step: every client's prompt prefilled in one wave, then decodes alone,
    so compute-bound prefill never overlapped memory-bound decode as it does under arrivals. Llama-3.1-8B on an H100
    (1024/256 tokens, 365 clients) was priced 36.5 requests/s where Poisson arrivals at 42/s held a flat queue over
    10,000 requests (an outside audit, 2026-12-07); lengths drawn from a distribution fall out of step by themselves.

    With sliding-window layers a prompt's chunk holds more during its step than its request holds after it
    (chunk_excess), so the KV cache full at the mean length can leave no room for the next chunk: the loop of as many
    clients as leave that room runs too, and the faster of the two counts. Gemma-3-27B on an H200 at 32,768 + 256
    tokens, admitted on the first chunk: the 25 clients its settled KV holds serve 0.44 requests/s, 24 serve 0.50
    (2026-12-08; on an H100, before vLLM's padded groups were counted, 7 clients read 0.053 while a step that
    preempted could still admit)."""
    mean_tokens = sum(r.prompt_tokens + r.output_tokens for r in requests) / len(requests)
    held = held_tokens(model, mean_tokens) + sched.block_size  # a windowed layer holds its window's tokens only
    prompt = round(sum(r.prompt_tokens for r in requests) / len(requests))
    room = kv_tokens - chunk_excess(model, prompt, sched.max_num_batched_tokens)
    counts = {max(1, min(sched.max_num_seqs, int(tokens / held))) for tokens in (kv_tokens, room)}
    return max(_closed_loop_rate(model, requests, sched, kv_tokens, clients, cached) for clients in counts)


def _closed_loop_rate(model, requests: list[Request], sched: Scheduler, kv_tokens: int, clients: int, cached) -> float:
    """_capacity's closed loop of `clients`, out of step: completions a second between its 25th and 75th percentile
    finishes."""
    size = max(CAPACITY_REQUESTS, 4 * clients)
    sample = [Request(None, r.prompt_tokens, r.output_tokens) for r in requests[:size]]
    while len(sample) < size:
        sample += sample[: size - len(sample)]
    for i, r in enumerate(sample[:clients]):  # out of step: client i's first request ends after (i + 1) / N
        sample[i] = Request(None, r.prompt_tokens, max(1, math.ceil(r.output_tokens * (i + 1) / clients)))
    finishes = sorted(Replica(model, sample, sched, kv_tokens, clients, cached).run().finish)
    low, high = len(finishes) // 4, 3 * len(finishes) // 4
    return (high - low) / (finishes[high] - finishes[low])


def chunk_excess(model: StepModel, prompt: int, budget: int) -> float:
    """The most KV budget tokens a prompt's chunk holds during its step beyond what its request holds after it: a
    windowed layer holds a chunk s..e whole until the next step (replica: vLLM allocates a step's tokens in every
    layer), (1 - f) x (min(s, w) + e - s - min(e, w)) with f the full layers' share; 0 without windows. Gemma-3-27B,
    a 32,768-token prompt in 8,192-token chunks: (1 - 10/70) x 8,192 = 7,022 under vLLM's padded groups."""
    f = full_share(model)
    if f == 1.0:
        return 0.0
    w, worst = model.window, 0
    for s in range(0, prompt, budget):
        e = min(s + budget, prompt)
        worst = max(worst, min(s, w) + e - s - min(e, w))
    return (1.0 - f) * worst


def _slos(ttft, tpot, requests, measured, ttft_slo, tpot_slo, q):
    if ttft_slo is None and tpot_slo is None:
        return len(list(measured)), None, None
    good = 0
    index = {i: k for k, i in enumerate(measured)}
    tpot_of = {
        i: (None if requests[i].output_tokens == 1 else v)
        for i, v in zip([i for i in measured if requests[i].output_tokens > 1], tpot)
    }
    for i in measured:
        ok = (ttft_slo is None or ttft[index[i]] <= ttft_slo) and (
            tpot_slo is None or tpot_of.get(i) is None or tpot_of[i] <= tpot_slo
        )
        good += ok
    met = {}
    if ttft_slo is not None:
        met["ttft_s"] = f.percentile(ttft, q) <= ttft_slo
    if tpot_slo is not None and tpot:
        met["tpot_s"] = f.percentile(tpot, q) <= tpot_slo
    return good, good / len(list(measured)), met


def simulate(
    model,
    hardware,
    *,
    rate: float | None = None,
    arrival: str = "poisson",
    cv: float = 1.0,
    concurrency: int | None = None,
    requests: int = 1000,
    warmup: int | None = None,
    seed: int = 0,
    prompt_tokens: int = PROMPT_TOKENS,
    output_tokens: int = OUTPUT_TOKENS,
    prompt_dist: str | None = None,
    output_dist: str | None = None,
    trace: list[Request] | None = None,
    scheduler: Scheduler | None = None,
    ttft_slo: float | None = None,
    tpot_slo: float | None = None,
    slo_percentile: float = 0.99,
    knobs: Knobs | None = None,
    **overrides: Any,
) -> Simulation:
    """Serve a workload on one replica of `model` on `hardware` (estimate's knobs) and report its latency
    percentiles: `rate` requests/s by `arrival` (poisson, gamma with `cv`, constant) or `concurrency` clients in a
    closed loop, `requests` of them (the first `warmup`, default a tenth, left out), lengths around the given means
    by `prompt_dist` / `output_dist` (fixed, exponential, uniform, lognormal:CV), or a `trace` of requests."""
    p = prepare(model, hardware, knobs, **overrides)
    chosen = workload(
        rate, arrival, cv, concurrency, requests, seed, prompt_tokens, output_tokens, prompt_dist, output_dist, trace
    )
    warm = len(chosen) // 10 if warmup is None else warmup
    inputs = {
        **plain(p.inputs._asdict()),
        "model": p.model.id,
        "hardware": p.hardware.id,
        **workload_inputs(
            rate,
            arrival,
            cv,
            concurrency,
            len(chosen),
            warm,
            seed,
            prompt_tokens,
            output_tokens,
            prompt_dist,
            output_dist,
            trace,
        ),  # fmt: skip
        "ttft_slo_s": ttft_slo,
        "tpot_slo_s": tpot_slo,
        "slo_percentile": slo_percentile,
    }
    inputs.pop("batch")
    inputs.update(preset_knobs(p))  # what the replica runs at (a preset's own)
    sched = engine_scheduler(p, scheduler)
    inputs["scheduler"] = scheduler_inputs(sched)
    return run_simulation(
        p,
        chosen,
        concurrency=concurrency,
        warmup=warm,
        scheduler=sched,
        ttft_slo=ttft_slo,
        tpot_slo=tpot_slo,
        slo_percentile=slo_percentile,
        inputs=inputs,
        seed=seed,
    )


def workload_inputs(
    rate,
    arrival,
    cv,
    concurrency,
    requests,
    warmup,
    seed,
    prompt_tokens,
    output_tokens,
    prompt_dist,
    output_dist,
    trace: list[Request] | None,
) -> dict[str, Any]:
    """The workload as a run's `inputs` report it (simulate's and bench's alike); a trace's lengths as its means."""
    if trace:
        prompt_tokens = round(sum(r.prompt_tokens for r in trace) / len(trace), 1)
        output_tokens = round(sum(r.output_tokens for r in trace) / len(trace), 1)
        prompt_dist = output_dist = "trace"
    return {
        "rate_per_s": rate,
        "arrival": arrival if rate else None,
        "cv": cv if rate and arrival == "gamma" else None,
        "concurrency": concurrency,
        "requests": requests,
        "warmup": warmup,
        "seed": seed,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "prompt_dist": prompt_dist or "fixed",
        "output_dist": output_dist or "fixed",
        "trace": trace is not None,
    }


def workload(
    rate, arrival, cv, concurrency, requests, seed, prompt_tokens, output_tokens, prompt_dist, output_dist, trace
) -> list[Request]:
    """The requests: a trace as given (its arrival times, or a closed loop), else drawn at a rate or for clients."""
    if trace is not None:
        if rate is not None:
            raise UsageError("a trace carries its own arrivals or runs closed-loop: no rate with it", "rate")
        if concurrency is None and any(r.arrival_s is None for r in trace):
            raise UsageError(
                "this trace has no arrival times: give a concurrency to replay it closed-loop", "concurrency"
            )
        return [r._replace(arrival_s=None) for r in trace] if concurrency is not None else list(trace)
    if (rate is None) == (concurrency is None):
        raise UsageError("give one workload: a rate (requests per second) or a concurrency (clients)", "rate")
    count(requests, "requests", 1, MAX_REQUESTS, "a number of requests")
    count(prompt_tokens, "prompt_tokens")
    count(output_tokens, "output_tokens")
    prompt = lengths(prompt_dist, prompt_tokens, "prompt_dist")
    output = lengths(output_dist, output_tokens, "output_dist")
    if rate is not None:
        return open_loop(rate, arrival, cv, requests, prompt, output, seed)
    return closed_loop(requests, prompt, output, seed)


class RateSweep(NamedTuple):
    """`simulate` at several rates: the latency-throughput curve (`to_dict()` is `--json`)."""

    inputs: dict[str, Any]
    points: list[Simulation]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "inputs": self.inputs,
            "points": [p.to_dict() for p in self.points],
        }

    def csv_rows(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.points]


def rate_sweep(model, hardware, rates: list[float], **options: Any) -> RateSweep:
    """`simulate` at each rate, the same seed and lengths for all: the knee chart's points."""
    points = [simulate(model, hardware, rate=r, **options) for r in rates]
    inputs = {k: v for k, v in points[0].inputs.items() if k != "rate_per_s"}
    return RateSweep({**inputs, "rates_per_s": list(rates)}, points)
