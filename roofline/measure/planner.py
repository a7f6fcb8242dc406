"""The measurement plan: what `measure` times and for how long, sized by a time budget, not by the cache.

A run has a budget (20 s by default, 5 s with --quick, torch's import included). The planner splits what is
left after the import and a probe into shares per phase, and sizes the buffers so that each timed call fits
its share at the probed speed: buffers defeat the last-level cache (>= 4x its size) as far as the budget
allows, and the plan says so in `note` when they cannot. Every timed loop also stops at the run's deadline
(roofline.measure.timing.Clock), so a probe that misjudges the machine cannot overrun the budget by much.
"""

import math
from typing import NamedTuple

from roofline.units import MiB

BUDGET_S, QUICK_BUDGET_S = 20.0, 5.0
RESERVE_S = 1.0  # interpreter start and the CLI import before the run; result assembly, printing and exit after it
PLANNED_SHARE = 0.9  # of the budget: shared VMs swing between runs, and the budget is a promise
# Shares of the usable time per phase. Every timed loop stops at its cap plus at most one call, and the plan
# keeps one call under half a cap, so the phases take at most 1.5x their shares: 1.5 x 0.615 = 0.92, and the
# rest pays for filling buffers and weights.
SHARES = {
    "matmul": 0.165,
    "rounds": 0.13,
    "curve": 0.15,
    "attention": 0.04,
    "overhead": 0.01,
    "engine": 0.06,
    "ladder": 0.06,
}
SLACK = 1.5


class Machine(NamedTuple):
    """What the planner needs to know of the device: its kind, caches, memory, and probed speeds."""

    kind: str  # cpu, cuda or mps
    last_level_cache_bytes: float
    free_bytes: float
    read_bytes_per_s: float  # probed on a small buffer: an upper estimate of memory bandwidth
    flop_per_s: float  # probed fp32 (or the fastest) matmul rate


class MeasurePlan(NamedTuple):
    """What to measure and for how long (seconds are per timed kernel unless said otherwise)."""

    squares: tuple[int, ...]  # square matmul sizes scanned
    shapes: tuple[tuple[int, int, int], ...]  # LLM-like (m tokens, k in, n out)
    decode_m: tuple[int, ...]  # rows M of the decode-shaped curve
    decode_ks: tuple[int, ...]  # row lengths k of the curve; the longest also gives the GEMV bandwidth
    buffer_bytes: int  # bandwidth buffers, and the cold set the curve and weights_read cycle through
    ladder_bytes: int  # the read ladder's own buffer: working sets from L2 to beyond the last-level cache
    rounds: int  # interleaved rounds of the headline figures (best, median, spread)
    min_reps: int  # calls per matmul shape in the scan, at least
    min_time: float  # seconds per matmul shape in the scan, at least (if the deadline allows)
    max_time: float  # seconds per timed kernel, at most
    max_call: float  # a kernel whose single call is estimated longer is skipped
    round_time: float  # seconds per kernel per round
    curve_reps: int = 3  # per decode-curve point
    curve_time: float = 0.05  # seconds per decode-curve point
    attention_time: float = 0.05  # seconds per decode-attention shape (and per elementwise kernel)
    elementwise_bytes: int = 4 * MiB  # the elementwise kernels' tensor (ELEMENTWISE_BYTES, or less)
    curve_window: float | None = (
        None  # seconds for one dtype's curve once its weights are filled (None: 3 x its points' time)
    )
    budget_s: float = 0.0  # the whole run's budget
    note: str = ""  # why buffers are under 4x the last-level cache, when they are


# What to scan, per device kind and run length: a few squares and LLM-shaped matmuls (mamf-finder's lesson:
# the best shape is rarely the biggest square), decode rows M and row lengths k.
SHAPES = {
    ("cpu", False): (
        (512, 1000, 1536, 2000),
        ((256, 4096, 4096), (512, 4096, 14336)),
        (1, 2, 4, 16, 64, 128, 256),
        (512, 1024, 4096),
    ),
    # Both curves time M = 128, a 128-token prefill's rows: the rate flattens between 64 and 256 rows, so the full
    # curve's line from 64 to 256 priced 128 rows at 115-135 GFLOP/s where they ran 145-150 (fp32, 2-core Zen 4 VM,
    # 2026-12-07), while quick, which rose from 16 rows to the scan's 128 x 1024 x 4096 matmul, priced them 149-153:
    # quick's 128-token prefills came out 0.83-0.90 of full's (a series whose 128-row call is over a quick run's cap,
    # k = 4096 on a 2-core VM, is carried there from the k = 1024 series' rise). The quick scan keeps the 128-row
    # shape (the rounds' prefill and validate's prompt drift time it) and the full scan's 512-row one, which prices
    # longer prefills:
    # with 256 rows instead, quick priced 512- and 2048-token fp32 prefills 10-16% slower than full (256 x 4096 x
    # 4096 159-183 GFLOP/s, 512 x 4096 x 7168 176-186, three profiles of each)
    ("cpu", True): ((1000, 1536), ((128, 1024, 4096), (512, 4096, 14336)), (1, 4, 16, 128), (512, 1024, 4096)),
    ("gpu", False): (
        (2048, 4096, 6144, 8192, 16384),
        ((4096, 8192, 8192), (8192, 8192, 28672), (16384, 8192, 28672)),
        (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        (1024, 8192),
    ),
    ("gpu", True): ((4096, 8192), ((8192, 8192, 28672),), (1, 8, 64, 256), (1024, 8192)),
}
# Decode attention (one query over a KV cache): batch, heads, kv heads, head_dim, context.
ATTENTION_SHAPES = {"mha": (8, 16, 16, 128, 512), "gqa": (8, 32, 8, 128, 512)}
# Causal prefill attention: (batch, heads, kv heads, head_dim, prompt). Its FLOP/s rises with the prompt (48-95
# GFLOP/s over 128-512 tokens in two sessions' quick profiles of a 2-core Zen 5 VM, in bf16 as in fp32, against ~850
# for a bf16 matmul there). The 4096-token prompt (137 GFLOP) runs where a call fits the plan: on GPUs.
PREFILL_ATTENTION = ((4, 16, 4, 128, 128), (1, 8, 2, 128, 512), (1, 32, 8, 128, 4096))
BUFFER_FLOOR = {"cpu": 64 * MiB, "gpu": 512 * MiB}
BANDWIDTH_KERNELS = 3  # copy, read, weights_read in each round
ATTENTION_CALLS = len(ATTENTION_SHAPES) + len(PREFILL_ATTENTION)  # the shapes attention() times per dtype
# The attention phase then times elementwise()'s kernels on one tensor in rows of 1024: 4 MiB (2048 tokens' bf16
# activations), smaller where a call would not fit a kernel's time (a call moves 3 tensors; tanh and tanh-GELU run
# ~10x slower than the read rate on CPUs: 30 tensors' worth).
ELEMENTWISE_BYTES, ELEMENTWISE_WIDTH, ELEMENTWISE_SLOWEST = 4 * MiB, 1024, 30
ELEMENTWISE_KERNELS = ("binary", "silu", "tanh", "gelu_tanh", "rms_norm", "layer_norm")  # roofline.calc.elementwise
MIN_BUFFER = 4 * MiB
LADDER_PASSES = 16  # the ladder's time in reads of its whole buffer: filling it (~10: page faults, measured on a 2-core
# VM: 2 GiB filled in 0.77 s, read in 0.064 s) and its points (the whole read 5 times, the halves as often)


def plan(m: Machine, quick: bool, seconds: float, dtypes: int, curves: int | None = None) -> MeasurePlan:
    """A plan whose timed work fits `seconds` (what is left of the budget) on machine `m`, for `dtypes` matmul
    dtypes and `curves` dtypes of decode curves and attention (default: as many; the weight dtype adds one when
    it is not among the matmul dtypes)."""
    family = "cpu" if m.kind == "cpu" else "gpu"
    squares, shapes, decode_m, decode_ks = SHAPES[(family, quick)]
    usable, dtypes = max(seconds, 0.5), max(dtypes, 1)
    curves = max(curves or dtypes, 1)
    rounds = 3 if quick else 5
    round_time = SHARES["rounds"] * usable / (rounds * (2 * dtypes + BANDWIDTH_KERNELS))  # a square, a prefill
    shape_time = SHARES["matmul"] * usable / (dtypes * (len(squares) + len(shapes) + 1))  # + 1: the probe
    point_time = SHARES["curve"] * usable / (curve_points(decode_m, decode_ks) * curves)
    want = max(BUFFER_FLOOR[family], 4 * int(m.last_level_cache_bytes))
    by_memory = m.free_bytes / 8
    # One call stays under half a cap: a copy (2x the buffer) in a round, a read of the cold set at a curve point.
    by_time = min(round_time * m.read_bytes_per_s / 4, point_time * m.read_bytes_per_s / 2)
    buffer = int(max(MIN_BUFFER, min(want, by_memory, by_time)) // MiB * MiB)
    # The ladder reads its buffer's prefixes, doubling: one fill and a few reads of the whole, so it reaches far
    # beyond the other buffers: as far as its share of the time and free memory allow, since the cache a VM really
    # gets (where the ladder flattens) is not the one sysfs reports.
    ladder_time = SHARES["ladder"] * usable * m.read_bytes_per_s / LADDER_PASSES
    ladder = int(max(buffer, min(by_memory, ladder_time)) // MiB * MiB)
    attention_time = SHARES["attention"] * usable / ((ATTENTION_CALLS + len(ELEMENTWISE_KERNELS)) * curves)
    fits = attention_time * m.read_bytes_per_s / ELEMENTWISE_SLOWEST
    elementwise = int(max(ELEMENTWISE_WIDTH * 4, min(ELEMENTWISE_BYTES, 2 ** int(math.log2(max(fits, 1))))))
    note = ""
    if buffer < 4 * m.last_level_cache_bytes:
        limit = "the time budget" if by_time <= by_memory else "free memory"
        note = (
            f"buffers of {buffer // MiB} MiB are under 4x the last-level cache ({m.last_level_cache_bytes / MiB:.0f} "
            "MiB): "
            f"{limit} allows no more, so bandwidth figures may include cache hits"
        )
    return MeasurePlan(
        squares=squares,
        shapes=shapes,
        decode_m=decode_m,
        decode_ks=decode_ks,
        buffer_bytes=buffer,
        ladder_bytes=ladder,
        rounds=rounds,
        min_reps=2 if quick else 3,
        min_time=shape_time,
        max_time=shape_time,
        max_call=min(shape_time, round_time) / 2,
        round_time=round_time,
        curve_reps=2 if quick else 3,
        curve_time=point_time,
        attention_time=attention_time,
        elementwise_bytes=elementwise,
        budget_s=seconds,
        note=note,
    )


def curve_points(decode_m: tuple[int, ...], decode_ks: tuple[int, ...]) -> int:
    """Timed points of one dtype's decode-shaped curve: each M at each k, and each M on the tall and the small
    weights."""
    return len(decode_ks) * len(decode_m) + 2 * len(decode_m)


def planned_seconds(p: MeasurePlan, m: Machine, dtypes: int, curves: int | None = None) -> float:
    """An upper estimate of plan `p`'s timed work on machine `m` [s]: each loop's cap plus one call (at most half
    a cap, or the call the buffer size implies), and filling the buffers and the curve's weights once."""
    dtypes = max(dtypes, 1)
    curves = max(curves or dtypes, 1)
    copy_call, read_call = 2 * p.buffer_bytes / m.read_bytes_per_s, p.buffer_bytes / m.read_bytes_per_s
    # squares and the probe: a call up to max_call; LLM shapes: a third of their time and what skipped shapes left
    # (kernels._scan)
    scan = dtypes * ((len(p.squares) + 1) * (p.max_time + p.max_call) + len(p.shapes) * 1.5 * p.max_time)
    rounds = p.rounds * (2 * dtypes * (p.round_time + p.max_call) + BANDWIDTH_KERNELS * (p.round_time + copy_call))
    curve = curves * curve_points(p.decode_m, p.decode_ks) * (p.curve_time + read_call)
    attention = curves * ATTENTION_CALLS * (p.attention_time + p.max_call)
    attention += curves * len(ELEMENTWISE_KERNELS) * 2 * p.attention_time  # each call within its time
    overhead = (SHARES["overhead"] + SLACK * SHARES["engine"]) * p.budget_s  # the engine phase stops at its deadline
    fills = (3 + 2 * curves) * copy_call  # two buffers and the weights_read set; each curve's per-k and tall weights
    ladder = ladder_points(p.ladder_bytes) * 2 * p.round_time / 4 + LADDER_PASSES * p.ladder_bytes / m.read_bytes_per_s
    return scan + rounds + curve + attention + overhead + fills + ladder


def ladder_points(buffer_bytes: float, smallest: float = 256 * 2**10) -> int:
    """Working sets of the read ladder: from `smallest` doubling to the buffer, the buffer itself last."""
    return max(1, math.ceil(math.log2(buffer_bytes / smallest)) + 1) if buffer_bytes >= smallest else 0


def weight_rows(k: int, element_bytes: int) -> int:
    """Rows n of a layer-sized weight with row length k: about 4k rows (an MLP's up projection), its size kept
    between 1 and 64 MiB (real layer weights: GPT-2-medium's MLP 16.8 MB, Llama-3-8B's 117 MB in bf16, sliced)."""
    size = min(64 * MiB, max(1 * MiB, 4 * k * k * element_bytes))
    return max(256, math.ceil(size / (k * element_bytes) / 256) * 256)
