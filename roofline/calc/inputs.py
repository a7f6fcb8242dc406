"""The inputs of an estimate, validated in one pass into one record: counts and fractions, dtypes, the weights'
storage, the compute dtype, the engine, and each serving feature's own knobs (its module's `check`). The batch and
lengths are filled in per point by roofline.calc.estimate.estimate_at.
"""

from typing import Any, NamedTuple

from roofline.calc.checks import count, fraction
from roofline.calc.knobs import Knobs
from roofline.calc.serving import chunked, disagg, pipeline, prefix, speculative
from roofline.calc.storage import KV_BYTES, QUANTS, Storage, from_file, quantized, uniform
from roofline.errors import UsageError
from roofline.specs.records import COMPUTE_DTYPES, DTYPE_BYTES, Hardware, Model

WEIGHT_ONLY = ("int8", "int4", "fp4")  # quantized weights default to weight-only: compute in 16 bits
# Per all-reduce latency when the hardware YAML gives none: small-message NCCL all-reduces within one NVLink
# node take on the order of 10 us (nccl-tests); `roofline measure --collectives` measures it.
DEFAULT_COLLECTIVE_LATENCY = 10e-6
PRESET_ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")  # learned from published benchmarks: roofline.calc.presets


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


SERVING = (
    "draft_tokens",
    "acceptance",
    "mtp",
    "cached_tokens",
    "prefix_hit_rate",
    "shared_prefix",
    "chunk_tokens",
    "pp",
    "micro_batches",
    "disagg",
)


def resolve(model: Model, hardware: Hardware, k: Knobs, notes: list[str]) -> tuple[Inputs, Storage]:
    """Every knob checked once, the default dtypes and the storage resolved: (Inputs at batch 1, prompt 1,
    output 0, the weights' Storage). Notes say what was assumed."""
    tp = count(k.tp, "tp")
    count(k.ep, "ep")
    if tp > 1 and hardware.interconnect_bandwidth is None:
        raise UsageError(
            f"{hardware.id} has no interconnect_bandwidth, needed for tp > 1 (add it to its hardware YAML)", "tp"
        )
    for name in ("memory_fraction", "compute_efficiency", "bandwidth_efficiency"):
        fraction(getattr(k, name), name)
    for feature in (prefix, speculative, chunked, pipeline, disagg):
        feature.check(k)
    quant = _quant(model, k, notes)
    # None means "the default"; a blank value is a mistake, not a request for the default.
    default_weight = QUANTS[quant].compute if quant else model.dtype
    weight = _dtype("weight_dtype", default_weight if k.weight_dtype is None else k.weight_dtype, DTYPE_BYTES)
    kv = _dtype("kv_dtype", model.kv_dtype if k.kv_dtype is None else k.kv_dtype, {**DTYPE_BYTES, **KV_BYTES})
    bits = k.bits_per_weight
    if bits is not None:
        fraction(bits, "bits_per_weight", 0.5, 64, "a number of bits")
    storage = storage_for(model, quant, bits, k.weight_dtype, weight, notes)
    compute = _compute(model, hardware, k, quant, weight, notes)
    latency = hardware.interconnect_latency
    return Inputs(
        batch=1,
        prompt_tokens=1,
        output_tokens=0,
        weight_dtype=weight,
        kv_dtype=kv,
        compute_dtype=compute,
        bits_per_weight=storage.bits_per_weight,
        memory_fraction=k.memory_fraction,
        compute_efficiency=k.compute_efficiency,
        bandwidth_efficiency=k.bandwidth_efficiency,
        tp=tp,
        collective_latency_s=latency if latency is not None else DEFAULT_COLLECTIVE_LATENCY,
        ep=k.ep,
        engine=engine_name(k.engine, hardware),
        quant=quant,
        draft=k.draft.id if k.draft is not None else None,
        **{name: getattr(k, name) for name in SERVING},
    ), storage


def _quant(model: Model, k: Knobs, notes: list[str]) -> str | None:
    """The named weight format: asked for, else the model's published checkpoint format unless a dtype or bits are."""
    if k.quant is not None:
        if k.quant not in QUANTS:
            raise UsageError(f"unknown format {k.quant!r} (expected one of: {', '.join(QUANTS)})", "quant")
        own = QUANTS[k.quant].compute
        if k.weight_dtype is not None and k.weight_dtype != own:
            raise UsageError(f"{k.quant} weights are {own}, not {k.weight_dtype}: give one of the two", "weight_dtype")
        if k.bits_per_weight is not None:
            raise UsageError(f"{k.quant} sets the bits per weight: give one of the two", "bits_per_weight")
        counts = model.counts
        if QUANTS[k.quant].expert_bits is not None and not (counts is not None and counts.moe_layers):
            raise UsageError(
                f"{k.quant} quantizes routed experts only, and {model.id} has none (mxfp4 quantizes every linear)",
                "quant",
            )
        return k.quant
    if model.quant is None or k.weight_dtype is not None or k.bits_per_weight is not None:
        return None
    if model.quant not in QUANTS:
        raise UsageError(
            f"model {model.id}: key 'quant': unknown format {model.quant!r} (expected one of: {', '.join(QUANTS)})"
        )
    notes.append(
        f"weights: {model.id}'s published checkpoint format, {model.quant} (--weight-dtype {model.dtype} for "
        "the unquantized model)"
    )
    return model.quant


def _compute(model: Model, hardware: Hardware, k: Knobs, quant: str | None, weight: str, notes: list[str]) -> str:
    """The compute dtype: asked for, else the one the weights multiply in on this device (said in a note)."""
    from_gguf = (
        model.source_kind == "gguf"
        and model.dtype in WEIGHT_ONLY
        and k.weight_dtype is None
        and k.bits_per_weight is None
    )
    ggml = QUANTS[quant].activations if quant else "int8" if from_gguf else None  # block formats multiply in int8
    compute = _default_compute(hardware, weight, ggml) if k.compute_dtype is None else k.compute_dtype
    _dtype("compute_dtype", compute, COMPUTE_DTYPES)
    if compute not in hardware.peak_flops:
        raise UsageError(
            f"{hardware.id} has no peak for {compute} (it has: {', '.join(hardware.peak_flops)})", "compute_dtype"
        )
    if k.compute_dtype is None and compute != weight:
        why = (
            "ggml block format: llama.cpp multiplies it against 8-bit activation blocks"
            if compute == ggml
            else f"ggml block format: llama.cpp multiplies it in {ggml}, for which {hardware.id} lists no peak"
            if ggml
            else "weight-only quantization"
            if weight in WEIGHT_ONLY
            else f"{hardware.id} lists no {weight} peak"
        )
        notes.append(f"{weight} weights compute in {compute} ({why}); set the compute dtype to change it")
    return compute


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
                f"weights: the exact bytes of the {model.source_kind} file "
                f"({model.weights_file.bits_per_weight:.3g} bits per weight)"
            )
        return from_file(model)
    return uniform(model, 8 * DTYPE_BYTES[weight])


def engine_name(name: str | None, hardware: Hardware) -> str | None:
    """A preset engine that applies to the device, or a calibrated engine the profile measured (eager is roofline's
    own decoder, always priced)."""
    if name is None or name == "eager" or is_preset(name):
        return name  # roofline.calc.prepare resolves a preset for the device
    have = measured_engines(hardware)
    if name not in have:
        measured = (
            f"{hardware.id} measured: {', '.join(have)}"
            if have
            else f"{hardware.id} is not a profile with measured engines"
        )
        raise UsageError(
            f"no measured {name!r} engine ({measured}; run `roofline measure --engine {name} --save "
            f"PROFILE`; presets: {', '.join(preset_names())})",
            "engine",
        )
    return name


def preset_names() -> list[str]:
    """The names `--engine` takes for a preset: the engines, and engines/*.yaml other than a backend's variant
    (llamacpp-cuda is chosen by `--engine llamacpp` on an NVIDIA device)."""
    from roofline.specs import presets

    variants = tuple(f"-{b}" for b in presets.BACKENDS)
    return sorted({*PRESET_ENGINES, *(n for n in presets.names() if not n.endswith(variants))})


def is_preset(name: str) -> bool:
    """An engine priced by a preset (engines/NAME.yaml), or one the presets name without data (vllm, sglang)."""
    from roofline.specs import presets

    return name in PRESET_ENGINES or name in presets.names()


def engine_costs(hardware: Hardware) -> dict[str, Any]:
    """The engine fixed costs a profile carries: its `engines:` key, and those its raw measurement holds. An engine
    timed in a second dtype has those under NAME@DTYPE (measure --engine --dtype: engine_costs_for picks)."""
    return {**((hardware.measured or {}).get("engines") or {}), **(hardware.engines or {})}


def engine_costs_for(hardware: Hardware, name: str, dtype: str) -> dict[str, Any] | None:
    """The fixed costs the profile holds for engine `name` timed in `dtype` where it has them (under NAME, or
    NAME@DTYPE beside another dtype's; the profile's `engines:` before its raw measurement's, so a save wins over
    what a full measure timed, and neither hides the other's dtype), else under NAME in whatever dtype they were
    timed (estimate notes it), else None. An engine's costs differ by dtype: transformers at bf16 cost 12.7 ms a
    step where fp32's 8.4 priced it (SmolLM2-135M, a 2-core Zen 4 VM, 2026-12-07)."""
    sources = (hardware.engines or {}, (hardware.measured or {}).get("engines") or {})
    held = [s[key] for s in sources for key in (name, f"{name}@{dtype}") if s.get(key) is not None]
    return next((c for c in held if costs_timed_in(c) == dtype), held[0] if held else None)


def costs_timed_in(costs: dict[str, Any]) -> str:
    """The dtype an engine's stored costs were timed in: their `dtype`, fp32 (measure --engine's default) for costs
    saved before it was recorded."""
    return costs.get("dtype") or "fp32"


def measured_engines(hardware: Hardware) -> list[str]:
    """The engines a profile measured, by name (an engine timed in several dtypes once)."""
    return sorted({n.split("@")[0] for n in engine_costs(hardware)})


def _dtype(name: str, value: Any, allowed) -> str:
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
