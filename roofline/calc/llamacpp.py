"""llama.cpp priced with its own measured profile (`roofline measure --engine llamacpp`): what its CPU/GPU backend
achieves per weight type here, never a datasheet fraction.

A llama.cpp step (one llama_decode: decode tokens and prompt tokens together, split in even ubatches of at most
512) runs every matrix with M rows. Its time, per ubatch:
    fixed + sum over weight types T of matrix bytes_T x s_T(M, width) + head bytes x s(logit rows)
          + (vector bytes + KV bytes) x s_F16(1)
where s_T(M) [s/B] is the measured time per streamed weight byte of probe models at M rows (M = 1 ... 16 from
llama-batched-bench decode steps, 128 and 512 from llama-bench prompt processing): at M = 1 it is 1 / the
achieved bandwidth, at large M it is (2 x M / bytes per weight) / the achieved FLOP/s. Two probes, hidden 512 and
1024, both far beyond the cache, give it at two widths; a model's is interpolated log-log in its hidden size
(narrower layers run more, smaller matrices per byte, slower), unless the profile also probed the model's own layer
shape (`measure --engine llamacpp --model`), whose times then price every model of that width. Prompts are measured
on shallower probes and priced at the depth of the model's weights (`prompt_depth_factor`). Attention FLOPs run at
the step's achieved matmul FLOP/s; the fixed cost is per step + layers x per layer (a small in-cache probe at two
depths); vectors (norms) and the KV cache are read once at the f16 decode rate. Types the profile never ran are
priced with the measured type closest in bits per weight: its time per weight where it computes, per byte where it
streams; and say so.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from roofline.calc.interpolation import interpolate

UBATCH = 512  # llama.cpp's default n_ubatch: a larger batch runs as several graph computes, each reading the weights
BITS = {  # bits per weight of each ggml type (block bytes x 8 / block size; ggml's type table)
    "F32": 32.0,
    "F16": 16.0,
    "BF16": 16.0,
    "Q8_0": 8.5,
    "Q6_K": 6.5625,
    "Q5_1": 6.0,
    "Q5_0": 5.5,
    "Q5_K": 5.5,
    "Q4_1": 5.0,
    "Q4_0": 4.5,
    "Q4_K": 4.5,
    "IQ4_NL": 4.5,
    "IQ4_XS": 4.25,
    "Q3_K": 3.4375,
    "Q2_K": 2.625,
}
BY_DTYPE = {"fp32": "F32", "fp16": "F16", "bf16": "BF16", "int8": "Q8_0", "fp8": "Q8_0", "int4": "Q4_0"}


class Weights(NamedTuple):
    """What a step streams, by ggml type [B]: the layers' matrices, the lm_head apart (it runs fewer rows), and the
    vectors (norms, biases: read once a graph compute, whatever the rows)."""

    layers: dict[str, float]
    head: tuple[str, float]
    vectors: float = 0.0


def weights_of(model: Any, shape: Any, dtype: str) -> Weights:
    """A model's streamed weights by type: a GGUF file's own, else all in the type of its weight dtype (the lm_head
    from the shape's counts)."""
    w = model.weights_file
    if w is not None and w.kind == "gguf" and w.streamed_by_dtype:
        layers = {t: float(b) for t, b in w.streamed_by_dtype.items()}
        head_type, head = w.head
        if head_type:
            layers[head_type] -= head
        vectors = w.streamed_bytes - sum(w.streamed_by_dtype.values())
        return Weights({t: b for t, b in layers.items() if b > 0}, (head_type or "F16", float(head)), float(vectors))
    kind = BY_DTYPE.get(dtype, "F16")
    head = shape.head * BITS[kind] / 8
    return Weights({kind: shape.streamed(1) - head}, (kind, head))


def measured_type(profile: dict[str, Any], kind: str) -> str:
    """The profile's type that prices `kind`: itself when measured, else the measured one nearest in bits/weight."""
    types = profile["types"]
    if kind in types:
        return kind
    bits = BITS.get(kind, 16.0)
    return min(types, key=lambda t: (abs(math.log(BITS.get(t, 16.0) / bits)), t))


def own_entry(entry: dict[str, Any], width: float) -> dict[str, Any] | None:
    """A measured type's probe of a model's own layer shape at `width` (`at_width`, keyed by the hidden size)."""
    return {str(w): e for w, e in (entry.get("at_width") or {}).items()}.get(str(round(width)))


def own_widths(profile: dict[str, Any], weights: Weights, width: float) -> list[str]:
    """The measured types pricing `weights` that have a probe of a model's own layer shape at `width`."""
    kinds = {measured_type(profile, k) for k in {*weights.layers, weights.head[0]}}
    return sorted(k for k in kinds if own_entry(profile["types"][k], width))


def stand_ins(profile: dict[str, Any], weights: Weights) -> dict[str, str]:
    """Unmeasured type -> the measured type pricing it (empty when every type was measured)."""
    kinds = {*weights.layers, weights.head[0]}
    return {k: measured_type(profile, k) for k in sorted(kinds) if measured_type(profile, k) != k}


def seconds_per_byte(
    profile: dict[str, Any], kind: str, rows: float, width: float, working_set: float | None = None
) -> float:
    """s_T(M, width) [s/B]: the measured type's (`measured_type`) at M rows, as a type it stands in for runs it
    (`stand_in_seconds_per_byte`); prompts at the depth of a model whose weights are `working_set` bytes
    (`prompt_depth_factor`; None: the prompt probes' own)."""
    measured = measured_type(profile, kind)
    s = _measured_seconds_per_byte(profile, measured, rows, width, working_set)
    if measured == kind:
        return s
    streaming = _measured_seconds_per_byte(profile, measured, 1, width)
    return stand_in_seconds_per_byte(s, streaming, BITS.get(measured, 16.0), BITS.get(kind, 16.0))


def _measured_seconds_per_byte(
    profile: dict[str, Any], kind: str, rows: float, width: float, working_set: float | None = None
) -> float:
    """A measured type's s_T(M, width) [s/B]: a probe of a model's own layer shape at this width when the profile
    has one (`measure --engine llamacpp --model`: llama.cpp's multi-row kernels run rows that are not a multiple
    of 256 slower, which no other width shows); else the wide probe's at M rows times the narrow probe's ratio to it
    at M rows, raised to the model's share of the way from the wide to the narrow width in log hidden size (held
    beyond either). Its prompt rows times `prompt_depth_factor`."""
    entry = profile["types"][kind]
    depth = prompt_depth_factor(entry.get("prompt_depth"), working_set)
    own = own_entry(entry, width)
    if own:
        # its prompts ran on prompt_bytes of the model's own layers, not on the shallow probes' bytes
        at = own.get("prompt_bytes")
        own_depth = depth / prompt_depth_factor(entry.get("prompt_depth"), at) if at and working_set else depth
        return interpolate(_points(own["seconds_per_byte"], own_depth), rows)
    s = interpolate(_points(entry["seconds_per_byte"], depth), rows)
    narrow = _points(entry.get("narrow_seconds_per_byte") or {}, depth)
    if not narrow:
        return s
    return width_rule(interpolate(narrow, rows), s, *profile["widths"], width)


def prompt_depth_factor(depth: dict[str, float] | None, working_set: float | None) -> float:
    """How much slower a byte of a prompt runs when the model's weights are `working_set` bytes [B] than in the
    shallow prompt probes: 1 at the shallow probe's bytes, the measured ratio (deep / shallow, at least 1: more
    weights never stay in cache better) at the deep probe's, log-log between, held beyond either. Between two
    passes a shallow model's weights partly stay in the last-level cache, a deep one's do not (measured:
    docs/guides/llamacpp.md, Depth)."""
    if not depth or working_set is None:
        return 1.0
    return held_loglog(1.0, max(depth["ratio"], 1.0), depth["shallow_bytes"], depth["deep_bytes"], working_set)


def stand_in_seconds_per_byte(s: float, streaming: float, bits: float, kind_bits: float) -> float:
    """Seconds per byte [s/B] of a type `kind_bits` wide priced by a measured one `bits` wide that takes `s` a byte
    at these rows and `streaming` a byte at one row: the measured type's kernels, streaming the priced type's bytes,
    time per weight = s x bits - streaming x bits + streaming x kind_bits (per weight, what the kernels compute
    stays; what they stream scales with the bits; roofline additive in compute and traffic). At one row it is the
    measured type's time per byte; at prompts, its time per weight."""
    return (max(s, streaming) * bits + streaming * (kind_bits - bits)) / kind_bits


def width_rule(narrow: float, wide: float, low: float, high: float, width: float) -> float:
    """Seconds per byte at `width` [s/B], log-log between (low, narrow) and (high, wide), held beyond either (why
    held: docs/guides/llamacpp.md, Width)."""
    return held_loglog(narrow, wide, low, high, width)


def held_loglog(at_low: float, at_high: float, low: float, high: float, x: float) -> float:
    """The line through (low, at_low) and (high, at_high) in log-log, held at either end beyond it."""
    share = min(max(math.log(high / x) / math.log(high / low), 0.0), 1.0)  # 1 at low, 0 at high
    return at_high * (at_low / at_high) ** share


PROMPT_ROWS = 128  # the profile's shortest prompt (llama-bench): the rows from which prompt_depth_factor applies


def _points(table: dict[str, float], depth: float = 1.0) -> list[tuple[float, float]]:
    """(rows, s/B) sorted by rows, prompt rows times `depth`."""
    return sorted((float(m), s * (depth if float(m) >= PROMPT_ROWS else 1.0)) for m, s in table.items())


def fixed_seconds(profile: dict[str, Any], weights: Weights, layers: int) -> float:
    """per step + layers x per layer, of the type holding most of the bytes."""
    main = measured_type(profile, max(weights.layers, key=weights.layers.get))
    entry = profile["types"][main]
    return entry["per_step_s"] + layers * entry["per_layer_s"]


class StepParts(NamedTuple):
    """A step's seconds in its three parts."""

    fixed_s: float  # per step + layers x per layer, and the vectors read, each ubatch
    matmul_s: float  # the layers' matrices and the lm_head
    attention_s: float  # attention FLOPs at the step's achieved FLOP/s, and the KV bytes


def step_parts(
    profile: dict[str, Any],
    weights: Weights,
    layers: int,
    width: float,
    rows: int,
    logit_rows: int,
    matmul_flops: float,
    attention_flops: float,
    kv_bytes: float,
) -> StepParts:
    """One llama_decode of `rows` tokens, `logit_rows` of them through the lm_head: ceil(rows / UBATCH) even
    ubatches, each a graph compute paying the fixed cost and reading the weights; matmuls at the measured time per
    byte, attention at the same achieved FLOP/s, KV bytes at the f16 decode time per byte (llama.cpp's default
    cache type)."""
    parts = max(-(-rows // UBATCH), 1)
    each, logits_each = -(-rows // parts), -(-logit_rows // parts)
    head_type, head = weights.head
    working_set = sum(weights.layers.values()) + head
    matmuls = sum(b * seconds_per_byte(profile, t, each, width, working_set) for t, b in weights.layers.items())
    # The lm_head runs in the ubatches holding logit rows only (a prompt's: its last one).
    logits = min(logit_rows, parts) * head * seconds_per_byte(profile, head_type, logits_each, width, working_set)
    rate = matmul_flops / parts / matmuls if matmuls > 0 else float("inf")
    read = seconds_per_byte(profile, "F16", 1, width)  # streaming once: the cache (f16) and the vectors
    attention = attention_flops / rate + kv_bytes * read
    fixed = parts * (fixed_seconds(profile, weights, layers) + weights.vectors * read)
    return StepParts(fixed, parts * matmuls + logits, attention)


def step_seconds(*args: Any) -> float:
    """step_parts' total [s]."""
    return sum(step_parts(*args))
