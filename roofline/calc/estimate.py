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

from roofline.calc import calibrate, serving
from roofline.calc.attention import engine_support
from roofline.calc import formulas as f
from roofline.calc.calibrate import Calibrated
from roofline.calc.storage import KV_BYTES, QUANTS, Storage, from_file, quantized, uniform
from roofline.calc.knobs import BATCH, OUTPUT_TOKENS, PROMPT_TOKENS, Knobs, knobs_of
from roofline.errors import UsageError
from roofline.calc.shape import Shape
from roofline.specs.records import COMPUTE_DTYPES, DTYPE_BYTES, Hardware, Model
from roofline.units import si

SCHEMA_VERSION = 1
MAX_COUNT = 10**9  # batch, tokens, devices: beyond this the float arithmetic, not the model, would answer
MIN_FRACTION = 1e-6  # memory fraction and efficiencies: smaller ones are typos that would reach 1e300-second times
WEIGHT_ONLY = ("int8", "int4", "fp4")  # quantized weights default to weight-only: compute in 16 bits
# Per all-reduce latency when the hardware YAML gives none: small-message NCCL all-reduces within one NVLink
# node take on the order of 10 us (nccl-tests); `roofline measure --collectives` measures it.
DEFAULT_COLLECTIVE_LATENCY = 10e-6

# Result records are NamedTuples (immutable, cheap to define: see roofline/params.py).


class Inputs(NamedTuple):
    batch: int
    prompt_tokens: int
    output_tokens: int
    weight_dtype: str
    kv_dtype: str
    compute_dtype: str
    bits_per_weight: float
    memory_fraction: float
    compute_efficiency: float
    bandwidth_efficiency: float
    tp: int
    collective_latency_s: float
    ep: int = 1  # expert-parallel devices (MoE)
    engine: str | None = None  # the engine whose calibrated prediction was asked for
    quant: str | None = None  # a named weight format (roofline.calc.storage.QUANTS)
    draft: str | None = None  # serving features (roofline.calc.serving), null when unused
    draft_tokens: int | None = None
    acceptance: float | None = None
    mtp: int | None = None
    cached_tokens: int | None = None
    prefix_hit_rate: float | None = None
    shared_prefix: int = 0
    chunk_tokens: int | None = None
    pp: int = 1  # pipeline stages
    micro_batches: int | None = None  # pipeline micro-batches (default: min(batch, pp))
    disagg: str | None = None  # "xP:yD": x prefill and y decode instances of tp x pp devices


class Phase(NamedTuple):
    """One step's work and its roofline times [FLOP, B, s]."""

    flops: float
    bytes: float
    intensity_flop_per_byte: float
    compute_s: float
    memory_s: float
    comm_s: float  # tensor-parallel all-reduces, added to the roofline time
    time_s: float
    bound: str  # "compute" or "memory"
    cached_tokens: int = 0  # prefill: prompt tokens per sequence served from a prefix cache


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


class ModelInfo(NamedTuple):
    id: str
    name: str
    params: float
    active_params: float  # used per token (= params for dense models)
    matmul_params: float  # multiplied per token
    source_kind: str = "yaml"  # "yaml", "config", "gguf", "safetensors" or "hub"


class HardwareInfo(NamedTuple):
    id: str
    name: str
    figures: str  # "datasheet" or "measured"
    peak_flop_per_s: float
    memory_bandwidth_bytes_per_s: float
    memory_capacity_bytes: float


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
    engine: "EngineResult | None" = None  # an engine's predicted figures: a preset or a measured profile
    speculative: Any = None  # roofline.calc.serving.Speculative when drafting
    chunked: Any = None  # roofline.calc.serving.Chunked when prefill is chunked
    prefill_cached_tokens: int = 0  # prompt tokens served from a prefix cache
    comm: dict[str, float] | None = None  # a decode step's communication by kind [s] when parallel: tp_s, ep_s, pp_s
    pipeline: Any = None  # roofline.calc.serving.Pipeline when pp > 1
    disagg: Any = None  # roofline.calc.serving.Disagg when prefill and decode run on separate pools
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


class Setup(NamedTuple):
    """What every point of a sweep shares: the validated knobs, the model's per-step shape and the device's roofs."""

    model: Model
    hardware: Hardware
    knobs: Knobs
    template: Inputs  # batch and lengths filled in per point
    storage: Storage
    shape: Shape
    draft: Shape | None  # the drafter of speculative decoding
    peak: float
    F: float  # achievable FLOP/s
    W: float  # achievable bytes/s
    link: float | None  # the tp group's all-reduce link [B/s] and latency [s]
    latency: float
    ep_link: tuple | None
    notes: tuple[str, ...]
    model_info: "ModelInfo"
    hardware_info: "HardwareInfo"
    critical: dict  # (mean context, max batch) -> (critical batch, its reason): a sweep asks many batches per context


def prepare(model: Model, hardware: Hardware, knobs: Knobs | None = None, **overrides: Any) -> Setup:
    """Validate the knobs and build the per-step model once; `estimate_at` then prices any batch and lengths."""
    k = knobs_of(knobs, overrides)
    notes: list[str] = []
    template, storage = _inputs(model, hardware, notes, {"batch": 1, "prompt_tokens": 1, "output_tokens": 0, **k._asdict()})
    peak = hardware.peak_flops[template.compute_dtype]
    ep = _ep(model, hardware, k, notes)
    shape = Shape(model, storage, template.kv_dtype, template.compute_dtype, k.tp, ep)
    link, latency = _tier(hardware, k.tp, template, notes)
    ep_link = _tier(hardware, max(k.tp, ep), template, notes) if ep > 1 else None
    draft = _draft_shape(model, k, template, storage)
    _check_serving(k, draft)
    notes += _shape_notes(model, k.tp)
    model_info = ModelInfo(model.id, model.name, model.params, float(model.counts.active) if model.counts else model.params, shape.matmul,
                           model.source_kind)
    hardware_info = HardwareInfo(hardware.id, hardware.name, hardware.origin, peak, hardware.memory_bandwidth, hardware.memory_capacity)
    return Setup(model, hardware, k, template, storage, shape, draft, peak, peak * k.compute_efficiency,
                 hardware.memory_bandwidth * k.bandwidth_efficiency, link, latency, ep_link, tuple(notes), model_info, hardware_info, {})


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


def estimate_at(s: Setup, batch: int, prompt_tokens: int, output_tokens: int) -> Estimate:
    """The estimate of one batch and lengths for a prepared setup (a sweep prepares once, then calls this)."""
    for name, value, low in (("batch", batch, 1), ("prompt_tokens", prompt_tokens, 1), ("output_tokens", output_tokens, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
            raise UsageError(f"expected an integer from {low} to {MAX_COUNT:.0e}, got {value!r}", name)
    model, hardware, k, shape, F, W = s.model, s.hardware, s.knobs, s.shape, s.F, s.W
    link, latency, ep_link, tp, ep = s.link, s.latency, s.ep_link, k.tp, shape.ep
    inputs = Inputs(batch, prompt_tokens, output_tokens, *s.template[3:])
    notes = list(s.notes)
    B, P, O = batch, prompt_tokens, output_tokens

    cached = _cached_tokens(k, P)
    prefill = _phase(shape.prefill_flops(B, P, cached), shape.prefill_bytes(B, P, cached), F, W,
                     comm_s=shape.comm_seconds(B * (P - cached), link, latency, ep_link))._replace(cached_tokens=cached)

    # Decode steps j = 0..O-2 at cached context P + j: piecewise linear in j, so the means are exact.
    steps = max(O - 1, 1)
    step = _decode_step(shape, B, P, steps, F, W, link, latency, ep_link)
    comm = {"tp_s": shape.tp_seconds(B, link, latency), "ep_s": shape.ep_seconds(B, *ep_link) if ep_link else 0.0, "pp_s": 0.0}
    mean_context = P + (steps - 1) / 2
    spec = _speculative(s, B, mean_context, notes)
    chunk = _chunked(s, B, P, O, mean_context, step.time_s, spec, notes)
    tpot = chunk.tpot_s if chunk else spec.tpot_s if spec else step.time_s
    ttft = chunk.ttft_s if chunk else prefill.time_s
    pipe = None
    if k.pp > 1:
        pipe = _pipeline(s, B, P, cached, steps, notes)
        ttft, tpot, comm["pp_s"] = pipe.ttft_s, pipe.tpot_s, pipe.hop_decode_s * pipe.cycle_stages
    per_token = pipe.device_bytes_per_token if pipe else step.bytes
    decode = Decode(
        *step[:8],  # Phase's fields but cached_tokens, in order
        steps=O - 1 if O > 1 else 0,
        mean_context_tokens=mean_context,
        tokens_per_s=B / tpot,  # with speculative decoding, chunked prefill or a pipeline, their effective TPOT
        tokens_per_s_per_sequence=1 / tpot,
        mbu=per_token / tpot / hardware.memory_bandwidth,
        mfu=(pipe.device_flops_per_token if pipe else step.flops) / tpot / s.peak,
    )
    if O <= 1:
        notes.append("output_tokens <= 1: no decode step runs; decode figures are those of a step at context P")

    stages = k.pp
    kv_sequence = shape.kv_cached(P + O)
    shared = min(k.shared_prefix, P) if k.shared_prefix else 0
    kv_device = (kv_sequence - shape.kv_cached(shared)) * shape.kv_share / stages  # a shared prefix is held once, below
    extra = shape.kv_cached(shared) * shape.kv_share / stages + (spec_memory(s.draft, B, P + O) if spec else 0.0)
    weights = shape.weights / stages
    budget = f.kv_budget(k.memory_fraction, hardware.memory_capacity, weights) - extra
    if shared:
        notes.append(f"shared prefix: {shared} tokens of KV held once for the batch (reads stay per sequence)")
    limit = min(f.max_batch(budget, kv_device), MAX_COUNT) if kv_device > 0 else None  # a batch past 1e9 is not a batch
    fits, fits_reason = _fits(budget, limit, B, weights, k.memory_fraction, hardware.memory_capacity)
    key = (mean_context, limit)  # neither depends on the batch: a sweep's points share them
    if key not in s.critical:
        found = _critical_batch(shape, mean_context, F, W)
        s.critical[key] = found, _critical_reason(found, limit, shape, mean_context, F, W)
    critical, critical_reason = s.critical[key]
    calibrated = _calibrated(model, hardware, inputs, shape, mean_context)
    latency_s = ttft + max(O - 1, 0) * tpot
    split = _disagg(s, B, P, ttft, latency_s, notes) if k.disagg else None
    if split:
        ttft, latency_s = split.ttft_s, split.ttft_s + max(O - 1, 0) * tpot
    return Estimate(
        model=s.model_info,
        hardware=s.hardware_info,
        inputs=inputs,
        weight_bytes=shape.storage.resident,
        weight_bytes_per_device=weights,
        weight_bytes_streamed=shape.streamed(B) * max(tp, ep),
        kv_bytes_per_token=shape.kv_per_token,
        kv_bytes_per_sequence=kv_sequence,
        kv_budget_bytes=max(budget, 0.0),  # 0 when the weights alone exceed the memory fraction (fits_reason says)
        max_batch=limit,
        fits=fits,
        fits_reason=fits_reason,
        critical_batch=critical,
        critical_batch_reason=critical_reason,
        ridge_point_flop_per_byte=f.ridge_point(F, W),
        prefill=prefill,
        decode=decode,
        ttft_s=ttft,
        tpot_s=tpot,
        request_latency_s=latency_s,
        output_tokens_per_s=split.requests_per_s * O if split else f.output_tokens_per_s(B, O, latency_s),
        requests_per_s=split.requests_per_s if split else B / latency_s,
        warnings=_warnings(model, P, O),
        notes=notes,
        calibrated=calibrated,
        engine=_engine_result(model, hardware, inputs, k, calibrated, notes),
        speculative=spec,
        chunked=chunk,
        prefill_cached_tokens=cached,
        comm=comm if (tp > 1 or ep > 1 or stages > 1) else None,
        pipeline=pipe,
        disagg=split,
    )


def _decode_step(shape: Shape, B: int, P: int, steps: int, F: float, W: float, link, latency, ep_link) -> Phase:
    """The mean of `steps` decode steps from context P at batch B (exact: the work is piecewise linear in the step)."""
    mean_time, mean_compute, mean_memory = f.mean_of_max_piecewise(
        lambda j: shape.decode_flops(B, P + j) / F, lambda j: shape.decode_bytes(B, P + j) / W, steps, shape.decode_breakpoints(P)
    )
    return _phase(mean_compute * F, mean_memory * W, F, W, mean_time, shape.comm_seconds(B, link, latency, ep_link))


def _calibrated(model: Model, hardware: Hardware, inputs: Inputs, shape: Shape, cached: float) -> Calibrated | None:
    """The calibrated prediction when the hardware is a measured profile and the model is dense, one device."""
    a = model.arch
    if not hardware.measured or engine_support(model) or inputs.tp > 1:
        return None
    B, P = inputs.batch, inputs.prompt_tokens
    kv_step = B * (shape.kv_cached(cached) + shape.kv_per_token)
    attention_flops = B * shape.key_flops_decode * shape.keys(cached)
    return calibrate.predict(a, hardware.measured, inputs.weight_dtype, B, P, kv_step, attention_flops, shape.prefill_attention_flops(B, P),
                             engines(hardware), inputs.engine or "eager")


def engines(hardware: Hardware) -> dict[str, Any]:
    """The engine fixed costs a profile carries: its `engines:` key, and those its raw measurement holds."""
    return {**((hardware.measured or {}).get("engines") or {}), **(hardware.engines or {})}


def _critical_batch(shape: Shape, cached: float, F: float, W: float) -> int | None:
    """Critical batch at the mean decode context: closed form for dense models; for MoE the weights read
    grow with the batch (more experts touched), so the smallest batch is searched."""
    if shape.counts is not None and shape.counts.moe_layers:
        return f.smallest_batch_where(lambda b: shape.decode_flops(b, cached) / F >= shape.decode_bytes(b, cached) / W)
    per_sequence_flops = shape.decode_flops(1, cached)
    per_sequence_kv = shape.decode_bytes(1, cached) - shape.streamed(1)
    return f.critical_batch(shape.streamed(1), per_sequence_flops, per_sequence_kv, F, W)


def _shape_notes(model: Model, tp: int) -> list[str]:
    notes = []
    a = model.arch
    if a is not None and a.num_experts:
        notes.append("MoE: a step reads the distinct experts its tokens touch, E (1 - (1 - k/E)^tokens), assuming uniform routing")
    if tp > 1 and a is not None and a.mla:
        notes.append(f"tp {tp}: MLA's latent KV cache is shared by all heads, so every device keeps all of it")
    elif tp > 1 and a is not None and tp > a.num_kv_heads:
        notes.append(f"tp {tp} > {a.num_kv_heads} KV heads: each device keeps 1 KV head, replicated {tp // a.num_kv_heads}x")
    if tp > 1:
        notes.append("tp: communication (two all-reduces per layer) is added to each step's time, not overlapped")
    return notes


def _phase(flops: float, nbytes: float, F: float, W: float, time_s: float = 0.0, comm_s: float = 0.0) -> Phase:
    """A step's roofline plus its communication; `time_s` is a mean of per-step maxima when the step stands for many."""
    compute_s, memory_s = flops / F, nbytes / W
    return Phase(
        flops=flops,
        bytes=nbytes,
        intensity_flop_per_byte=flops / nbytes,
        compute_s=compute_s,
        memory_s=memory_s,
        comm_s=comm_s,
        time_s=max(time_s, compute_s, memory_s) + comm_s,
        bound="compute" if compute_s >= memory_s else "memory",
    )


def _inputs(model: Model, hardware: Hardware, notes: list[str], args: dict) -> Inputs:
    """Validate the estimate's arguments and resolve the default dtypes."""
    for name, low in (("batch", 1), ("prompt_tokens", 1), ("output_tokens", 0), ("tp", 1)):
        value = args[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
            raise UsageError(f"expected an integer from {low} to {MAX_COUNT:.0e}, got {value!r}", name)
    tp = args["tp"]
    if tp > 1 and hardware.interconnect_bandwidth is None:
        raise UsageError(f"{hardware.id} has no interconnect_bandwidth, needed for tp > 1 (add it to its hardware YAML)", "tp")
    for name in ("memory_fraction", "compute_efficiency", "bandwidth_efficiency"):
        value = args[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_FRACTION <= value <= 1:
            raise UsageError(f"expected a fraction from {MIN_FRACTION:g} to 1, got {value!r}", name)
    # None means "the default"; a blank value is a mistake, not a request for the default.
    quant = args["quant"]
    if quant is not None and quant not in QUANTS:
        raise UsageError(f"unknown format {quant!r} (expected one of: {', '.join(QUANTS)})", "quant")
    default_weight = QUANTS[quant].compute if quant else model.dtype
    weight = _dtype("weight_dtype", default_weight if args["weight_dtype"] is None else args["weight_dtype"], DTYPE_BYTES)
    kv = _dtype("kv_dtype", model.kv_dtype if args["kv_dtype"] is None else args["kv_dtype"], {**DTYPE_BYTES, **KV_BYTES})
    bits = args["bits_per_weight"]
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, (int, float)) or not 0.5 <= bits <= 64):
        raise UsageError(f"expected a number of bits from 0.5 to 64, got {bits!r}", "bits_per_weight")
    storage = storage_for(model, quant, bits, args["weight_dtype"], weight, notes)
    compute = _default_compute(hardware, weight) if args["compute_dtype"] is None else args["compute_dtype"]
    _dtype("compute_dtype", compute, COMPUTE_DTYPES)
    if compute not in hardware.peak_flops:
        have = ", ".join(hardware.peak_flops)
        raise UsageError(f"{hardware.id} has no peak for {compute} (it has: {have})", "compute_dtype")
    if args["compute_dtype"] is None and compute != weight:
        why = "weight-only quantization" if weight in WEIGHT_ONLY else f"{hardware.id} lists no {weight} peak"
        notes.append(f"{weight} weights compute in {compute} ({why}); set the compute dtype to change it")
    return Inputs(
        batch=args["batch"],
        prompt_tokens=args["prompt_tokens"],
        output_tokens=args["output_tokens"],
        weight_dtype=weight,
        kv_dtype=kv,
        compute_dtype=compute,
        bits_per_weight=storage.bits_per_weight,
        memory_fraction=args["memory_fraction"],
        compute_efficiency=args["compute_efficiency"],
        bandwidth_efficiency=args["bandwidth_efficiency"],
        tp=tp,
        collective_latency_s=hardware.interconnect_latency if hardware.interconnect_latency is not None else DEFAULT_COLLECTIVE_LATENCY,
        engine=_engine(args["engine"], hardware),
        quant=quant,
        draft=args["draft"].id if args["draft"] is not None else None,
        **{n: args[n] for n in ("draft_tokens", "acceptance", "mtp", "cached_tokens", "prefix_hit_rate", "shared_prefix", "chunk_tokens", "ep",
                                "pp", "micro_batches", "disagg")},
    ), storage


def storage_for(model: Model, quant: str | None, bits: float | None, asked_dtype: str | None, weight: str,
                notes: list[str] | None = None) -> Storage:
    """How the weights are stored: --bits-per-weight, else --quant, else a model file's exact bytes (unless a
    weight dtype is asked for), else the weight dtype."""
    if bits is not None:
        return uniform(model, bits)
    if quant is not None:
        return quantized(model, QUANTS[quant])
    if model.weights_file is not None and asked_dtype is None:
        if notes is not None:
            notes.append(f"weights: the exact bytes of the {model.source_kind} file ({model.weights_file.bits_per_weight:.3g} bits per weight)")
        return from_file(model)
    return uniform(model, 8 * DTYPE_BYTES[weight])


PRESET_ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")  # learned from published benchmarks: roofline.calc.presets


DEVICES_PER_NODE = 8  # when the hardware YAML gives none: an HGX / DGX board


def _tier(hardware: Hardware, tp: int, inputs: Inputs, notes: list[str]) -> tuple[float | None, float]:
    """The link a tensor-parallel group's all-reduces use: the intra-node interconnect while the group fits in one
    node (devices_per_node, default 8), else the slower inter-node tier (internode_bandwidth / _latency)."""
    per_node = hardware.devices_per_node or DEVICES_PER_NODE
    if tp <= per_node:
        return hardware.interconnect_bandwidth, inputs.collective_latency_s
    if hardware.internode_bandwidth is None:  # --tp keeps working as before; the note says what was assumed
        notes.append(f"tp {tp} spans nodes of {per_node} devices but {hardware.id} gives no internode_bandwidth: its intra-node "
                     "figure is assumed, optimistic (add internode_bandwidth, e.g. 50 GB/s for 400 Gb/s InfiniBand)")
        return hardware.interconnect_bandwidth, inputs.collective_latency_s
    notes.append(f"tp {tp} spans nodes of {per_node} devices: its all-reduces run at the inter-node "
                 f"{hardware.internode_bandwidth / 1e9:.3g} GB/s per device")
    latency = hardware.internode_latency if hardware.internode_latency is not None else inputs.collective_latency_s
    return hardware.internode_bandwidth, latency


def _engine(name: str | None, hardware: Hardware) -> str | None:
    """A preset engine, or a calibrated engine the profile measured (eager is roofline's own decoder, always priced)."""
    if name is None or name == "eager" or name in PRESET_ENGINES:
        return name
    have = sorted(engines(hardware))
    if name not in have:
        measured = f"{hardware.id} measured: {', '.join(have)}" if have else f"{hardware.id} is not a profile with measured engines"
        raise UsageError(f"no measured {name!r} engine ({measured}; run `roofline measure --engine {name} --save PROFILE`; "
                         f"presets: {', '.join(PRESET_ENGINES)})", "engine")
    return name


class EngineResult(NamedTuple):
    """What an engine is predicted to achieve: from a preset (published benchmarks) or a measured profile."""

    name: str
    source: str  # "preset" or "measured"
    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float


def _engine_result(model: Model, hardware: Hardware, inputs: Inputs, knobs: Knobs, calibrated, notes: list[str]) -> EngineResult | None:
    """The engine's prediction beside the bound: a preset's efficiencies and step cost, or the measured calibration."""
    name = inputs.engine
    if name in PRESET_ENGINES and (knobs.pp > 1 or knobs.disagg):
        notes.append(f"engine {name}: no preset prediction with a pipeline or disaggregated pools (the presets were fitted on "
                     "colocated runs without pipeline stages)")
        return None
    if name in PRESET_ENGINES:
        from roofline.calc import presets

        preset = presets.load(name)
        e = estimate(model, hardware, batch=inputs.batch, prompt_tokens=inputs.prompt_tokens, output_tokens=inputs.output_tokens,
                     knobs=knobs._replace(engine=None, **presets.knobs(preset)))
        ttft, tpot, rate = presets.timings(e, preset.step_overhead_s)
        checked = f", checked on {len(preset.holdout)} held-aside figure(s)" if preset.holdout else ""
        notes.append(f"engine {name}: a preset learned from {len(preset.cases)} published benchmark case(s){checked} (engines/{name}.yaml), "
                     f"bandwidth x{preset.bandwidth_fraction:.2f}, compute x{preset.compute_fraction:.2f}, "
                     f"+{preset.step_overhead_s * 1e3:.2g} ms a step, memory fraction {preset.memory_fraction:.2f}")
        return EngineResult(name, "preset", ttft, tpot, rate)
    if calibrated is not None and name is not None:
        latency = calibrated.ttft_s + max(inputs.output_tokens - 1, 0) * calibrated.tpot_s
        return EngineResult(name, "measured", calibrated.ttft_s, calibrated.tpot_s, inputs.batch * inputs.output_tokens / latency)
    return None


def _dtype(name: str, value: str, allowed) -> str:
    if value not in allowed:
        raise UsageError(f"unknown dtype {value!r} (expected one of: {', '.join(allowed)})", name)
    return value


def _default_compute(hardware: Hardware, weight: str) -> str:
    """The weight dtype when the device has a peak for it (quantized ints: 16-bit), else bf16, fp16, fp32."""
    first = () if weight in WEIGHT_ONLY else (weight,)
    for dtype in (*first, "bf16", "fp16", "fp32"):
        if dtype in hardware.peak_flops:
            return dtype
    raise UsageError(f"{hardware.id} has no peak for {weight}, bf16, fp16 or fp32; pass one of: {', '.join(hardware.peak_flops)}", "compute_dtype")


def _fits(budget: float, limit: int | None, batch: int, weights: float, fraction: float, capacity: float) -> tuple[bool, str]:
    usable = fraction * capacity
    if budget < 0:
        return False, f"weights ({si(weights, 'B')}) exceed {fraction:g} x memory ({si(usable, 'B')})"
    if limit is not None and batch > limit:
        return False, f"batch {batch} exceeds the max batch {limit} that the KV budget holds"
    return True, "weights and the batch's KV caches fit in the memory fraction"


def _critical_reason(critical: int | None, limit: int | None, shape: Shape, context: float, F: float, W: float) -> str:
    if critical is None:
        per_sequence = shape.decode_flops(1, context) / (shape.decode_bytes(1, context) - shape.streamed(1))
        return f"decode stays memory-bound: per-sequence KV reads alone give {per_sequence:.3g} FLOP/B < ridge {F / W:.3g}"
    if limit is not None and critical > limit:
        return f"beyond the max batch {limit}: memory runs out first"
    return "decode turns compute-bound from this batch (KV traffic included)"


def _warnings(model: Model, prompt: int, output: int) -> list[str]:
    warnings = []
    if model.max_context is not None and prompt + output > model.max_context:
        warnings.append(f"prompt + output = {prompt + output} tokens exceeds {model.id}'s max_context {model.max_context}")
    w = model.weights_file
    if w is not None and model.params and abs(w.elements - model.params) > 0.01 * model.params:
        warnings.append(f"the {model.source_kind} file holds {w.elements:,} weights, the architecture {model.params:,.0f} "
                        "(a tensor the architecture does not count, or one it expects is missing)")
    return warnings


DEFAULT_DRAFT_TOKENS, DEFAULT_ACCEPTANCE, MTP_ACCEPTANCE = 4, 0.7, 0.85


def _cached_tokens(k: Knobs, prompt: int) -> int:
    """Prompt tokens served from a prefix cache: given, or the hit rate's share of the prompt."""
    if k.cached_tokens is not None and k.prefix_hit_rate is not None:
        raise UsageError("give cached tokens or a prefix hit rate, not both", "cached_tokens")
    if k.prefix_hit_rate is not None:
        if not 0 <= k.prefix_hit_rate < 1:
            raise UsageError(f"expected a share from 0 to below 1, got {k.prefix_hit_rate!r}", "prefix_hit_rate")
        return int(k.prefix_hit_rate * prompt)
    cached = k.cached_tokens or 0
    if not 0 <= cached < prompt:
        raise UsageError(f"expected 0 to {prompt - 1} cached tokens (one prompt token at least is computed), got {cached}", "cached_tokens")
    if not 0 <= k.shared_prefix <= MAX_COUNT:
        raise UsageError(f"expected a token count from 0, got {k.shared_prefix}", "shared_prefix")
    return cached


def _draft_shape(model: Model, k: Knobs, inputs: Inputs, storage: Storage) -> Shape | None:
    """The drafter's per-step work: a draft model at the target's dtypes, or the MTP module (one target layer)."""
    if k.mtp:
        from roofline.specs.params import count_params

        a = model.arch
        if a is None:
            raise UsageError("multi-token prediction needs an architecture (not a params-only model)", "mtp")
        one = a._replace(layers=1, sliding_layers=())
        module = model._replace(arch=one, counts=count_params(one), weights_file=None)
        bits = storage.bits_per_weight
        return Shape(module, bits, inputs.kv_dtype, inputs.compute_dtype, inputs.tp)
    if k.draft is not None:
        bits = 8 * DTYPE_BYTES[inputs.weight_dtype] if k.draft.dtype not in DTYPE_BYTES else 8 * DTYPE_BYTES[k.draft.dtype]
        return Shape(k.draft, bits, k.draft.kv_dtype, inputs.compute_dtype, inputs.tp)
    return None


def spec_memory(draft: Shape, batch: int, tokens: int) -> float:
    """Device memory the drafter takes: its weights and its KV cache for the batch."""
    return draft.weights + batch * draft.kv_cached(tokens) * draft.kv_share


def _check_serving(k: Knobs, draft: Shape | None) -> None:
    """The serving knobs' own ranges, checked once per setup."""
    if draft is None and (k.draft_tokens is not None or k.acceptance is not None):
        raise UsageError("draft tokens and acceptance need a draft model or --mtp", "draft_tokens")
    if k.mtp and k.draft is not None:
        raise UsageError("a draft model or multi-token prediction, not both", "mtp")
    if k.draft_tokens is not None and (isinstance(k.draft_tokens, bool) or not isinstance(k.draft_tokens, int) or not 1 <= k.draft_tokens <= 64):
        raise UsageError(f"expected 1 to 64 drafted tokens, got {k.draft_tokens!r}", "draft_tokens")
    if k.acceptance is not None and not 0 <= k.acceptance <= 1:
        raise UsageError(f"expected an acceptance from 0 to 1, got {k.acceptance!r}", "acceptance")
    for name in ("pp", "micro_batches"):
        value = getattr(k, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT):
            raise UsageError(f"expected an integer from 1, got {value!r}", name)
    if k.micro_batches is not None and k.pp == 1:
        raise UsageError("micro-batches need a pipeline (pp > 1)", "micro_batches")
    if k.pp > 1 and (draft is not None or k.chunk_tokens is not None):
        raise UsageError("a pipeline with speculative decoding or chunked prefill is not modelled: choose one", "pp")
    if k.disagg is not None:
        serving.parse_disagg(k.disagg)
        if k.chunk_tokens is not None:
            raise UsageError("disaggregated pools have no prefill in the decode steps: chunked prefill does not apply", "disagg")


def _speculative(s: Setup, B: int, context: float, notes: list[str]):
    draft, k, shape, F, W, link, latency = s.draft, s.knobs, s.shape, s.F, s.W, s.link, s.latency
    if draft is None:
        return None
    tokens = k.draft_tokens if k.draft_tokens is not None else (k.mtp if k.mtp else DEFAULT_DRAFT_TOKENS)
    a = k.acceptance if k.acceptance is not None else (MTP_ACCEPTANCE if k.mtp else DEFAULT_ACCEPTANCE)
    draft_step = max(draft.decode_flops(B, context) / F, draft.decode_bytes(B, context) / W) + draft.comm_seconds(B, link, latency)
    verify = max(shape.verify_flops(B, context, tokens + 1) / F, shape.verify_bytes(B, context, tokens + 1) / W)
    verify += shape.comm_seconds(B * (tokens + 1), link, latency)
    result = serving.speculative("mtp" if k.mtp else k.draft.id, tokens, a, draft_step, verify)
    notes.append(f"speculative decoding: {tokens} drafted, acceptance {a:g} (i.i.d.), {result.expected_tokens_per_step:.3g} tokens per "
                 "target step (Leviathan et al. 2023); priced at the mean context")
    return result


def _chunked(s: Setup, B: int, P: int, O: int, context: float, decode_step_s: float, spec, notes: list[str]):
    """Chunked prefill; with speculative decoding the chunk rides on the target's verification step."""
    k, shape, F, W = s.knobs, s.shape, s.F, s.W
    if k.chunk_tokens is None:
        return None
    C = k.chunk_tokens
    per_sequence = spec.draft_tokens + 1 if spec else 1  # tokens each running sequence puts in a target step
    if isinstance(C, bool) or not isinstance(C, int) or not B * per_sequence < C <= MAX_COUNT:
        what = f"the batch x verified tokens ({B} x {per_sequence})" if spec else f"the batch ({B})"
        raise UsageError(f"expected more tokens per step than {what}, got {C!r}", "chunk_tokens")
    room = C - B * per_sequence
    # A mixed step: the B sequences' decode (or verification) tokens at the mean context, and a chunk of `room`
    # prompt tokens in the middle of a prompt.
    chunk = min(P, room)
    flops = shape.verify_flops(B, context, per_sequence) + shape.prefill_flops(1, chunk)
    nbytes = shape.verify_bytes(B, context, per_sequence) - shape.streamed(B * per_sequence) + shape.streamed(B * per_sequence + chunk)
    nbytes += shape.kv_cached(chunk) * shape.kv_share
    mixed = max(flops / F, nbytes / W) + shape.comm_seconds(C, s.link, s.latency)
    target_step = spec.verify_s if spec else decode_step_s
    result = serving.chunked(C, B, P, O, mixed, target_step, per_sequence,
                             spec.expected_tokens_per_step if spec else 1.0, spec.draft_s if spec else 0.0)
    with_spec = " (each step a speculative verification: drafts precede it)" if spec else ""
    notes.append(f"chunked prefill: {C} tokens a step{with_spec}; {result.mixed_share:.0%} of steps carry a chunk in steady state "
                 f"(requests finish at B / O per token, each brings P prompt tokens)")
    return result


def _pipeline(s: Setup, B: int, P: int, cached: int, steps: int, notes: list[str]):
    """Pipeline parallelism over k.pp stages of the layers (see roofline.calc.serving.pipeline)."""
    k, shape, hardware = s.knobs, s.shape, s.hardware
    pp = k.pp
    m = min(k.micro_batches or pp, B)
    b = -(-B // m)  # sequences per micro-batch (the last may be smaller; priced at the largest)
    if hardware.interconnect_bandwidth is None:
        raise UsageError(f"{hardware.id} has no interconnect_bandwidth, needed for pp > 1 (add it to its hardware YAML)", "pp")
    link, latency = _tier(hardware, k.tp * pp, s.template, notes)
    prefill_b = _phase(shape.prefill_flops(b, P, cached), shape.prefill_bytes(b, P, cached), s.F, s.W,
                       comm_s=shape.comm_seconds(b * (P - cached), s.link, s.latency, s.ep_link))
    decode_b = _decode_step(shape, b, P, steps, s.F, s.W, s.link, s.latency, s.ep_link)
    message = shape.hidden * shape.activation_bytes / k.tp  # one token's activations, each tp rank sends its slice
    result = serving.pipeline(pp, m, prefill_b.time_s, decode_b.time_s, b * (P - cached) * message / link + latency,
                              b * message / link + latency, decode_b.bytes * m / pp, decode_b.flops * m / pp)
    notes.append(f"pp {pp}: {shape.layers / pp:g} layers a stage, {m} micro-batch(es) of up to {b}; prefill bubble "
                 f"{result.bubble_prefill:.0%}, decode bubble {result.bubble_decode:.0%} (a stage idles while fewer micro-batches "
                 "than stages circulate); stages assumed balanced (the lm_head's stage is heavier)")
    return result


def _disagg(s: Setup, B: int, P: int, colocated_ttft: float, latency_s: float, notes: list[str]):
    """Disaggregated prefill and decode pools (see roofline.calc.serving.disagg)."""
    k, shape, hardware = s.knobs, s.shape, s.hardware
    x, y = serving.parse_disagg(k.disagg)
    group = k.tp * k.pp
    if hardware.interconnect_bandwidth is None:
        raise UsageError(f"{hardware.id} has no interconnect_bandwidth, needed to move KV between pools", "disagg")
    link, latency = _tier(hardware, (x + y) * group, s.template, notes)
    transfer = B * shape.kv_cached(P) * shape.kv_share / k.pp / link + latency  # every device sends its share at once
    decode_time = latency_s - colocated_ttft  # (O - 1) x TPOT: the decode pool's time per batch
    result = serving.disagg(x, y, group, B, colocated_ttft, transfer, decode_time)
    notes.append(f"disagg {x}P:{y}D: {x * group} prefill + {y * group} decode devices; each request's KV "
                 f"({si(shape.kv_cached(P), 'B')}) moves once to the decode pool; fleet rate = the slower pool's "
                 f"({result.bottleneck}); the decode pool runs no prefill")
    return result


def _ep(model: Model, hardware: Hardware, k: Knobs, notes: list[str]) -> int:
    """The expert-parallel degree: MoE models only, at most one expert per device, over the tp devices or a
    multiple of them (attention and KV stay split as --tp sets them)."""
    ep, tp = k.ep, k.tp
    if isinstance(ep, bool) or not isinstance(ep, int) or not 1 <= ep <= MAX_COUNT:
        raise UsageError(f"expected an integer from 1, got {ep!r}", "ep")
    if ep == 1:
        return 1
    c = model.counts
    if c is None or not c.moe_layers:
        raise UsageError(f"{model.id} has no routed experts: expert parallelism needs a mixture-of-experts model", "ep")
    if ep > c.num_experts:
        raise UsageError(f"{ep} devices for {c.num_experts} experts: at most one expert group per device", "ep")
    if max(ep, tp) % min(ep, tp):
        raise UsageError(f"ep {ep} and tp {tp}: one must divide the other (EP runs over the tp devices or a multiple)", "ep")
    if hardware.interconnect_bandwidth is None:
        raise UsageError(f"{hardware.id} has no interconnect_bandwidth, needed for ep > 1 (add it to its hardware YAML)", "ep")
    notes.append(f"ep {ep}: {c.num_experts / ep:g} experts per device, all-to-all dispatch and combine each MoE layer; "
                 "uniform routing assumed (real load imbalance makes the busiest device slower)")
    return ep
