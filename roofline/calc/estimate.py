"""`estimate`: the roofline of one serving configuration (model x hardware x batch x lengths).

Conventions (stated in the README too):
- Prefill processes the whole prompt of every sequence in one pass and yields the first output token:
  TTFT = prefill time. The lm_head runs on the last prompt position only.
- The remaining O - 1 output tokens take one decode step each. Step j (j = 0..O-2) reads the weights
  once for the whole batch, reads each sequence's KV cache of P + j tokens, writes one token's K and V
  per sequence, and attends over P + j + 1 keys. TPOT = the mean step time over those steps, in closed
  form; request latency = TTFT + (O - 1) x TPOT (the vLLM / genai-perf convention).
- The input embedding (and a learned position table) is a row lookup: resident, not streamed.
  A tied lm_head streams the shared matrix once per step.
- Time of a step = max(compute, memory) with peaks scaled by the efficiency factors (1.0 = the bound), plus
  the tensor-parallel all-reduces when tp > 1. Per-step bytes and FLOPs (MoE, MLA, sliding windows, tp)
  come from roofline.shape; a measured profile adds the calibrated prediction of roofline.calibrate.
"""

from typing import Any, NamedTuple

from roofline.calc import calibrate
from roofline.calc import formulas as f
from roofline.calc.attention import engine_support
from roofline.calc.calibrate import Calibrated
from roofline.calc.checks import MAX_COUNT, count
from roofline.calc.inputs import Inputs, costs_timed_in, engine_costs, engine_costs_for
from roofline.calc.knobs import BATCH, OUTPUT_TOKENS, PROMPT_TOKENS, Knobs
from roofline.calc.prepare import HardwareInfo, ModelInfo, Prepared, prepare
from roofline.calc.serving import chunked, disagg, pipeline, prefix, speculative
from roofline.calc.shape import Shape
from roofline.calc.step import Phase, Work, decode_step, phase
from roofline.specs.records import Hardware, Model
from roofline.units import si

SCHEMA_VERSION = 1

# Result records are NamedTuples (immutable, cheap to define: see roofline/params.py).


class Decode(NamedTuple):
    """The mean decode step: Phase's fields (work at the mean context, time = mean of per-step maxima) and more."""

    flops: float
    bytes: float
    intensity_flop_per_byte: float
    compute_s: float
    memory_s: float
    comm_s: float
    time_s: float
    bound: str
    steps: int
    mean_context_tokens: float
    tokens_per_s: float
    tokens_per_s_per_sequence: float
    mbu: float  # achieved bytes/s over peak bandwidth
    mfu: float  # achieved FLOP/s over peak FLOP/s of the compute dtype


class Estimate(NamedTuple):
    """The result of `estimate`; `to_dict()` is the stable JSON of `roofline estimate --json`."""

    model: ModelInfo
    hardware: HardwareInfo
    inputs: Inputs
    weight_bytes: float
    weight_bytes_per_device: float
    weight_bytes_streamed: float  # per decode step at this batch, all devices
    kv_bytes_per_token: float
    kv_bytes_per_sequence: float
    kv_budget_bytes: float  # per device
    held_once_bytes: float  # per device, beside the weights: a shared prefix's KV, the drafter's weights and prefix
    max_batch: int | None
    fits: bool
    fits_reason: str
    critical_batch: int | None
    critical_batch_reason: str
    ridge_point_flop_per_byte: float
    prefill: Phase
    decode: Decode
    ttft_s: float
    tpot_s: float
    request_latency_s: float
    output_tokens_per_s: float  # end to end: batch x output tokens / request latency (prefill included)
    requests_per_s: float  # batch / request latency: a batch served together
    warnings: list[str]
    notes: list[str]
    calibrated: Calibrated | None = None  # from a measured profile: see roofline.calibrate
    engine: "EnginePrediction | None" = None  # an engine's predicted figures: a preset or a measured profile
    speculative: Any = None  # roofline.calc.serving.speculative.Speculative when drafting
    chunked: Any = None  # roofline.calc.serving.chunked.Chunked when prefill is chunked
    prefill_cached_tokens: int = 0  # prompt tokens served from a prefix cache
    comm: dict[str, float] | None = None  # a decode step's communication by kind [s] when parallel: tp_s, ep_s, pp_s
    pipeline: Any = None  # roofline.calc.serving.pipeline.Pipeline when pp > 1
    disagg: Any = None  # roofline.calc.serving.disagg.Disagg when prefill and decode run on separate pools
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return plain(self)

    def csv_rows(self) -> list[dict[str, Any]]:
        """`--csv`: the JSON object as one row (the renderer flattens nested keys with dots)."""
        return [self.to_dict()]


def plain(value: Any) -> Any:
    """Records -> dicts and lists, recursively (for JSON)."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def estimate(
    model: Model,
    hardware: Hardware,
    *,
    batch: int = BATCH,
    prompt_tokens: int = PROMPT_TOKENS,
    output_tokens: int = OUTPUT_TOKENS,
    knobs: Knobs | None = None,
    **overrides: Any,
) -> Estimate:
    """Roofline estimate of serving `model` on `hardware` (x tp); see the module docstring for conventions.

    `knobs` (or keyword overrides of its fields: weight_dtype=..., tp=...) say how the model is served."""
    return estimate_at(prepare(model, hardware, knobs, **overrides), batch, prompt_tokens, output_tokens)


def estimate_at(p: Prepared, batch: int, prompt_tokens: int, output_tokens: int, cache: dict | None = None) -> Estimate:
    """The estimate of one batch and lengths for a prepared setup (a sweep prepares once, then calls this; its
    `cache` keeps the critical batch per context, which no batch changes)."""
    B = count(batch, "batch")
    P = count(prompt_tokens, "prompt_tokens")
    O = count(output_tokens, "output_tokens", 0)
    inputs = p.inputs._replace(batch=B, prompt_tokens=P, output_tokens=O)
    notes = list(p.notes)
    if O <= 1:
        notes.append(
            f"output {O}: no decode step runs; the decode figures price one step after the prompt (what a next token "
            "would cost)"
        )
    cached = prefix.cached_tokens(p.knobs, P)
    prefill = _prefill(p, B, P, cached)
    timing = _timing(p, B, P, O, cached, prefill, notes)
    memory = _memory(p, B, P, O, notes)
    key = (timing.mean_context, memory.limit)  # neither depends on the batch: a sweep's points share them
    cache = {} if cache is None else cache
    if key not in cache:
        found = _critical_batch(p.shape, timing.mean_context, p.F, p.W)
        cache[key] = found, _critical_reason(found, memory.limit, p.shape, timing.mean_context, p.F, p.W)
    critical, critical_reason = cache[key]
    calibrated = _calibrated(p.model, p.hardware, inputs, p.shape, timing.mean_context)
    notes += uncalibrated(p.model, p.hardware, inputs) if calibrated is None and p.preset is None else []
    notes += costs_dtype(p.hardware, inputs) if calibrated is not None else []
    split = disagg.price(p, B, P, timing.ttft_s, timing.latency_s, notes)
    ttft = split.ttft_s if split else timing.ttft_s
    latency_s = ttft + max(O - 1, 0) * timing.tpot_s
    several = p.knobs.tp > 1 or p.shape.ep > 1 or p.knobs.pp > 1
    return Estimate(
        model=p.model_info,
        hardware=p.hardware_info,
        inputs=inputs,
        weight_bytes=p.shape.storage.resident,
        weight_bytes_per_device=memory.weights,
        weight_bytes_streamed=p.shape.streamed(B) * max(p.knobs.tp, p.shape.ep),
        kv_bytes_per_token=p.shape.kv_per_token,
        kv_bytes_per_sequence=p.shape.kv_cached(P + O),
        kv_budget_bytes=max(
            memory.budget, 0.0
        ),  # 0 when the weights alone exceed the memory fraction (fits_reason says)
        held_once_bytes=memory.held,
        max_batch=memory.limit,
        fits=memory.fits,
        fits_reason=memory.reason,
        critical_batch=critical,
        critical_batch_reason=critical_reason,
        ridge_point_flop_per_byte=f.ridge_point(p.F, p.W),
        prefill=prefill,
        decode=timing.decode,
        ttft_s=ttft,
        tpot_s=timing.tpot_s,
        request_latency_s=latency_s,
        output_tokens_per_s=split.requests_per_s * O if split else f.output_tokens_per_s(B, O, latency_s),
        requests_per_s=split.requests_per_s if split else B / latency_s,
        warnings=_warnings(p.model, P, O, p.knobs.draft),
        notes=notes,
        calibrated=calibrated,
        engine=_engine_result(p, inputs, calibrated, notes, memory.limit),
        speculative=timing.spec,
        chunked=timing.chunk,
        prefill_cached_tokens=cached,
        comm=timing.comm if several else None,
        pipeline=timing.pipe,
        disagg=split,
    )


def _prefill(p: Prepared, B: int, P: int, cached: int) -> Phase:
    """The batch's prefill in one pass: every uncached prompt token of every sequence."""
    shape = p.shape
    comm = shape.comm_seconds(B * (P - cached), p.link, p.latency, p.ep_link)
    step = phase(shape.prefill_flops(B, P, cached), shape.prefill_bytes(B, P, cached), p.F, p.W, comm_s=comm)
    return step._replace(cached_tokens=cached)


class Timing(NamedTuple):
    """TTFT and TPOT with the serving features that change them, and the mean decode step they start from."""

    ttft_s: float
    tpot_s: float
    latency_s: float  # colocated: TTFT + (O - 1) TPOT
    mean_context: float
    decode: Decode
    comm: dict[str, float]
    spec: Any
    chunk: Any
    pipe: Any


def _timing(p: Prepared, B: int, P: int, O: int, cached: int, prefill: Phase, notes: list[str]) -> Timing:
    """Decode steps j = 0..O-2 at cached context P + j (piecewise linear in j, so the means are exact), then
    speculative decoding, chunked prefill and a pipeline on top of them."""
    shape = p.shape
    steps = max(O - 1, 1)
    step = decode_step(shape, B, P, steps, p.F, p.W, p.link, p.latency, p.ep_link)
    comm = {
        "tp_s": shape.tp_seconds(B, p.link, p.latency),
        "ep_s": shape.ep_seconds(B, *p.ep_link) if p.ep_link else 0.0,
        "pp_s": 0.0,
    }
    mean_context = P + (steps - 1) / 2
    spec = speculative.price(p, B, P, cached, mean_context, notes)
    chunk = chunked.price(p, B, P, O, mean_context, Work(step.time_s, step.bytes, step.flops), spec, notes)
    tpot = chunk.tpot_s if chunk else spec.tpot_s if spec else step.time_s
    ttft = (chunk.ttft_s if chunk else prefill.time_s) + (spec.draft_prefill_s if spec else 0.0)
    pipe = pipeline.price(p, B, P, cached, steps, notes)
    if pipe:
        ttft, tpot, comm["pp_s"] = pipe.ttft_s, pipe.tpot_s, pipe.hop_decode_s * pipe.cycle_stages
    # Utilization: the bytes (FLOPs) a device moves per output token of a sequence over the time per token, i.e.
    # one iteration's (speculative, chunked, pipelined) work over its time: never above 1 at the bound.
    per_token = next((r for r in (pipe, chunk, spec) if r is not None), None)
    moved = per_token.device_bytes_per_token if per_token else step.bytes
    computed = per_token.device_flops_per_token if per_token else step.flops
    decode = Decode(
        **{name: getattr(step, name) for name in Decode._fields[:8]},  # the mean step's Phase fields
        steps=O - 1 if O > 1 else 0,
        mean_context_tokens=mean_context,
        tokens_per_s=B / tpot,  # with speculative decoding, chunked prefill or a pipeline, their effective TPOT
        tokens_per_s_per_sequence=1 / tpot,
        mbu=moved / tpot / p.hardware.memory_bandwidth,
        mfu=computed / tpot / p.peak,
    )
    if O <= 1:
        notes.append("output_tokens <= 1: no decode step runs; decode figures are those of a step at context P")
    return Timing(ttft, tpot, ttft + max(O - 1, 0) * tpot, mean_context, decode, comm, spec, chunk, pipe)


class Memory(NamedTuple):
    """What fits per device: the weights, the KV budget left, the max batch and the verdict for this batch."""

    weights: float
    budget: float
    limit: int | None
    fits: bool
    reason: str
    held: float = 0.0  # beside the weights, held once: a shared prefix's KV, the drafter's weights and prefix KV


def _memory(p: Prepared, B: int, P: int, O: int, notes: list[str]) -> Memory:
    """Per device: what every sequence brings (its own KV and the drafter's) against the budget left by what is held
    once (the weights, a shared prefix's KV, the drafter's weights); each attention group (dp > 1: experts spread
    wider than tp) holds its share of the sequences."""
    k, shape, hardware = p.knobs, p.shape, p.hardware
    stages = k.pp
    shared = min(k.shared_prefix, P)
    if shared:
        whole = f" (the whole prompt: --shared-prefix {k.shared_prefix} is longer)" if k.shared_prefix > P else ""
        notes.append(f"shared prefix: {shared} tokens{whole} of KV held once for the batch (reads stay per sequence)")
    once, own = prefix.held(shape, P + O, shared)
    draft_once, draft_own = speculative.memory(p.draft, P + O, shared) if p.draft is not None else (0.0, 0.0)
    per_sequence = own / stages + draft_own
    weights = shape.weights / stages
    held = once / stages + draft_once
    budget = f.kv_budget(k.memory_fraction, hardware.memory_capacity, weights) - held
    limit = (
        min(shape.dp * f.max_batch(budget, per_sequence), MAX_COUNT) if per_sequence > 0 else None
    )  # past 1e9: no batch
    whose = held_by(draft_once > 0, once > 0)
    fits, reason = _fits(budget, limit, B, weights, held, whose, k.memory_fraction, hardware.memory_capacity)
    return Memory(weights, budget, limit, fits, reason, held)


def costs_dtype(hardware: Hardware, inputs: Inputs) -> list[str]:
    """A note where the profile holds the engine's fixed costs timed only in another dtype than the one this runs in
    (measure --engine times one per run: fp32 unless --dtype says; engine_costs_for picks the run's where it has
    them): transformers at bf16 cost 12.7 ms a step where fp32's 8.4 priced it (SmolLM2-135M, a 2-core Zen 4 VM,
    2026-12-07)."""
    name = inputs.engine or "eager"
    costs = engine_costs_for(hardware, name, inputs.weight_dtype)
    if costs is None or name == "llamacpp" or costs_timed_in(costs) == inputs.weight_dtype:
        return []
    measured = costs_timed_in(costs)
    return [
        f"engine {name}: its fixed costs were measured in {measured} and this runs in {inputs.weight_dtype} (`roofline "
        f"measure --engine {name} --dtype {inputs.weight_dtype} --save PROFILE` measures them in it)"
    ]


def uncalibrated(model: Model, hardware: Hardware, inputs: Inputs) -> list[str]:
    """A note when a measured profile (or llama.cpp's) cannot price this setup (`_uncovered`, `_calibrated`'s gate; a
    torch profile lacking the weight dtype's curves, calibrate.lacks), so that the bound is not read as the measured
    engine's; empty otherwise. A `measured` block with no torch curves at all (a collectives or read-ladder run) is
    not a torch profile and gets none."""
    llama = inputs.engine == "llamacpp" and "llamacpp" in engine_costs(hardware)
    if not (hardware.measured or llama):
        return []
    why = _uncovered(model, inputs)
    whose = "llama.cpp's measured profile" if llama else "the measured profile's calibrated prediction"
    if why is not None:
        return [f"{whose} covers dense models on one device, and {model.id} {why}: the figures are the roofline bound"]
    if llama or not hardware.measured.get("decode_matmul"):  # llama.cpp's types stand in for each other; no torch
        return []
    dtype = inputs.weight_dtype
    lacking = calibrate.lacks(hardware.measured, dtype)
    if lacking is None:
        return []
    if dtype not in calibrate.TORCH_DTYPES:
        return [
            f"{whose} covers {', '.join(calibrate.TORCH_DTYPES)} weights (torch's), not {dtype}: the figures are the "
            "roofline bound"
        ]
    return [
        f"{whose} needs {dtype}'s decode curve, attention and per-op cost, and the profile has {lacking}: the "
        f"figures are the roofline bound (`roofline measure --dtype {dtype}` times them)"
    ]


def _uncovered(model: Model, inputs: Inputs) -> str | None:
    """Why no measured profile prices this setup (a MoE, MLA, a napkin model; tp > 1); None when it can."""
    return engine_support(model) or (f"runs on tp {inputs.tp} devices" if inputs.tp > 1 else None)


def _calibrated(model: Model, hardware: Hardware, inputs: Inputs, shape: Shape, cached: float) -> Calibrated | None:
    """The calibrated prediction when the hardware is a measured profile and the model is dense, one device."""
    a = model.arch
    llama = engine_costs(hardware).get("llamacpp") if inputs.engine == "llamacpp" else None
    if not (hardware.measured or llama) or _uncovered(model, inputs):
        return None
    B, P = inputs.batch, inputs.prompt_tokens
    kv_step = B * (shape.kv_cached(cached) + shape.kv_per_token)
    if llama:
        return _llamacpp(model, llama, inputs, shape, kv_step)
    attention_flops = B * shape.key_flops_decode * shape.keys(cached)
    return calibrate.predict(
        a,
        hardware.measured,
        inputs.weight_dtype,
        B,
        P,
        kv_step,
        attention_flops,
        shape.prefill_attention_flops(B, P),
        engine_costs_for(hardware, inputs.engine or "eager", inputs.weight_dtype),
        inputs.engine or "eager",
        shape.streamed(B) + kv_step,
        B * shape.kv_cached(P),
    )


def _llamacpp(model: Model, profile: dict, inputs: Inputs, shape: Shape, kv_step: float) -> Calibrated:
    """llama.cpp's measured profile (roofline.calc.llamacpp): the B prompts prefilled in one llama_decode (its
    ubatches), then decode steps of B rows at the mean context."""
    from roofline.calc import llamacpp

    a, B, P = model.arch, inputs.batch, inputs.prompt_tokens
    weights = llamacpp.weights_of(model, shape, inputs.weight_dtype)
    per_token = f.matmul_flops(shape.matmul - shape.head, 1)
    heads = llamacpp.heads_of(a.num_heads, shape)
    common = (profile, weights, heads, a.hidden_size)
    prefill_kv = B * shape.kv_cached(P)  # the prompt's KV written
    prompt_attention = shape.prefill_attention_flops(B, P)
    ttft = sum(llamacpp.step_parts(*common, B * P, B, B * P * per_token, prompt_attention, prefill_kv))
    steps = max(inputs.output_tokens - 1, 1)

    def at(j: float) -> llamacpp.StepParts:  # decode step j, at cached context P + j
        keys = B * shape.keys(P + j)
        decode = llamacpp.Decode(B, keys, shape.key_flops_decode * keys)
        return llamacpp.step_parts(*common, B, B, B * per_token, decode.flops, kv_step, decode)

    # the attention's exact mean over the steps (it bends where one row's view grows and where a window fills), the
    # rest at the mean context
    breaks = llamacpp.Step(*common).breaks(B, B * shape.keys(P), B * (shape.keys(P + 1) - shape.keys(P)), steps)
    breaks = sorted({*breaks, *(int(j) for j in shape.decode_breakpoints(P) if 0 < j < steps)})
    mean = at((steps - 1) / 2)
    decode = mean._replace(attention_s=llamacpp.series(lambda j: at(j).attention_s, steps, breaks) / steps)
    stand_ins = ", ".join(f"{k} as {v}" for k, v in llamacpp.stand_ins(profile, weights).items())
    basis = "llama.cpp's measured profile (time per weight byte by rows and type, fixed cost per step and layer)"
    own = llamacpp.own_widths(profile, weights, a.hidden_size)
    if own:
        basis += f"; {', '.join(k.lower() for k in own)} probed at its own width ({a.hidden_size})"
    if profile.get("attention"):
        basis += "; decode attention by the head-cells of the busiest thread"
    return Calibrated(
        ttft_s=ttft,
        tpot_s=sum(decode),
        decode_linear_s=decode.matmul_s,
        decode_attention_s=decode.attention_s,
        decode_overhead_s=decode.fixed_s,
        basis=basis + (f"; unmeasured types priced as: {stand_ins}" if stand_ins else ""),
        engine="llamacpp",
    )


def _critical_batch(shape: Shape, cached: float, F: float, W: float) -> int | None:
    """Critical batch at the mean decode context: closed form for dense models; for MoE the weights read
    grow with the batch (more experts touched), so the smallest batch is searched."""
    if shape.counts is not None and shape.counts.moe_layers:
        return f.smallest_batch_where(lambda b: shape.decode_flops(b, cached) / F >= shape.decode_bytes(b, cached) / W)
    per_sequence_flops = shape.decode_flops(1, cached)
    per_sequence_kv = shape.decode_bytes(1, cached) - shape.streamed(1)
    return f.critical_batch(shape.streamed(1), per_sequence_flops, per_sequence_kv, F, W)


class EnginePrediction(NamedTuple):
    """What an engine is predicted to achieve: from a preset (published benchmarks) or a measured profile."""

    name: str
    source: str  # "preset" or "measured"
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    # a preset's held-out median |error| per metric: {ttft_mean: {runs, case, setup, device, applies, elsewhere}};
    # applies: which of case (leave one run out), setup (leave one model on its device out) and device (leave one
    # device out) holds on this device; elsewhere: whether this device is none of the preset's runs'
    # (presets.typical_errors)
    typical_error: dict = {}
    max_batch: int | None = None  # sequences a preset's own KV pool holds at these lengths; None for a measured engine


def _format_own(preset, weight_dtype: str, hardware) -> str:
    """' (fp4 weights 0.52)' where the preset reads the weights at their format's own bandwidth fraction, else ''."""
    from roofline.calc.presets import weight_share

    own = weight_share(preset, weight_dtype, hardware)
    return "" if own is None else f" ({weight_dtype} weights {own:.2f})"


def _pool(preset) -> str:
    """'memory fraction 0.90 less a 1.72 GB reserve', or 'KV pool 0.95 of the memory the weights leave' (kv_pool:
    free), as the preset's pool rule takes them."""
    reserve = f" less a {preset.reserve_bytes / 1e9:.3g} GB reserve" if preset.reserve_bytes else ""
    if preset.kv_pool == "free":
        return f"KV pool {preset.memory_fraction:.2f} of the memory the weights leave{reserve}"
    return f"memory fraction {preset.memory_fraction:.2f}{reserve}"


def _engine_result(
    p: Prepared, inputs: Inputs, calibrated, notes: list[str], bound_limit: int | None = None
) -> "EnginePrediction | None":
    """The engine's prediction beside the bound: a preset's efficiencies and step cost (its setup prepared once),
    or the measured calibration. `bound_limit`: the sequences the bound's memory fraction holds (a preset whose
    pool holds more is said to, the one way a preset's figure can beat the bound's)."""
    name, preset = inputs.engine, p.preset
    if preset is not None and p.preset_setup is None:
        notes.append(
            f"engine {name}: no preset prediction with a pipeline or disaggregated pools (the presets were "
            "fitted on colocated runs without pipeline stages)"
        )
        return None
    if preset is not None and p.draft is not None:
        notes.append(
            f"engine {name}: no preset prediction with speculative decoding (none of the presets' published runs "
            "drafted: the step cost per draft and verify step is not measured)"
        )
        return None
    if preset is not None:
        from roofline.calc import presets

        e = estimate_at(p.preset_setup, inputs.batch, inputs.prompt_tokens, inputs.output_tokens)
        if not e.fits:  # the engine's own memory rule: what its memory fraction cannot hold, it does not serve
            notes.append(
                f"engine {name}: no prediction: under the preset's {_pool(preset)} this does not fit ({e.fits_reason})"
            )
            return None
        ttft, tpot, rate = presets.timings(e, presets.step_cost(preset, p.model, p.hardware), preset.request_overhead_s)
        checked = f", checked on {len(preset.holdout)} held-aside figure(s)" if preset.holdout else ""
        k = p.preset_setup.knobs
        notes.append(
            f"engine {name}: a preset learned from {len(preset.cases)} published benchmark case(s){checked} "
            f"(engines/{preset.name}.yaml): on {p.hardware.id}, {k.bandwidth_efficiency:.2f} of peak bandwidth"
            f"{_format_own(preset, inputs.weight_dtype, p.hardware)} "
            f"and {k.compute_efficiency:.2f} of the {inputs.compute_dtype} peak, "
            f"+{presets.step_cost(preset, p.model, p.hardware) * 1e3:.2g} "
            f"ms a step, {_pool(preset)}"
        )
        if e.max_batch is not None and bound_limit is not None and e.max_batch > bound_limit:
            share = p.preset_setup.knobs.memory_fraction
            notes.append(
                f"engine {name}: its pool ({_pool(preset)}: {share:.4g} x memory) holds {e.max_batch} sequences "
                f"where the bound's memory fraction {inputs.memory_fraction:g} holds {bound_limit}; the bound's "
                f"speeds still hold, its capacity does not: --memory-fraction {share:.4g} bounds the same memory"
            )
        beyond = presets.beyond_runs(preset, inputs.batch)  # its typical error was measured at smaller batches
        notes += [beyond] if beyond else []
        typical = {} if beyond else presets.typical_errors(preset, p.hardware)
        return EnginePrediction(preset.name, "preset", ttft, tpot, rate, typical, e.max_batch)
    if calibrated is not None and name is not None:
        latency = calibrated.ttft_s + max(inputs.output_tokens - 1, 0) * calibrated.tpot_s
        return EnginePrediction(
            name, "measured", calibrated.ttft_s, calibrated.tpot_s, inputs.batch * inputs.output_tokens / latency
        )
    if name is not None:  # asked for by name (not the default) where nothing measured prices it
        notes.append(
            f"engine {name}: no prediction: {p.hardware.id} holds no measured calibration for it (`roofline measure "
            "--save PROFILE`, then -H PROFILE)"
        )
    return None


def held_by(drafter: bool, prefix: bool) -> str:
    """What is held once beside the weights: 'the drafter', 'a shared prefix' or both."""
    return " and ".join(n for n, on in (("the drafter", drafter), ("a shared prefix", prefix)) if on)


def _fits(
    budget: float,
    limit: int | None,
    batch: int,
    weights: float,
    held: float,
    whose: str,
    fraction: float,
    capacity: float,
) -> tuple[bool, str]:
    usable = fraction * capacity
    if budget < 0:
        also = f" + {si(held, 'B')} held once ({whose})" if held > 0 else ""
        return False, f"weights ({si(weights, 'B')}){also} exceed {fraction:g} x memory ({si(usable, 'B')})"
    if limit is not None and batch > limit:
        return False, f"batch {batch} exceeds the max batch {limit} that the KV budget holds"
    return True, "weights and the batch's KV caches fit in the memory fraction"


def _critical_reason(critical: int | None, limit: int | None, shape: Shape, context: float, F: float, W: float) -> str:
    if critical is None:
        per_sequence = shape.decode_flops(1, context) / (shape.decode_bytes(1, context) - shape.streamed(1))
        return (
            f"decode stays memory-bound: per-sequence KV reads alone give {per_sequence:.3g} FLOP/B < ridge {F / W:.3g}"
        )
    if limit is not None and critical > limit:
        return f"beyond the max batch {limit}: memory runs out first"
    return "decode turns compute-bound from this batch (KV traffic included)"


def kv_unpriced(model: Model) -> str | None:
    """The warning for a params-only model without kv_bytes_per_token (its KV priced as 0), else None."""
    if model.arch is not None or model.kv_bytes_per_token_given is not None:
        return None
    return (
        f"{model.id} gives params but no kv_bytes_per_token: its KV cache is priced as 0 B/token (set it in the "
        "model's YAML, or give the architecture)"
    )


def _warnings(model: Model, prompt: int, output: int, draft: Model | None = None) -> list[str]:
    warnings = []
    if draft is not None and draft.params >= model.params:
        warnings.append(
            f"draft {draft.id} ({draft.params / 1e9:.3g}B parameters) is not smaller than {model.id} "
            f"({model.params / 1e9:.3g}B): drafting costs more than it saves"
        )
    if model.max_context is not None and prompt + output > model.max_context:
        warnings.append(
            f"prompt + output = {prompt + output} tokens exceeds {model.id}'s max_context {model.max_context}"
        )
    warnings += [kv_unpriced(model)] if kv_unpriced(model) else []
    w = model.weights_file
    if w is not None and model.params and abs(w.elements - model.params) > 0.01 * model.params:
        warnings.append(
            f"the {model.source_kind} file holds {w.elements:,} weights, the architecture {model.params:,.0f} "
            "(a tensor the architecture does not count, or one it expects is missing)"
        )
    return warnings
