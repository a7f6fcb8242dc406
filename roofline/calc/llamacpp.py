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
on shallower probes and priced at the depth of the model's weights (`prompt_depth_factor`). A step of fewer than
Q_TILE tokens runs flash attention row by row on the CPU, each query head over each cell of its sequence in turn:
those decode rows cost the profile's measured time per head-cell (`attention`) times the cells of the busiest thread
(`busiest_cells`: llama.cpp's split of heads, or of cells, across threads). Other attention FLOPs (prompts, larger
steps, profiles without `attention`) run at the step's achieved matmul FLOP/s. The fixed cost is per step + layers x
per layer (a small in-cache probe at two depths); vectors (norms) and the KV cache are read once at the f16 decode
rate. Types the profile never ran are priced with the measured type of the same kernels (`KERNELS`) closest in bits
per weight: its time per weight where it computes, per byte where it streams; and say so. Where the profile ran such
a type's prompts alone (`prompt_types`), its prompt rows take their measured ratio to that price (`prompt_factor`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.calc.interpolation import interpolate
from roofline.specs.gguf import TYPES
from roofline.specs.hardware import PROMPT_ROWS

# ggml-cpu's flash attention (ggml/src/ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16; common.h):
Q_TILE = 64  # GGML_FA_TILE_Q: a graph compute of this many tokens or more runs it in tiles (GEMMs), fewer row by row
KV_PAD = 256  # llama_kv_cache::get_padding with flash attention: the cache view the kernel scans is a multiple of it
SPLIT_CELLS = 512  # use_split_kv_path: one query token over a view of this many cells or more splits the cells
UBATCH = 512  # llama.cpp's default n_ubatch: a larger batch runs as several graph computes, each reading the weights
# bits per weight of each ggml type: bytes per block x 8 / weights per block (ggml's type table, the GGUF reader's)
BITS = {name: 8 * size / block for name, block, size in TYPES.values()}
# Each type's kernels, by the type ggml-cpu quantizes a matmul's activations to for its dot products
# (ggml/src/ggml-cpu/ggml-cpu.c, type_traits_cpu[].vec_dot_type): floats; 32-weight blocks against Q8_0/Q8_1;
# 256-weight super-blocks against Q8_K. A type the profile never ran is priced by a measured type of its kernels.
KERNELS = {
    **dict.fromkeys(("F32", "F16", "BF16"), "float"),
    **dict.fromkeys(("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "IQ4_NL", "MXFP4"), "block32"),
    **dict.fromkeys(("Q6_K", "Q5_K", "Q4_K", "IQ4_XS", "Q3_K", "Q2_K", "IQ3_S", "IQ3_XXS"), "block256"),
    **dict.fromkeys(("IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "TQ2_0", "TQ1_0"), "block256"),
}
BY_DTYPE = {"fp32": "F32", "fp16": "F16", "bf16": "BF16", "int8": "Q8_0", "fp8": "Q8_0", "int4": "Q4_0", "fp4": "MXFP4"}


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
    """The profile's type that prices `kind`: itself when measured, else the measured one nearest in bits/weight
    among those of its kernels (`KERNELS`), else among all. Left out one at a time, the types of five Xeon profiles
    priced each other's prompts 0.24-4.36x their own by bits alone, 0.63-2.01x by kernels first
    (docs/guides/llamacpp.md)."""
    types = profile["types"]
    if kind in types:
        return kind
    bits = BITS.get(kind, 16.0)
    family = KERNELS.get(kind)
    alike = [t for t in types if family and KERNELS.get(t) == family]
    return min(alike or types, key=lambda t: (abs(math.log(BITS.get(t, 16.0) / bits)), t))


def own_entry(entry: dict[str, Any], width: float) -> dict[str, Any] | None:
    """A measured type's probe of a model's own layer shape at `width` (`at_width`, keyed by the hidden size)."""
    return {str(w): e for w, e in (entry.get("at_width") or {}).items()}.get(str(round(width)))


def own_widths(profile: dict[str, Any], weights: Weights, width: float) -> list[str]:
    """The measured types pricing `weights` that have a probe of a model's own layer shape at `width`."""
    kinds = {measured_type(profile, k) for k in {*weights.layers, weights.head[0]}}
    return sorted(k for k in kinds if own_entry(profile["types"][k], width))


def stand_ins(profile: dict[str, Any], weights: Weights) -> dict[str, str]:
    """Unmeasured type -> the measured type pricing it, "(its prompts measured)" after it where the profile ran the
    type's prompts (`prompt_types`); empty when every type was measured."""
    prompts = profile.get("prompt_types") or {}
    kinds = [k for k in sorted({*weights.layers, weights.head[0]}) if measured_type(profile, k) != k]
    return {k: measured_type(profile, k) + (" (its prompts measured)" if k in prompts else "") for k in kinds}


def seconds_per_byte(
    profile: dict[str, Any], kind: str, rows: float, width: float, working_set: float | None = None
) -> float:
    """s_T(M, width) [s/B]: the measured type's (`measured_type`) at M rows, as a type it stands in for runs it
    (`stand_in_seconds_per_byte`); prompts at the depth of a model whose weights are `working_set` bytes
    (`prompt_depth_factor`; None: the prompt probes' own)."""
    measured = measured_type(profile, kind)
    if measured == kind:
        return _measured_seconds_per_byte(profile, measured, rows, width, working_set)
    factor = prompt_factor(profile, kind, measured, rows, working_set)
    return _stand_in(profile, kind, measured, rows, width, working_set) * factor


def _stand_in(
    profile: dict[str, Any], kind: str, measured: str, rows: float, width: float, working_set: float | None = None
) -> float:
    """s_T(M, width) [s/B] of an unmeasured `kind` from the `measured` type's kernels (stand_in_seconds_per_byte)."""
    s = _measured_seconds_per_byte(profile, measured, rows, width, working_set)
    streaming = _measured_seconds_per_byte(profile, measured, 1, width)
    return stand_in_seconds_per_byte(s, streaming, BITS.get(measured, 16.0), BITS.get(kind, 16.0))


def prompt_factor(
    profile: dict[str, Any], kind: str, measured: str, rows: float, working_set: float | None = None
) -> float:
    """How much slower (above 1) or faster a byte of an unmeasured `kind` runs at `rows` rows than its stand-in
    `measured` prices it, where the profile ran its prompts alone (`prompt_types`: the types a default profile had
    no time for): at each probed prompt, its time per byte on the wide shallow probe at the depth of `working_set`
    (its own prompt_depth_factor) over the stand-in's price of that prompt there; 1 at the stand-in's largest decode
    row and below (decode streams its bytes, as priced); log-log in rows between, held beyond the longest prompt.
    Left out one at a time from seven- and six-type profiles of a 2-core Zen 4 VM, with its own prompts from the
    same profile as its run alone (in sample: this checks carrying them to other widths and depths), its types'
    prompts (128, 512 rows; widths 576-2048; 48-256 MB of weights) came out a median 1.4% and 3.0% from their own
    where the stand-in alone gave 22.8% and 38.4%; with the stand-in's depth ratio, 4.1% and 7.5%. The held-out
    table did not show a gain (docs/guides/llamacpp.md, Prompts alone)."""
    alone = (profile.get("prompt_types") or {}).get(kind) or {}
    if not alone.get("seconds_per_byte"):
        return 1.0
    wide, depth = profile["widths"][-1], prompt_depth_factor(alone.get("prompt_depth"), working_set)
    decode = [float(m) for m in profile["types"][measured]["seconds_per_byte"] if float(m) < PROMPT_ROWS]
    ratios = [
        (float(p), s * depth / _stand_in(profile, kind, measured, float(p), wide, working_set))
        for p, s in alone["seconds_per_byte"].items()
    ]
    points = sorted(ratios)
    if decode:  # a stand-in with decode rows: the factor is 1 from its largest
        points.insert(0, (max(decode), 1.0))
    return interpolate(points, rows)


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


def _points(table: dict[str, float], depth: float = 1.0) -> list[tuple[float, float]]:
    """(rows, s/B) sorted by rows, prompt rows times `depth`."""
    return sorted((float(m), s * (depth if float(m) >= PROMPT_ROWS else 1.0)) for m, s in table.items())


def fixed_seconds(profile: dict[str, Any], weights: Weights, layers: int) -> float:
    """per step + layers x per layer, of the type holding most of the bytes."""
    main = measured_type(profile, max(weights.layers, key=weights.layers.get))
    entry = profile["types"][main]
    return entry["per_step_s"] + layers * entry["per_layer_s"]


class Heads(NamedTuple):
    """What decode attention's cost depends on: query heads, the values a head-cell runs over (head_dim; MLA's
    absorbed width), layers, and how many of them attend within a sliding window of `window` cells."""

    count: int
    dim: float
    layers: int
    sliding: int = 0
    window: int = 0


def heads_of(num_heads: int, shape: Any) -> Heads:
    """A model's Heads from its shape (roofline.calc.shape.Shape): the values a head-cell runs over from its decode
    FLOPs per key, 4 x heads x head_dim for MHA/GQA (QK^T and PV)."""
    att = shape.attention
    return Heads(num_heads, att.key_flops_decode / (4 * num_heads), att.layers, att.sliding_layers, att.window)


def busiest_rows(rows: int, threads: int) -> int:
    """Query rows (a token's head) the busiest of `threads` runs when ggml's flash attention goes row by row: chunks
    of ceil(rows / (4 x threads)) rows taken in turn, the first thread's share (ops.cpp: 4 chunks a thread; one
    chunk a thread when there are fewer chunks than threads)."""
    size = -(-rows // (4 * threads))
    chunks = -(-rows // size)
    if threads == 1 or chunks < threads:
        return -(-rows // threads)
    return sum(min(size, rows - i * size) for i in range(0, chunks, threads))


def groups(heads: Heads, keys: float) -> list[tuple[int, float]]:
    """(layers, cells a layer) of one token attending over `keys` cells summed over layers: the full layers' and the
    sliding ones' (at most the window), each group with its own cache view."""
    full = heads.layers - heads.sliding
    if not heads.sliding or not full or keys <= heads.layers * heads.window:
        return [(heads.layers, keys / heads.layers)]
    cells = (keys - heads.sliding * heads.window) / full
    return [(full, cells), (heads.sliding, float(heads.window))]


def view(cells: float) -> int:
    """The cache view the kernel scans for `cells` cells in use [cells]: a multiple of KV_PAD."""
    return KV_PAD * math.ceil(cells / KV_PAD)


def busiest_cells(heads: Heads, threads: int, rows: int, keys: float, step_rows: int) -> tuple[float, float]:
    """Head-cells (a query head over one cached token) the busiest thread runs in a step's decode attention, summed
    over layers: (row by row, split). `rows` decode tokens attend over `keys` cells in all (over tokens and layers)
    in a step of `step_rows` tokens. A step of one token over a view of SPLIT_CELLS cells or more has the view cut
    in one share a thread, every head over each, per layer group: the first share's cells are all in use.
    Otherwise the step's query rows go to threads (busiest_rows) and each runs its rows over their cells, masked
    cells skipped. Source: ggml/src/ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16."""
    if not rows:
        return 0.0, 0.0
    if step_rows > 1:
        return keys * heads.count * busiest_rows(step_rows * heads.count, threads) / (step_rows * heads.count), 0.0
    row, split = 0.0, 0.0
    for layers, cells in groups(heads, keys):
        if view(cells) >= SPLIT_CELLS:
            split += layers * heads.count * min(cells, math.ceil(view(cells) / threads))
        else:
            row += layers * cells * busiest_rows(heads.count, threads)
    return row, split


def decode_attention_seconds(profile: dict[str, Any], heads: Heads, rows: int, keys: float, step_rows: int) -> float:
    """Row-by-row decode attention [s]: busiest_cells at the profile's time per head-cell (its split path's for
    split cells, where measured), measured at its probe's head_dim and scaled to the model's (a cell's dot product
    and update run over head_dim values)."""
    att = profile["attention"]
    row, split = busiest_cells(heads, att["threads"], rows, keys, step_rows)
    each = att["seconds_per_head_cell"]
    return (each * row + att.get("split_seconds_per_head_cell", each) * split) * heads.dim / att["head_dim"]


def attention_breaks(heads: Heads, rows: int, keys: float, keys_slope: float, steps: int) -> list[int]:
    """Steps j in 1..steps-1 of a decode run (keys + j x keys_slope) where one token's view grows by KV_PAD cells
    (any group's, at the full layers' cells): busiest_cells is linear in j between them and a window filling (which
    callers break at)."""
    if rows != 1 or keys_slope <= 0:
        return []
    first = groups(heads, keys)[0][1]
    slope = groups(heads, keys + keys_slope)[0][1] - first
    if slope <= 0:
        return []
    ends = range(view(first), math.ceil(first + slope * steps), KV_PAD)
    return sorted({j for end in ends if 0 < (j := math.floor((end - first) / slope) + 1) < steps})


def series(value: Callable[[int], float], steps: int, breaks: list[int]) -> float:
    """Σ value(j) over j = 0..steps-1 for a value linear in j between `breaks` (two calls a piece)."""
    total, edges = 0.0, [0, *breaks, steps]
    for a, b in zip(edges, edges[1:]):
        first = value(a)
        slope = value(a + 1) - first if b - a > 1 else 0.0
        total += (b - a) * first + slope * (b - a) * (b - a - 1) / 2
    return total


class StepParts(NamedTuple):
    """A step's seconds in its three parts."""

    fixed_s: float  # per step + layers x per layer, and the vectors read, each ubatch
    matmul_s: float  # the layers' matrices and the lm_head
    attention_s: float  # decode rows by head-cells or attention FLOPs at the step's FLOP/s, and the KV bytes


class Decode(NamedTuple):
    """A step's decode tokens: how many, Σ over them and layers of the cells each attends over, their FLOPs."""

    rows: int = 0
    keys: float = 0.0
    flops: float = 0.0


NO_DECODE = Decode()


def step_parts(
    profile: dict[str, Any],
    weights: Weights,
    heads: Heads,
    width: float,
    rows: int,
    logit_rows: int,
    matmul_flops: float,
    attention_flops: float,
    kv_bytes: float,
    decode: Decode = NO_DECODE,
) -> StepParts:
    """One llama_decode of `rows` tokens, `logit_rows` of them through the lm_head: ceil(rows / UBATCH) even
    ubatches, each a graph compute paying the fixed cost and reading the weights; matmuls at the measured time per
    byte; the `decode` part of `attention_flops` by decode_attention_seconds when the step runs row by row (fewer
    than Q_TILE tokens) and the profile measured it, the rest at the matmuls' achieved FLOP/s; KV bytes at the f16
    decode time per byte (llama.cpp's default cache type)."""
    layers = heads.layers
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
    if decode.rows and rows < Q_TILE and profile.get("attention"):
        attention += decode_attention_seconds(profile, heads, decode.rows, decode.keys, rows) - decode.flops / rate
    fixed = parts * (fixed_seconds(profile, weights, layers) + weights.vectors * read)
    return StepParts(fixed, parts * matmuls + logits, attention)


class Entry(NamedTuple):
    """A sequence's tokens in a step's batch, in llama-server's order (its slots' decode tokens, then their prompts)."""

    seq: int  # its slot: the KV stream it writes
    tokens: int
    decoding: bool  # a decode token (else a prompt chunk)
    last: bool = True  # a decode, or the chunk holding its prompt's last token (its logits are computed)


class Ubatch(NamedTuple):
    """One graph compute of a split step: its decode rows, prompt rows and logit rows."""

    decode: int
    prompt: int
    logits: int


def equal_split(batch: list[Entry], n_ubatch: int = UBATCH) -> list[Ubatch]:
    """The ubatches llama.cpp cuts a batch into when each sequence has its own KV stream (llama-server given
    `--parallel N`: kv_unified off, so llama_kv_cache::init_batch calls split_equal(n_ubatch, sequential = true);
    src/llama-batch.cpp). A ubatch starts at the first sequence with tokens left and takes each following one (in
    the batch's order) whose id is one more than the last taken; then as many tokens from each as the one with
    fewest has left, at most max(1, n_ubatch // sequences) each. A decode step whose slots are not consecutive
    (0, 1 and 3) is then two graph computes, each reading the weights; a prompt beside decodes is three."""
    left = [[e, e.tokens] for e in batch if e.tokens > 0]
    out = []
    while left:
        group = [left[0]]
        for item in left[1:]:
            if item[0].seq == group[-1][0].seq + 1:
                group.append(item)
        take = min(min(n for _, n in group), max(1, n_ubatch // len(group)))
        decode = prompt = logits = 0
        for item in group:
            e = item[0]
            item[1] -= take
            decode += take if e.decoding else 0
            prompt += 0 if e.decoding else take
            logits += take if e.decoding else int(e.last and item[1] == 0)
        out.append(Ubatch(decode, prompt, logits))
        left = [item for item in left if item[1] > 0]
    return out


class Step(NamedTuple):
    """A simulator's step (roofline.calc.stepmodel): step_parts' total [s], and where a decode run's cost bends.
    With `streams` (llama-server's default when given --parallel N: a KV stream per slot), a step whose batch is
    given is priced ubatch by ubatch (equal_split). `server_s`: llama-server's own cost a step beyond llama-bench's
    (the profile's server.step_s, measure_server: sampling and streaming the tokens), once a step however it is cut
    (one llama_decode call a server loop)."""

    profile: dict[str, Any]
    weights: Weights
    heads: Heads
    width: float
    streams: bool = False
    server_s: float = 0.0

    def __call__(self, *args: Any, decode: Decode = NO_DECODE, batch: list[Entry] | None = None) -> float:
        """step_parts' total [s] for step_parts' arguments after `width`, plus server_s; with `batch`, ubatch by
        ubatch."""
        if not self.streams or not batch:
            return self.server_s + sum(
                step_parts(self.profile, self.weights, self.heads, self.width, *args, decode=decode)
            )
        return self.server_s + self._split(equal_split(batch), args, decode)

    def _split(self, ubatches: list[Ubatch], step: tuple, decode: Decode) -> float:
        """The ubatches' seconds (step_parts each) of a step given as step_parts' (rows, logit rows, matmul FLOPs,
        attention FLOPs, KV bytes): matmul FLOPs and KV bytes in proportion to each ubatch's rows, the decodes' keys
        and attention FLOPs to its decode rows, the prompts' attention FLOPs to its prompt rows; its logit rows its
        own."""
        rows, _, matmul_flops, attention_flops, kv_bytes = step
        prompts = rows - decode.rows
        total = 0.0
        for u in ubatches:
            d = (
                Decode(u.decode, decode.keys * u.decode / decode.rows, decode.flops * u.decode / decode.rows)
                if u.decode and decode.rows
                else NO_DECODE
            )
            prompt_flops = (attention_flops - decode.flops) * u.prompt / prompts if prompts else 0.0
            share = (u.decode + u.prompt) / rows
            args = (u.decode + u.prompt, u.logits, matmul_flops * share, d.flops + prompt_flops, kv_bytes * share)
            total += sum(step_parts(self.profile, self.weights, self.heads, self.width, *args, decode=d))
        return total

    def breaks(
        self, rows: int, keys: float, keys_slope: float, steps: int, batch: list[Entry] | None = None
    ) -> list[int]:
        """attention_breaks of a decode-only run (the simulator sums its runs piece by piece); with a split batch,
        each ubatch's at its share of the keys."""
        if not self.profile.get("attention"):
            return []
        if not self.streams or not batch:
            return attention_breaks(self.heads, rows, keys, keys_slope, steps)
        shares = {u.decode for u in equal_split(batch)}
        found = (attention_breaks(self.heads, r, keys * r / rows, keys_slope * r / rows, steps) for r in shares)
        return sorted({j for each in found for j in each})
