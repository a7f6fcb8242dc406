"""The inputs of an estimate, validated once: dtypes, storage, parallel degrees, serving knobs, the links a group
uses, and the per-step shape of the model (`prepare` -> Setup). `roofline.calc.estimate.estimate_at` prices any
batch and lengths of a Setup; a sweep prepares once.
"""

from typing import Any, NamedTuple

from roofline.calc import serving
from roofline.calc.knobs import Knobs, knobs_of
from roofline.calc.shape import Shape
from roofline.calc.storage import (
    KV_BYTES,
    QUANTS,
    Storage,
    from_file,
    quantized,
    uniform,
)
from roofline.errors import UsageError
from roofline.specs.records import COMPUTE_DTYPES, DTYPE_BYTES, Hardware, Model

MAX_COUNT = 10**9  # batch, tokens, devices: beyond this the float arithmetic, not the model, would answer
MIN_FRACTION = 1e-6  # memory fraction and efficiencies: smaller ones are typos that would reach 1e300-second times
WEIGHT_ONLY = ("int8", "int4", "fp4")  # quantized weights default to weight-only: compute in 16 bits
# Per all-reduce latency when the hardware YAML gives none: small-message NCCL all-reduces within one NVLink
# node take on the order of 10 us (nccl-tests); `roofline measure --collectives` measures it.
DEFAULT_COLLECTIVE_LATENCY = 10e-6
PRESET_ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")  # learned from published benchmarks: roofline.calc.presets


DEVICES_PER_NODE = 8  # when the hardware YAML gives none: an HGX / DGX board
DEFAULT_DRAFT_TOKENS, DEFAULT_ACCEPTANCE, MTP_ACCEPTANCE = 4, 0.7, 0.85


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
    pp_link: tuple | None  # the pipeline's point-to-point link (bandwidth, latency) when pp > 1
    pools: tuple | None  # (prefill instances, decode instances, their link) when disaggregated
    notes: tuple[str, ...]
    model_info: "ModelInfo"
    hardware_info: "HardwareInfo"
    critical: dict  # (mean context, max batch) -> (critical batch, its reason): a sweep asks many batches per context
    preset: Any  # the engine's preset (roofline.calc.presets.Preset), resolved once for every point; None without one


def prepare(model: Model, hardware: Hardware, knobs: Knobs | None = None, **overrides: Any) -> Setup:
    """Validate the knobs and build the per-step model once; `estimate_at` then prices any batch and lengths."""
    k = knobs_of(knobs, overrides)
    notes: list[str] = []
    template, storage = inputs_of(
        model, hardware, notes, {"batch": 1, "prompt_tokens": 1, "output_tokens": 0, **k._asdict()}
    )
    preset = preset_for(template.engine, hardware)
    peak = hardware.peak_flops[template.compute_dtype]
    ep = ep_degree(model, hardware, k, notes)
    shape = Shape(model, storage, template.kv_dtype, template.compute_dtype, k.tp, ep)
    check_layout(model, k)
    link, latency = tier(hardware, k.tp, f"tp {k.tp}", template, notes)
    ep_link = tier(hardware, max(k.tp, ep), f"ep {ep}", template, notes) if ep > 1 else None
    draft = draft_shape(model, k, template, storage)
    check_serving(k, draft)
    pp_link = pools = None
    if (k.pp > 1 or k.disagg is not None) and hardware.interconnect_bandwidth is None:
        raise UsageError(
            f"{hardware.id} has no interconnect_bandwidth, needed for pp > 1 or disaggregated pools "
            "(add it to its hardware YAML)",
            "pp" if k.pp > 1 else "disagg",
        )
    if k.pp > 1:
        pp_link = tier(hardware, k.tp * k.pp, f"pp {k.pp} x tp {k.tp} = {k.tp * k.pp} devices", template, notes)
    if k.disagg is not None:
        x, y = serving.parse_disagg(k.disagg)
        group = (x + y) * k.tp * k.pp
        pools = (x, y, tier(hardware, group, f"the {x}P:{y}D pools' {group} devices", template, notes))
    notes += shape_notes(model, k.tp)
    model_info = ModelInfo(
        model.id,
        model.name,
        model.params,
        float(model.counts.active) if model.counts else model.params,
        shape.matmul,
        model.source_kind,
    )
    hardware_info = HardwareInfo(
        hardware.id, hardware.name, hardware.origin, peak, hardware.memory_bandwidth, hardware.memory_capacity
    )
    return Setup(
        model,
        hardware,
        k,
        template,
        storage,
        shape,
        draft,
        peak,
        peak * k.compute_efficiency,
        hardware.memory_bandwidth * k.bandwidth_efficiency,
        link,
        latency,
        ep_link,
        pp_link,
        pools,
        tuple(notes),
        model_info,
        hardware_info,
        {},
        preset,
    )


def inputs_of(model: Model, hardware: Hardware, notes: list[str], args: dict) -> Inputs:
    """Validate the estimate's arguments and resolve the default dtypes."""
    for name, low in (("batch", 1), ("prompt_tokens", 1), ("output_tokens", 0), ("tp", 1)):
        value = args[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
            raise UsageError(f"expected an integer from {low} to {MAX_COUNT:.0e}, got {value!r}", name)
    tp = args["tp"]
    if tp > 1 and hardware.interconnect_bandwidth is None:
        raise UsageError(
            f"{hardware.id} has no interconnect_bandwidth, needed for tp > 1 (add it to its hardware YAML)", "tp"
        )
    for name in ("memory_fraction", "compute_efficiency", "bandwidth_efficiency"):
        value = args[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_FRACTION <= value <= 1:
            raise UsageError(f"expected a fraction from {MIN_FRACTION:g} to 1, got {value!r}", name)
    # None means "the default"; a blank value is a mistake, not a request for the default.
    quant = args["quant"]
    if quant is not None and quant not in QUANTS:
        raise UsageError(f"unknown format {quant!r} (expected one of: {', '.join(QUANTS)})", "quant")
    if quant is None and model.quant is not None and args["weight_dtype"] is None and args["bits_per_weight"] is None:
        if model.quant not in QUANTS:
            raise UsageError(
                f"model {model.id}: key 'quant': unknown format {model.quant!r} (expected one of: {', '.join(QUANTS)})"
            )
        quant = model.quant  # the published checkpoint's storage, unless a dtype or bits are asked for
        notes.append(
            f"weights: {model.id}'s published checkpoint format, {quant} (--weight-dtype {model.dtype} for the unquantized model)"
        )
    default_weight = QUANTS[quant].compute if quant else model.dtype
    weight = _dtype(
        "weight_dtype", default_weight if args["weight_dtype"] is None else args["weight_dtype"], DTYPE_BYTES
    )
    kv = _dtype(
        "kv_dtype", model.kv_dtype if args["kv_dtype"] is None else args["kv_dtype"], {**DTYPE_BYTES, **KV_BYTES}
    )
    bits = args["bits_per_weight"]
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, (int, float)) or not 0.5 <= bits <= 64):
        raise UsageError(f"expected a number of bits from 0.5 to 64, got {bits!r}", "bits_per_weight")
    storage = storage_for(model, quant, bits, args["weight_dtype"], weight, notes)
    from_gguf = (
        model.source_kind == "gguf" and model.dtype in WEIGHT_ONLY and args["weight_dtype"] is None and bits is None
    )
    ggml = QUANTS[quant].activations if quant else "int8" if from_gguf else None  # block formats multiply in int8
    compute = _default_compute(hardware, weight, ggml) if args["compute_dtype"] is None else args["compute_dtype"]
    _dtype("compute_dtype", compute, COMPUTE_DTYPES)
    if compute not in hardware.peak_flops:
        have = ", ".join(hardware.peak_flops)
        raise UsageError(f"{hardware.id} has no peak for {compute} (it has: {have})", "compute_dtype")
    if args["compute_dtype"] is None and compute != weight:
        why = (
            "ggml block format: llama.cpp multiplies it against 8-bit activation blocks"
            if compute == ggml
            else "weight-only quantization"
            if weight in WEIGHT_ONLY
            else f"{hardware.id} lists no {weight} peak"
        )
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
        collective_latency_s=hardware.interconnect_latency
        if hardware.interconnect_latency is not None
        else DEFAULT_COLLECTIVE_LATENCY,
        engine=engine_name(args["engine"], hardware),
        quant=quant,
        draft=args["draft"].id if args["draft"] is not None else None,
        **{
            n: args[n]
            for n in (
                "draft_tokens",
                "acceptance",
                "mtp",
                "cached_tokens",
                "prefix_hit_rate",
                "shared_prefix",
                "chunk_tokens",
                "ep",
                "pp",
                "micro_batches",
                "disagg",
            )
        },
    ), storage


def storage_for(
    model: Model,
    quant: str | None,
    bits: float | None,
    asked_dtype: str | None,
    weight: str,
    notes: list[str] | None = None,
) -> Storage:
    """How the weights are stored: --bits-per-weight, else --quant, else a model file's exact bytes (unless a
    weight dtype is asked for), else the weight dtype."""
    if bits is not None:
        return uniform(model, bits)
    if quant is not None:
        return quantized(model, QUANTS[quant])
    if model.weights_file is not None and asked_dtype is None:
        if notes is not None:
            notes.append(
                f"weights: the exact bytes of the {model.source_kind} file ({model.weights_file.bits_per_weight:.3g} bits per weight)"
            )
        return from_file(model)
    return uniform(model, 8 * DTYPE_BYTES[weight])


def tier(hardware: Hardware, devices: int, group: str, inputs: Inputs, notes: list[str]) -> tuple[float | None, float]:
    """The link a group of `devices` (named `group` in the notes) communicates over: the intra-node interconnect
    while the group fits in one node (devices_per_node, default 8), else the slower inter-node tier
    (internode_bandwidth / _latency)."""
    per_node = hardware.devices_per_node or DEVICES_PER_NODE
    if devices <= per_node:
        return hardware.interconnect_bandwidth, inputs.collective_latency_s
    if hardware.internode_bandwidth is None:  # the layout keeps working as before; the note says what was assumed
        notes.append(
            f"{group} spans nodes of {per_node} devices but {hardware.id} gives no internode_bandwidth: its intra-node "
            "figure is assumed, optimistic (add internode_bandwidth, e.g. 50 GB/s for 400 Gb/s InfiniBand)"
        )
        return hardware.interconnect_bandwidth, inputs.collective_latency_s
    notes.append(
        f"{group} spans nodes of {per_node} devices: its traffic runs at the inter-node "
        f"{hardware.internode_bandwidth / 1e9:.3g} GB/s per device"
    )
    latency = hardware.internode_latency if hardware.internode_latency is not None else inputs.collective_latency_s
    return hardware.internode_bandwidth, latency


def engine_name(name: str | None, hardware: Hardware) -> str | None:
    """A preset engine that applies to the device, or a calibrated engine the profile measured (eager is roofline's
    own decoder, always priced)."""
    if name is None or name == "eager":
        return name
    if is_preset(name):
        return name  # prepare resolves its preset for the device (preset_for)
    have = sorted(engines(hardware))
    if name not in have:
        measured = (
            f"{hardware.id} measured: {', '.join(have)}"
            if have
            else f"{hardware.id} is not a profile with measured engines"
        )
        raise UsageError(
            f"no measured {name!r} engine ({measured}; run `roofline measure --engine {name} --save PROFILE`; "
            f"presets: {', '.join(PRESET_ENGINES)})",
            "engine",
        )
    return name


def is_preset(name: str) -> bool:
    """An engine priced by a preset (engines/NAME.yaml), or one the presets name without data (vllm, sglang)."""
    from roofline.calc import presets

    return name in PRESET_ENGINES or name in presets.names()


def preset_for(name: str | None, hardware: Hardware):
    """The preset pricing engine `name` on `hardware`, or None for no engine, eager or a measured one; a preset
    fitted on another backend, or an engine with none, is an error."""
    if name is None or name == "eager" or not is_preset(name):
        return None
    from roofline.calc import presets

    return presets.for_device(name, hardware)


def engines(hardware: Hardware) -> dict[str, Any]:
    """The engine fixed costs a profile carries: its `engines:` key, and those its raw measurement holds."""
    return {**((hardware.measured or {}).get("engines") or {}), **(hardware.engines or {})}


def _dtype(name: str, value: str, allowed) -> str:
    if value not in allowed:
        raise UsageError(f"unknown dtype {value!r} (expected one of: {', '.join(allowed)})", name)
    return value


def _default_compute(hardware: Hardware, weight: str, ggml: str | None = None) -> str:
    """The dtype a ggml block format multiplies in (int8) or the weight dtype, when the device has a peak for it
    (other quantized ints: 16-bit), else bf16, fp16, fp32."""
    first = (ggml,) if ggml else () if weight in WEIGHT_ONLY else (weight,)
    for dtype in (*first, "bf16", "fp16", "fp32"):
        if dtype in hardware.peak_flops:
            return dtype
    raise UsageError(
        f"{hardware.id} has no peak for {weight}, bf16, fp16 or fp32; pass one of: {', '.join(hardware.peak_flops)}",
        "compute_dtype",
    )


def shape_notes(model: Model, tp: int) -> list[str]:
    notes = []
    a = model.arch
    if a is not None and a.num_experts:
        notes.append(
            "MoE: a step reads the distinct experts its tokens touch, E (1 - (1 - k/E)^tokens), assuming uniform routing"
        )
    if tp > 1 and a is not None and a.mla:
        notes.append(f"tp {tp}: MLA's latent KV cache is shared by all heads, so every device keeps all of it")
    elif tp > 1 and a is not None and tp > a.num_kv_heads:
        notes.append(
            f"tp {tp} > {a.num_kv_heads} KV heads: each device keeps 1 KV head, replicated {tp // a.num_kv_heads}x"
        )
    if tp > 1:
        notes.append("tp: communication (two all-reduces per layer) is added to each step's time, not overlapped")
    return notes


def check_layout(model: Model, k: Knobs) -> None:
    """Refuse layouts no engine can build: tp must split the attention heads evenly (and the KV heads, or be a
    multiple of them: vLLM's rule), pp at most one layer a stage."""
    a = model.arch
    if a is None:
        return
    if k.tp > 1 and (a.num_heads % k.tp or (not a.mla and a.num_kv_heads % k.tp and k.tp % a.num_kv_heads)):
        valid = [
            t
            for t in range(1, a.num_heads + 1)
            if not a.num_heads % t and (a.mla or not a.num_kv_heads % t or not t % a.num_kv_heads)
        ]
        kv = "" if a.mla else f" and {a.num_kv_heads} KV heads"
        raise UsageError(
            f"tp {k.tp} does not split {model.id}'s {a.num_heads} attention heads{kv} evenly "
            f"(valid: {', '.join(map(str, valid))})",
            "tp",
        )
    pp = k.pp
    if not isinstance(pp, bool) and isinstance(pp, int) and pp > a.layers:
        raise UsageError(
            f"pp {pp} stages for {model.id}'s {a.layers} layers: at most one stage a layer (valid: 1 to {a.layers})",
            "pp",
        )


def ep_degree(model: Model, hardware: Hardware, k: Knobs, notes: list[str]) -> int:
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
    if c.num_experts % ep:
        valid = [e for e in range(1, c.num_experts + 1) if not c.num_experts % e]
        raise UsageError(
            f"ep {ep} does not split {model.id}'s {c.num_experts} experts evenly (valid: {', '.join(map(str, valid))})",
            "ep",
        )
    if max(ep, tp) % min(ep, tp):
        raise UsageError(
            f"ep {ep} and tp {tp}: one must divide the other (EP runs over the tp devices or a multiple)", "ep"
        )
    if hardware.interconnect_bandwidth is None:
        raise UsageError(
            f"{hardware.id} has no interconnect_bandwidth, needed for ep > 1 (add it to its hardware YAML)", "ep"
        )
    layout = (
        f"attention data-parallel in {ep // tp} groups of tp {tp}, each with its share of the sequences; all-to-all dispatch "
        "and combine each MoE layer"
        if ep > tp
        else "every device holds every token: no all-to-all, tp's all-reduce combines"
    )
    notes.append(
        f"ep {ep}: {c.num_experts / max(ep, tp):g} experts' worth per device; {layout}; uniform routing assumed "
        "(real load imbalance makes the busiest device slower)"
    )
    return ep


def draft_shape(model: Model, k: Knobs, inputs: Inputs, storage: Storage) -> Shape | None:
    """The drafter's per-step work: a draft model at the target's dtypes, or the model's MTP module."""
    if k.mtp:
        return mtp_module(model, inputs, storage)
    if k.draft is not None:
        check_draft(model, k.draft)
        bits = (
            8 * DTYPE_BYTES[inputs.weight_dtype] if k.draft.dtype not in DTYPE_BYTES else 8 * DTYPE_BYTES[k.draft.dtype]
        )
        return Shape(k.draft, bits, k.draft.kv_dtype, inputs.compute_dtype, inputs.tp)
    return None


def mtp_module(model: Model, inputs: Inputs, storage: Storage) -> Shape:
    """DeepSeek-V3's MTP module (sec. 2.2): one transformer block of the model's kind (an MoE layer when the model
    has experts), two RMSNorms and a 2h x h projection, sharing the embedding and the output head: the head is
    read every draft step but held once, the embedding neither. Stored at the model's bits per weight."""
    from roofline.specs.params import count_params

    a = model.arch
    if a is None or not a.mtp_layers:
        raise UsageError(
            f"{model.id} has no multi-token-prediction module (num_nextn_predict_layers: 0): use a draft model "
            "(--draft) instead",
            "mtp",
        )
    one = a._replace(layers=1, sliding_layers=(), first_dense_layers=0)
    c = count_params(one)
    h = a.hidden_size
    c = c._replace(
        embedding=0, attention=c.attention + 2 * h * h, norms=c.norms + 2 * h * (2 if a.norm == "layernorm" else 1)
    )
    b = storage.bits_per_weight / 8
    held = c.total - (0 if c.tied else c.head)  # the shared head is the model's, already resident
    module = Storage(held * b, c.streamed(0) * b, (c.expert + c.expert_biases) * b, storage.bits_per_weight)
    return Shape(
        model._replace(arch=one, counts=c, weights_file=None), module, inputs.kv_dtype, inputs.compute_dtype, inputs.tp
    )


def check_draft(model: Model, draft: Model) -> None:
    """A draft model proposes tokens the target verifies: both need one vocabulary (vLLM refuses unequal sizes)."""
    if model.arch is not None and draft.arch is not None and model.arch.vocab_size != draft.arch.vocab_size:
        raise UsageError(
            f"draft {draft.id} has a vocabulary of {draft.arch.vocab_size:,} tokens, {model.id} {model.arch.vocab_size:,}: "
            "speculative decoding needs the target's tokenizer",
            "draft",
        )


def check_serving(k: Knobs, draft: Shape | None) -> None:
    """The serving knobs' own ranges, checked once per setup."""
    if draft is None and (k.draft_tokens is not None or k.acceptance is not None):
        raise UsageError("draft tokens and acceptance need a draft model or --mtp", "draft_tokens")
    if k.mtp and k.draft is not None:
        raise UsageError("a draft model or multi-token prediction, not both", "mtp")
    if k.draft_tokens is not None and (
        isinstance(k.draft_tokens, bool) or not isinstance(k.draft_tokens, int) or not 1 <= k.draft_tokens <= 64
    ):
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
    if k.disagg is not None and k.chunk_tokens is not None:
        raise UsageError(
            "disaggregated pools have no prefill in the decode steps: chunked prefill does not apply", "disagg"
        )
