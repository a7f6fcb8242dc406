"""A calibrated prediction from a measured profile: what a plain eager PyTorch step achieves on that machine.

The roofline bounds a step; real small-batch steps run below both roofs. This model prices each part of a
decode step with the model-independent figures `roofline measure` records, never a factor fitted to the
model being predicted:
- every linear layer (and the lm_head) with the decode-shaped matmul curve: FLOP/s of F.linear with M rows
  over cold weights, interpolated log-log in M and in the row length k (short rows stream slower), scaled
  for tall weights (the lm_head) by the measured tall series; a weight smaller than a layer-sized one (narrow
  K/V projections) costs a call's own cost, from the small series, plus its values at the layer pace; a row
  length whose larger M the budget skipped rises as the nearest full one does; and beyond the curve's largest M
  toward the shape scan's LLM-shaped matmuls (tokens x hidden x out, as a prefill runs, each at its typical rate,
  the fastest at each M; its best square's typical rate where none lies beyond the curve); a decode step's
  linears are then carried from the curve's cold set to the step's own working set by the read ladder
  (roofline.calc.cache.carried) and never priced faster than their FLOPs at the best square-matmul rate;
- attention with the measured decode attention kernel (SDPA with one query): max(FLOPs / its FLOP/s, KV
  bytes / its bytes/s), FLOP/s from a 4:1 GQA shape and bytes/s from an MHA shape;
- prefill attention (many queries at once) at the measured causal prefill attention rate for the prompt's length
  (older profiles: the best square's typical rate), and its elementwise kernels over every prompt token at their
  measured bytes/s (roofline.calc.elementwise; older profiles: not priced);
- every other kernel (norms, rotary, cache writes, activations, residual adds, the linears' own dispatch, ...)
  as the engine's fixed cost per layer and per step (a prefill pays it once too), measured by timing the
  engine itself on tiny-width models of two depths (roofline.measure.engine_costs); for older profiles without
  it, the fixed cost of one tiny eager op counted `ops_per_layer` times.
Dense attention and MLP only (no MoE, MLA), one device.
"""

import math
from typing import Any, NamedTuple

from roofline.calc import elementwise
from roofline.calc import formulas as f
from roofline.calc.cache import at_memory, carried, curve_bytes, ladder
from roofline.calc.interpolation import interpolate
from roofline.specs.params import Architecture
from roofline.specs.records import DTYPE_BYTES


class Calibrated(NamedTuple):
    """Calibrated times [s]; the decode parts are those of the mean decode step."""

    ttft_s: float
    tpot_s: float
    decode_linear_s: float
    decode_attention_s: float
    decode_overhead_s: float
    basis: str
    engine: str = "eager"  # whose fixed costs: roofline's own decoder ("eager") or a measured engine


def ops_per_layer(a: Architecture) -> int:
    """Kernels other than the linears in one decoder layer of a plain eager step (roofline.engine.Decoder):
    2 norms, 2 KV-cache writes, attention, the head merge copy, 2 residual adds, the MLP activation
    (gated: silu and a multiply), rotary (2 table lookups and 4 kernels for each of q and k) and the extra
    norms of 4-norm layers."""
    rope = 10 if a.position_embeddings == "rope" else 0
    activation = 2 if a.mlp == "gated" else 1
    return 2 + 2 + 1 + 1 + 2 + activation + rope + (a.norms_per_layer - 2)


OPS_PER_STEP = 5  # embedding lookup, positions, final norm, argmax, position index


def curve_index(
    curve: list[dict[str, Any]], anchors: list[tuple[float, float]] = (), fallback: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The curve as layer-sized series {k: [(M, FLOP/s), ...]} with their rows per weight, the tall series (a
    larger n at one k) and the small one (points marked series: small) when measured; beyond each layer
    series' largest M the rate rises toward the shape scan's `anchors` (M, FLOP/s; scan_anchors), each one
    beyond the last point and faster than it, or toward `fallback` (the best square, at its typical rate) where
    none is: a full CPU
    curve reaches M = 256, where the scan's only LLM shape that fit the budget may sit."""
    series: dict[tuple[int, int], list[tuple[float, float]]] = {}
    small: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for p in curve:
        into = small if p.get("series") == "small" else series
        into.setdefault((p["k"], p.get("n", 0)), []).append((p["m"], p["flop_per_s"]))
    layer: dict[int, list[tuple[float, float]]] = {}
    rows: dict[int, int] = {}
    tall = None
    for (k, n), points in sorted(series.items()):
        points.sort()
        if k in layer:
            tall = (k, n, points)
            continue
        layer[k], rows[k] = points, n
    _fill_cut_short(layer)
    for points in layer.values():
        measured = len(points)
        for anchor in anchors:
            if _rises(points, anchor):
                points.append(anchor)
        if fallback and len(points) == measured and _rises(points, fallback):
            points.append(fallback)
    found = [(k, n, sorted(points)) for (k, n), points in small.items() if k in layer]
    return {"layer": layer, "rows": rows, "tall": tall, "small": found[0] if found else None}


def _fill_cut_short(layer: dict[int, list[tuple[float, float]]]) -> None:
    """Give each layer series the budget cut short (its larger M skipped) the rise of the nearest row length (log k;
    of two as near, the shorter) that reached farthest, from its own last point, instead of a straight line from
    there to the prefill anchors: on a 2-core AVX2 VM the quick k = 4096 series had M = 1 only (6.8 GFLOP/s), so
    M = 4 at k = 5632 was priced 15.4 on the way to a 128-row anchor (80 GFLOP/s), where it ran 8.6."""
    farthest = max((points[-1][0] for points in layer.values()), default=0.0)
    full = [k for k, points in layer.items() if points[-1][0] == farthest]
    for k, points in layer.items():
        last, rate = points[-1]
        if last == farthest:
            continue
        ref = layer[min(full, key=lambda x: abs(math.log(x / k)))]
        scale = rate / interpolate(ref, last)
        points += [(m, r * scale) for m, r in ref if m > last]


def _rises(points: list[tuple[float, float]], anchor: tuple[float, float]) -> bool:
    """Whether `anchor` (M, FLOP/s) lies beyond a series' last point and is faster than it."""
    return anchor[0] > points[-1][0] and anchor[1] > points[-1][1]


def typical(entry: dict[str, Any]) -> float:
    """A matmul entry's typical rate [FLOP/s]: the median of its calls (or rounds), else its best."""
    return entry.get("median_flop_per_s") or entry["best_flop_per_s"]


def scan_anchors(matmul: dict[str, Any]) -> list[tuple[float, float]]:
    """(M, FLOP/s) points the decode curve rises toward beyond its largest M: the shape scan's LLM-shaped matmuls
    (M tokens x k in x n out, as a prefill runs), each at its typical rate (the median of its calls), the fastest
    at each M, else its best square's typical rate. A square's M is no prompt's: a 1536^3 matmul ran 2.85 TFLOP/s
    in bf16 on an AMX VM, the 256 x 4096 x 4096 one 2.14.

    Typical, not best: a prefill is priced at the rate it will most likely run at. On a 2-core AMX Xeon VM
    (2026-12-06) bf16 matmul switched between two speeds every 0.5-3 s (1536^3: ~700 and ~2000 GFLOP/s, the slow
    one most of the time); a quick profile's best calls caught the fast one (1536^3 best 2017, median 748;
    128 x 1024 x 4096 1095 and 648) and priced 23 of 24 held-out prefills 1.1-2.3x fast, 13 of 24 within 15% from
    the medians. Where a machine is steady the two differ by the rounds' few percent.

    The scan times each shape once, at one moment; the interleaved rounds time its best square again. Each shape
    keeps its rate relative to the square timed in the same scan and takes the rounds' level (their median over
    the square's median in the scan): a quick bf16 scan on a 2-core Zen 5 VM caught a slow moment (square 306
    GFLOP/s, 128 x 1024 x 4096 276) that its rounds did not (426), where a run minutes before had 433 and 403. A
    shape the rounds timed too (`rounds` in its entry: the first LLM shape) keeps its own median over scan and
    rounds (`median_over`; in a profile saved before 2026-12-06 the scan's median alone). Scaling it by the
    square's level instead priced the second AMX run's prefills 0.58-0.97 (3 of 24 within 15%, 17 unscaled): on a
    machine at two speeds the square's scan and rounds can land in different speeds (354 against 639 GFLOP/s)."""
    shapes = matmul.get("shapes") or []
    square = next((typical(s) for s in shapes if s["shape"] == matmul["best_shape"]), None)
    level = typical(matmul) / square if square else 1.0
    anchors: dict[float, float] = {}
    for s in shapes:
        if len(set(s["shape"])) > 1:
            m = float(s["shape"][0])
            anchors[m] = max(anchors.get(m, 0.0), typical(s) * (1.0 if "rounds" in s else level))
    if anchors:
        return sorted(anchors.items())
    return [(float(matmul["best_shape"][0]), typical(matmul))]


def prefill_attention_rate(kernel: dict[str, Any], prompt: float, fallback: float) -> float:
    """FLOP/s of causal attention over a `prompt`-token prefill: the measured prefill shapes, log-log in the prompt
    length (held beyond), else `fallback` (profiles measured before them)."""
    points = sorted((p["prompt"], p["flop_per_s"]) for p in kernel.get("prefill") or [])
    return interpolate(points, prompt) if points else fallback


def linear_rate(index: dict[str, Any], m: float, k: float, n: float = 0) -> float:
    """FLOP/s of F.linear with m rows and row length k, interpolated log-log in M and in k (held beyond the
    ends); for a weight taller than the curve's layer-sized ones, scaled toward the tall series' ratio at
    that M (its ratio at its largest M beyond it), log-linearly in n; for a weight smaller than a layer-sized
    one, a call's own cost (call_seconds) plus its values at the layer series' pace once that cost is taken
    out of it (small_seconds)."""
    layer = index["layer"]
    ks = sorted(layer)
    rates = [interpolate(layer[x], m) for x in ks]
    rate = math.exp(interpolate(list(zip(ks, (math.log(r) for r in rates))), k, log_y=False))
    tall = index["tall"]
    if tall and n > index["rows"][tall[0]]:
        k_tall, n_tall, points = tall
        at = min(m, points[-1][0])  # beyond the tall series' largest M, its ratio to the layer series is held
        ratio = interpolate(points, at) / interpolate(layer[k_tall], at)
        short = index["rows"][k_tall]
        t = min(1.0, math.log(n / short) / math.log(n_tall / short))
        rate *= ratio**t
    if index.get("small") and n and k * n < (values := layer_values(index, k)):
        rate = f.matmul_flops(k * n, m) / small_seconds(call_seconds(index, m), k * n, values, 2 * m / rate)
    return rate


def layer_values(index: dict[str, Any], k: float) -> float:
    """Values of a layer-sized weight of row length k: k x its rows, interpolated log-log in k (held beyond)."""
    return k * interpolate(sorted(index["rows"].items()), k, log_y=True)


def call_seconds(index: dict[str, Any], m: float) -> float:
    """A call's own cost [s] at m rows (held beyond the small series' largest M): what the small series' call takes
    beyond its values at the pace of the layer series at its k, both timed on cold weights. Two calls of one row
    length, E_s and E_l values in t_s and t_l seconds: t_s - E_s (t_l - t_s) / (E_l - E_s), at least 0."""
    k, n_small, points = index["small"]
    at = min(m, points[-1][0])
    e_small, e_layer = k * n_small, k * index["rows"][k]
    t_small = f.matmul_flops(e_small, at) / interpolate(points, at)
    t_layer = f.matmul_flops(e_layer, at) / interpolate(index["layer"][k], at)
    return max(0.0, t_small - e_small * (t_layer - t_small) / (e_layer - e_small))


def small_seconds(call: float, values: float, layer: float, per_value: float) -> float:
    """Seconds of F.linear over a weight of `values` smaller than a layer-sized one of `layer` values, whose calls
    take `per_value` seconds per value (layer x per_value in all): the call's own cost, then the rest of the
    layer's time spread over its values. A straight line in size through the small series and the layer series.
    On a 2-core AMX Xeon VM (bf16, cold, M = 1) the small call (128 x 512) took 62 us, 2048 x 512 280 us: 47 us a
    call, and 576 x 192 was priced 72 us (measured 52-72); the log-size rule before priced it 96 us and 576 x 576
    200 us (measured 93-115): over 22 shapes of the held-out models at M = 1, 4 and 16 its median error was 10.2%
    in bf16 and 6.1% in fp32, this line's 7.4% and 5.2%."""
    return call + max(0.0, layer * per_value - call) * values / layer


def archetype(a: Architecture) -> str:
    """Which measured engine archetype a model's layers resemble most, by its position embeddings:
    "learned" (GPT-2-like layers) or "rope" (Llama-like)."""
    return "learned" if a.position_embeddings == "learned" else "rope"


def engine_cost(engine: dict[str, Any], a: Architecture, batch: float) -> float:
    """Fixed seconds of one decode step with a measured engine (roofline.measure.engine_costs):
    per_step + layers x per_layer of the model's archetype, interpolated log-log in batch (held beyond)."""
    measured = engine["archetypes"][archetype(a)]
    return _at(measured["per_step_s"], batch) + a.layers * _at(measured["per_layer_s"], batch)


def _at(by_batch: dict[str, float], batch: float) -> float:
    points = sorted((float(b), s) for b, s in by_batch.items())
    return interpolate(points, batch, log_y=all(s > 0 for _, s in points))


def linears(a: Architecture) -> list[tuple[int, int]]:
    """(k, n) of each linear layer of one decoder layer: q, k, v, o, then the MLP."""
    h, q, kv = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    mlp = [(h, a.intermediate_size)] * (2 if a.mlp == "gated" else 1) + [(a.intermediate_size, h)]
    return [(h, q), (h, kv), (h, kv), (q, h), *mlp]


def linear_seconds(index: dict[str, Any], a: Architecture, rows: float, head_rows: float, layout: float = 1.0) -> float:
    """All layers' linears with `rows` rows (times `layout`: conv1d_factor) and the lm_head with `head_rows`, at the
    curve's rates."""
    layer = sum(f.matmul_flops(k * n, rows) / linear_rate(index, rows, k, n) for k, n in linears(a))
    head = f.matmul_flops(a.hidden_size * a.vocab_size, head_rows) / linear_rate(
        index, head_rows, a.hidden_size, a.vocab_size
    )
    return a.layers * layer * layout + head


def conv1d_factor(
    measured: dict[str, Any] | None, engine: str, a: Architecture, rows: float, index: dict[str, Any]
) -> float:
    """How much longer a layer's linears take as the engine runs them than the curve's F.linear: transformers runs
    GPT-2's (learned archetype) as Conv1D, whose measured slowdown (engine_costs.conv1d_slowdown) depends on rows and
    on a weight's aspect. The layer's factor is its Conv1D linears' (conv1d_linears) slowdowns weighted by their
    F.linear times at the curve's rates (`index`); 1 otherwise (and for profiles measured before it)."""
    table = (measured or {}).get("conv1d_slowdown")
    if engine != "transformers" or archetype(a) != "learned" or not table:
        return 1.0
    tables = conv1d_tables(table)
    times = [(f.matmul_flops(k * n, rows) / linear_rate(index, rows, k, n), k, n) for k, n in conv1d_linears(a)]
    return sum(t * conv1d_slowdown(tables, k, n, rows) for t, k, n in times) / sum(t for t, _, _ in times)


def conv1d_linears(a: Architecture) -> list[tuple[int, int]]:
    """(in, out) of a GPT-2 layer's Conv1D linears as transformers builds them (modeling_gpt2: c_attn fuses q, k
    and v; attn.c_proj; mlp.c_fc; mlp.c_proj)."""
    h, q, kv = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    return [(h, q + 2 * kv), (q, h), (h, a.intermediate_size), (a.intermediate_size, h)]


# The shape measured by profiles that timed one (engine_costs before CONV1D_SHAPES): rows -> ratio, unkeyed
CONV1D_FIRST_SHAPE = "1024x4096"


def conv1d_tables(table: dict[str, Any]) -> list[tuple[float, list[tuple[float, float]]]]:
    """A profile's conv1d_slowdown ("KxN" -> rows -> ratio; or rows -> ratio, CONV1D_FIRST_SHAPE) as
    [(aspect out / in, [(rows, ratio)])], by aspect."""
    if not all(isinstance(v, dict) for v in table.values()):
        table = {CONV1D_FIRST_SHAPE: table}
    out = []
    for shape, by_rows in table.items():
        k, n = (int(x) for x in shape.split("x"))
        out.append((n / k, sorted((float(m), r) for m, r in by_rows.items())))
    return sorted(out)


def conv1d_slowdown(tables: list[tuple[float, list[tuple[float, float]]]], k: float, n: float, rows: float) -> float:
    """Conv1D's time over F.linear's for a k x n weight at `rows` rows: at each measured shape log-log in rows, then
    log-log in the aspect n / k between shapes, held beyond the ends of both."""
    return interpolate([(aspect, interpolate(by_rows, rows)) for aspect, by_rows in tables], n / k)


def cache_copy_seconds(profile: dict[str, Any], engine: str, kv_bytes: float) -> float:
    """Seconds a transformers step spends copying its KV cache of `kv_bytes` [B]: its default dynamic cache makes
    every layer's keys and values anew each call (DynamicLayer.update: torch.cat of the cache and the new positions;
    a prefill's cat onto an empty cache copies the prompt's), reading the cache and writing it again, 2 x kv_bytes
    at the profile's copy bandwidth (read + write counted, as STREAM does) carried to memory speed by the read ladder
    (its buffer may fit a large cache); 0 for other engines and for a profile without a copy figure. On a 2-core
    Zen 4 VM GPT-2-medium at batch 16 (24 layers, 453 MB of fp32 cache) spent 27-30 ms of a 264-278 ms step in
    torch.cat with freed memory kept (roofline.measure.allocator, as measure and validate run), 30-34 GB/s against a
    copy bandwidth of 36. A loop of cache-sized torch.cat ran 32-35 GB/s so, the copy's rate: not timed on its own
    (under glibc's defaults 5-7 GB/s, each new tensor just over the dynamic mmap threshold and faulted in anew)."""
    copy = (profile.get("bandwidth") or {}).get("copy") or {}
    if engine != "transformers" or not copy.get("best_bytes_per_s"):
        return 0.0
    rate = at_memory(ladder(profile), copy["best_bytes_per_s"], copy.get("buffer_bytes", 0.0))
    return 2 * kv_bytes / rate


TORCH_DTYPES = ("fp32", "bf16", "fp16")  # weight dtypes a torch profile can time: measure.timing.MATMUL_DTYPES


def lacks(profile: dict[str, Any], dtype: str) -> str | None:
    """What a measured profile lacks to price `dtype` (predict's gate), in words; None when it has it all."""
    curve = profile.get("decode_matmul", {}).get(dtype)
    if not curve or "k" not in curve[0]:
        return f"no decode-shaped {dtype} matmul curve"
    if not profile.get("decode_attention", {}).get(dtype):
        return f"no {dtype} decode attention"
    if profile.get("op_overhead_s") is None:
        return "no per-op cost"
    return None


def predict(
    a: Architecture,
    profile: dict[str, Any],
    dtype: str,
    batch: int,
    prompt: int,
    kv_bytes_per_step: float,
    attention_flops_per_step: float,
    prefill_attention_flops: float,
    costs: dict[str, Any] | None = None,
    engine: str = "eager",
    working_set: float = 0.0,
    prompt_kv_bytes: float = 0.0,
) -> Calibrated | None:
    """Calibrated TTFT and TPOT, or None when the profile lacks the curve, attention or op cost for `dtype`.

    With `costs` (the fixed costs measured on `engine`, in this dtype where the profile has them) a decode step's
    fixed cost is the engine's;
    without, it is `ops_per_layer` tiny ops at the measured per-op overhead (the first method, kept for
    profiles measured before engine costs were). `working_set` [B]: what a decode step streams (weights and KV),
    for the read ladder (roofline.calc.cache.carried). `prompt_kv_bytes` [B]: the KV cache the prefill writes."""
    if lacks(profile, dtype):
        return None
    curve, overhead = profile["decode_matmul"][dtype], profile["op_overhead_s"]
    kernel = profile["decode_attention"][dtype]
    ops = (a.layers * ops_per_layer(a) + OPS_PER_STEP) * overhead
    fixed = engine_cost(costs, a, batch) if costs else ops
    best = profile.get("matmul", {}).get(dtype)
    square = (best["best_shape"][0], typical(best)) if best else None
    index = curve_index(curve, scan_anchors(best) if best else [], square)
    decode_linear = linear_seconds(index, a, batch, batch, conv1d_factor(costs, engine, a, batch, index))
    params = a.layers * sum(k * n for k, n in linears(a)) + a.hidden_size * a.vocab_size
    cycled = curve_bytes(profile, curve)
    carried_s = carried(profile, decode_linear, params * DTYPE_BYTES.get(dtype, 4.0), working_set, cycled)
    decode_linear = max(carried_s, 2 * params * batch / best["best_flop_per_s"]) if best else carried_s
    attention = max(attention_flops_per_step / kernel["flop_per_s"], kv_bytes_per_step / kernel["bytes_per_s"])
    attention += cache_copy_seconds(profile, engine, kv_bytes_per_step)
    # Prefill attention runs many queries at once: priced at the measured causal prefill kernel's rate.
    prefill_rate = prefill_attention_rate(kernel, prompt, typical(best) if best else kernel["flop_per_s"])
    # A prefill runs the decode step's kernels once (their fixed cost: the engine's where measured) and its
    # elementwise kernels over every prompt token (at the profile's measured rates, where it has them).
    rates = (profile.get("elementwise") or {}).get(dtype)
    moved = elementwise.prefill_bytes(a, batch, prompt, DTYPE_BYTES.get(dtype, 4.0), engine)
    activations = elementwise.prefill_seconds(rates["bytes_per_s"], moved) if rates else 0.0
    rows = batch * prompt
    linear = linear_seconds(index, a, rows, batch, conv1d_factor(costs, engine, a, rows, index))
    prefill = linear + prefill_attention_flops / prefill_rate + activations + fixed
    prefill += cache_copy_seconds(profile, engine, prompt_kv_bytes)
    basis = (
        f"fixed costs measured on the {engine} engine" if costs else "per-op cost x ops per layer (plain eager PyTorch)"
    )
    return Calibrated(
        ttft_s=prefill,
        tpot_s=decode_linear + attention + fixed,
        decode_linear_s=decode_linear,
        decode_attention_s=attention,
        decode_overhead_s=fixed,
        basis=f"measured decode-shaped matmul curve, decode attention kernel and {basis}",
        engine=engine,
    )
