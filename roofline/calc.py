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
- Time of a step = max(compute, memory) with peaks scaled by the efficiency factors (1.0 = the bound).
"""


from typing import Any, NamedTuple

from roofline import formulas as f
from roofline.errors import UsageError
from roofline.specs import COMPUTE_DTYPES, DTYPE_BYTES, Hardware, Model
from roofline.units import si

SCHEMA_VERSION = 1
WEIGHT_ONLY = ("int8", "int4", "fp4")  # quantized weights default to weight-only: compute in 16 bits

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


class Phase(NamedTuple):
    """One step's work and its roofline times [FLOP, B, s]."""

    flops: float
    bytes: float
    intensity_flop_per_byte: float
    compute_s: float
    memory_s: float
    time_s: float
    bound: str  # "compute" or "memory"


class Decode(NamedTuple):
    """The mean decode step: Phase's fields (work at the mean context, time = mean of per-step maxima) and more."""

    flops: float
    bytes: float
    intensity_flop_per_byte: float
    compute_s: float
    memory_s: float
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
    streamed_params: float
    matmul_params: float


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
    weight_bytes_streamed: float
    kv_bytes_per_token: float
    kv_bytes_per_sequence: float
    kv_budget_bytes: float
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
    warnings: list[str]
    notes: list[str]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return plain(self)


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
    batch: int = 1,
    prompt_tokens: int = 1024,
    output_tokens: int = 256,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    compute_dtype: str | None = None,
    bits_per_weight: float | None = None,
    memory_fraction: float = 0.9,
    compute_efficiency: float = 1.0,
    bandwidth_efficiency: float = 1.0,
) -> Estimate:
    """Roofline estimate of serving `model` on `hardware`; see the module docstring for conventions."""
    notes: list[str] = []
    inputs = _inputs(model, hardware, notes, locals())
    peak = hardware.peak_flops[inputs.compute_dtype]
    F = peak * compute_efficiency
    W = hardware.memory_bandwidth * bandwidth_efficiency
    B, P, O = batch, prompt_tokens, output_tokens
    shape = _Shape(model, inputs)

    # Prefill: every prompt token through every matmul, the lm_head on the last position only.
    prefill_flops = B * (f.matmul_flops(shape.matmul - shape.head, P) + f.matmul_flops(shape.head, 1) + shape.causal_attention(P))
    prefill_bytes = shape.weights_streamed + B * P * shape.kv_token
    prefill = _phase(prefill_flops, prefill_bytes, F, W)

    # Decode step j at cached context P + j: linear in j, so means and the mean of max are exact.
    steps = max(O - 1, 1)
    flops_0, flops_1 = B * shape.decode_flops_per_sequence(P), B * shape.attention_per_key
    bytes_0, bytes_1 = shape.weights_streamed + B * shape.kv_token * (P + 1), B * shape.kv_token
    mean_j = (steps - 1) / 2
    d_flops, d_bytes = flops_0 + flops_1 * mean_j, bytes_0 + bytes_1 * mean_j
    mean_time = f.mean_of_max_linear(flops_0 / F, flops_1 / F, bytes_0 / W, bytes_1 / W, steps)
    step = _phase(d_flops, d_bytes, F, W, mean_time)
    tpot = step.time_s
    decode = Decode(
        **step._asdict(),
        steps=O - 1 if O > 1 else 0,
        mean_context_tokens=P + mean_j,
        tokens_per_s=B / tpot,
        tokens_per_s_per_sequence=1 / tpot,
        mbu=d_bytes / tpot / hardware.memory_bandwidth,
        mfu=d_flops / tpot / peak,
    )
    if O <= 1:
        notes.append("output_tokens <= 1: no decode step runs; decode figures are those of a step at context P")

    kv_sequence = shape.kv_token * (P + O)
    budget = f.kv_budget(memory_fraction, hardware.memory_capacity, shape.weights)
    limit = f.max_batch(budget, kv_sequence) if kv_sequence > 0 else None
    fits, fits_reason = _fits(budget, limit, B, shape.weights, memory_fraction, hardware.memory_capacity)
    critical = f.critical_batch(
        shape.weights_streamed, shape.decode_flops_per_sequence(P + mean_j), shape.kv_token * (P + mean_j + 1), F, W
    )
    return Estimate(
        model=ModelInfo(model.id, model.name, model.params, shape.streamed_params, shape.matmul),
        hardware=HardwareInfo(hardware.id, hardware.name, hardware.origin, peak, hardware.memory_bandwidth, hardware.memory_capacity),
        inputs=inputs,
        weight_bytes=shape.weights,
        weight_bytes_streamed=shape.weights_streamed,
        kv_bytes_per_token=shape.kv_token,
        kv_bytes_per_sequence=kv_sequence,
        kv_budget_bytes=budget,
        max_batch=limit,
        fits=fits,
        fits_reason=fits_reason,
        critical_batch=critical,
        critical_batch_reason=_critical_reason(critical, limit, shape, P + mean_j, F, W),
        ridge_point_flop_per_byte=f.ridge_point(F, W),
        prefill=prefill,
        decode=decode,
        ttft_s=prefill.time_s,
        tpot_s=tpot,
        request_latency_s=prefill.time_s + max(O - 1, 0) * tpot,
        warnings=_warnings(model, P, O),
        notes=notes,
    )


class _Shape:
    """Per-model quantities in SI units for the chosen dtypes."""

    def __init__(self, model: Model, inputs: Inputs):
        bytes_per_weight = inputs.bits_per_weight / 8
        kv_bytes = DTYPE_BYTES[inputs.kv_dtype]
        counts, a = model.counts, model.arch
        if counts is None or a is None:  # params-only napkin model: every parameter is a streamed matmul weight
            self.matmul = self.streamed_params = model.params
            self.head = 0.0
            self.kv_token = model.kv_bytes_per_token_given or 0.0
            self.attention_per_key = 0.0
            self.causal_attention = lambda tokens: 0.0
        else:
            self.matmul, self.streamed_params, self.head = float(counts.matmul), float(counts.streamed), float(counts.head)
            self.kv_token = f.kv_bytes_per_token(a.layers, a.num_kv_heads, a.head_dim, kv_bytes)
            self.attention_per_key = f.attention_flops(a.layers, a.num_heads, a.head_dim, 1)
            self.causal_attention = lambda tokens: f.causal_attention_flops(a.layers, a.num_heads, a.head_dim, tokens)
        self.weights = model.params * bytes_per_weight
        self.weights_streamed = self.streamed_params * bytes_per_weight

    def decode_flops_per_sequence(self, cached: float) -> float:
        """FLOPs of one decode token with `cached` tokens in its KV cache (it attends over cached + 1 keys)."""
        return f.matmul_flops(self.matmul, 1) + self.attention_per_key * (cached + 1)


def _phase(flops: float, nbytes: float, F: float, W: float, time_s: float = 0.0) -> Phase:
    """A step's roofline; `time_s` is a mean of per-step maxima when the step stands for many."""
    compute_s, memory_s = flops / F, nbytes / W
    return Phase(
        flops=flops,
        bytes=nbytes,
        intensity_flop_per_byte=flops / nbytes,
        compute_s=compute_s,
        memory_s=memory_s,
        time_s=max(time_s, compute_s, memory_s),
        bound="compute" if compute_s >= memory_s else "memory",
    )


def _inputs(model: Model, hardware: Hardware, notes: list[str], args: dict) -> Inputs:
    """Validate the estimate's arguments and resolve the default dtypes."""
    for name, low in (("batch", 1), ("prompt_tokens", 1), ("output_tokens", 0)):
        value = args[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UsageError(f"{name}: expected an integer >= {low}, got {value!r}")
    for name in ("memory_fraction", "compute_efficiency", "bandwidth_efficiency"):
        if not 0 < args[name] <= 1:
            raise UsageError(f"{name}: expected a fraction in (0, 1], got {args[name]!r}")
    weight = _dtype("weight_dtype", args["weight_dtype"] or model.dtype, DTYPE_BYTES)
    kv = _dtype("kv_dtype", args["kv_dtype"] or model.dtype, DTYPE_BYTES)
    bits = args["bits_per_weight"]
    if bits is not None and not 0 < bits <= 64:
        raise UsageError(f"bits_per_weight: expected a number of bits in (0, 64], got {bits!r}")
    compute = args["compute_dtype"] or _default_compute(hardware, weight)
    _dtype("compute_dtype", compute, COMPUTE_DTYPES)
    if compute not in hardware.peak_flops:
        have = ", ".join(hardware.peak_flops)
        raise UsageError(f"compute_dtype: {hardware.id} has no peak for {compute} (it has: {have})")
    if not args["compute_dtype"] and compute != weight:
        why = "weight-only quantization" if weight in WEIGHT_ONLY else f"{hardware.id} lists no {weight} peak"
        notes.append(f"{weight} weights compute in {compute} ({why}); set the compute dtype to change it")
    return Inputs(
        batch=args["batch"],
        prompt_tokens=args["prompt_tokens"],
        output_tokens=args["output_tokens"],
        weight_dtype=weight,
        kv_dtype=kv,
        compute_dtype=compute,
        bits_per_weight=bits if bits is not None else 8 * DTYPE_BYTES[weight],
        memory_fraction=args["memory_fraction"],
        compute_efficiency=args["compute_efficiency"],
        bandwidth_efficiency=args["bandwidth_efficiency"],
    )


def _dtype(name: str, value: str, allowed) -> str:
    if value not in allowed:
        raise UsageError(f"{name}: unknown dtype {value!r} (expected one of: {', '.join(allowed)})")
    return value


def _default_compute(hardware: Hardware, weight: str) -> str:
    """The weight dtype when the device has a peak for it (quantized ints: 16-bit), else bf16, fp16, fp32."""
    first = () if weight in WEIGHT_ONLY else (weight,)
    for dtype in (*first, "bf16", "fp16", "fp32"):
        if dtype in hardware.peak_flops:
            return dtype
    raise UsageError(f"compute_dtype: {hardware.id} has no peak for {weight}, bf16, fp16 or fp32; pass one of: {', '.join(hardware.peak_flops)}")


def _fits(budget: float, limit: int | None, batch: int, weights: float, fraction: float, capacity: float) -> tuple[bool, str]:
    usable = fraction * capacity
    if budget < 0:
        return False, f"weights ({si(weights, 'B')}) exceed {fraction:g} x memory ({si(usable, 'B')})"
    if limit is not None and batch > limit:
        return False, f"batch {batch} exceeds the max batch {limit} that the KV budget holds"
    return True, "weights and the batch's KV caches fit in the memory fraction"


def _critical_reason(critical: int | None, limit: int | None, shape: _Shape, context: float, F: float, W: float) -> str:
    if critical is None:
        per_sequence = shape.decode_flops_per_sequence(context) / (shape.kv_token * (context + 1))
        return f"decode stays memory-bound: per-sequence KV reads alone give {per_sequence:.3g} FLOP/B < ridge {F / W:.3g}"
    if limit is not None and critical > limit:
        return f"beyond the max batch {limit}: memory runs out first"
    return "decode turns compute-bound from this batch (KV traffic included)"


def _warnings(model: Model, prompt: int, output: int) -> list[str]:
    if model.max_context is not None and prompt + output > model.max_context:
        return [f"prompt + output = {prompt + output} tokens exceeds {model.id}'s max_context {model.max_context}"]
    return []
