"""`measure --engine llamacpp`: llama.cpp's backend on this machine, per weight type, from synthetic probe models.

Per type: a small probe (hidden 256) at depths 2 and 8 gives the fixed cost of a decode step, per step and per layer
(its weights sit in cache: what is left is the graph's own cost). Two probes as wide as models are, hidden 512 and
1024, each with as many layers as make its weights 4x the last-level cache (256 MB to 1 GiB), give the time per
streamed weight byte at M rows: decode steps of M = 1, 2, 4, 8, 16 sequences (llama-batched-bench). Prompt
processing of 128 and 512 tokens (llama-bench) runs on shallower probes of the same widths (PROMPT_BYTES of
weights), which take a third of the deep probes' time; the deep wide probe then runs the 128-token prompt, and its
time per byte over the shallow one's (prompt_depth) prices a model's prompts at the depth of its weights: between
passes a shallow model's weights partly stay in the last-level cache, a deep one's do not (docs/guides/llamacpp.md,
Depth). Narrow rows run slower per byte (more matrices and rows per byte), so roofline.calc.llamacpp interpolates
between the two in the model's hidden size. With a model (`--model`), its own layer shape is probed too, at its own
depth (up to MAX_BYTES; its prompts up to the deep probes' bytes): those times price models of its width instead.
Each test is the median of llama-bench's repetitions after its warm-up run. Once a run, on a CPU backend, a narrow
probe's 4-row decode after short and long prompts gives the time of decode attention per head-cell
(measure_attention). Once a run, llama-server's own cost a decode step beyond llama-bench's: sampling and streaming
each token (measure_server). The types a default run has no time for get their prompts alone (measure_prompts).
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline.calc import formulas as f
from roofline.calc.llamacpp import PROMPT_ROWS
from roofline.errors import RooflineError
from roofline.measure import llamacpp, machine, synthetic
from roofline.specs.params import Architecture

# Most used first (q4_k_m is Q4_K with Q6_K tensors, q5_k_m Q5_K with Q6_K; rows that are not a multiple of 256 fall
# back to Q5_0 and Q8_0): the default list stops at BUDGET_S, measuring whole types only.
TYPES = ("Q4_K", "Q6_K", "Q8_0", "F16", "Q5_K", "Q5_0", "Q4_0")
BUDGET_S = 60.0
SMALL, NARROW, WIDE = 256, 512, 1024
DEPTHS = (2, 8)
DECODE_ROWS = (1, 2, 4, 8, 16)
PROMPTS = (PROMPT_ROWS, 512)  # the shortest is also run on the deep wide probe (prompt_depth)
GENERATE = 16
# Decode steps per batch size and llama-bench repetitions of a prompt (after its warm-up run). 4 and 2 rather than 8
# and 3 measure seven types in the time six took; on the Zen 5 VM (q8_0 and q4_k, two interleaved rounds of each
# setting) the two settings' figures differed by a median 11% against 9% between rounds of one setting, with no
# sign (mean -1%): the machine's own swing, not the steps, sets a profile's spread.
BATCHED_GENERATE = 4
PROMPT_REPS = 2
MIN_BYTES, MAX_BYTES = 256e6, 2**30
# llama.cpp refuses a model deeper than this (src/llama-hparams.h, LLAMA_MAX_LAYERS: GGML_ASSERT, SIGABRT). 4x a
# 300 MiB last-level cache in Q4_K at width 512 asked for 634 layers on an AMX Xeon VM (2026-12-06).
MAX_LAYERS = 512
PROMPT_BYTES = 48e6


def probe(width: int, layers: int) -> Architecture:
    """A llama-shaped probe: head_dim 64, 4:1 grouped KV, MLP 4x wide, a small tied vocabulary."""
    heads = width // 64
    return Architecture(
        layers=layers,
        hidden_size=width,
        num_heads=heads,
        num_kv_heads=max(heads // 4, 1),
        head_dim=64,
        intermediate_size=4 * width if width >= WIDE else 3 * width,
        vocab_size=1024,
        tied_embeddings=True,
    )


def own_probe(shape: Architecture, layers: int) -> Architecture:
    """A model's own layer shape (width, heads, KV heads, head_dim, MLP) `layers` deep, with the probes' small tied
    vocabulary: what `measure --engine llamacpp --model` runs beside the two probe widths."""
    return shape._replace(layers=layers, vocab_size=1024, tied_embeddings=True)


def own_layers(shape: Architecture, kind: str) -> int:
    """The depth of a model's own-shape probe: the model's, within MAX_BYTES of matrices (at least 2 layers). At 2
    and 4 rows llama.cpp ran this VM's 896-wide layers 12% slower a byte 8 deep than 17 deep (1.94 against 1.73 ms
    a layer at 4 rows, 3 interleaved rounds; at 1 and 8 rows alike): the model's own depth is the one to time."""
    return max(DEPTHS[0], min(shape.layers, math.floor(MAX_BYTES / _layer_bytes(shape, kind))))


def deep_layers(a: Architecture, kind: str, cache_bytes: float) -> int:
    """Layers of a probe of `a`'s layer shape whose weights are probe_bytes(cache_bytes)."""
    return layers_for(a, kind, probe_bytes(cache_bytes))


def probe_bytes(cache_bytes: float) -> float:
    """The deep probes' weights [B] for a last-level cache: 4x it, within MIN_BYTES..MAX_BYTES."""
    return min(max(4 * cache_bytes, MIN_BYTES), MAX_BYTES)


def same_probes(before: float | None, now: float | None) -> bool:
    """Whether the deep probes of two runs sized by these caches [B] are alike: within the read ladder's plateau
    factor (kernels.PLATEAU) of each other, as two working sets read at memory speed are. A bare run's own ladder put
    the AMX Xeon VM's cache at 2-64 MiB from run to run: probes of 256 MB (the floor) or 268 MB (4x 64 MiB)."""
    from roofline.measure.kernels import PLATEAU

    if before is None or now is None:
        return before == now
    small, large = sorted((probe_bytes(before), probe_bytes(now)))
    return large <= PLATEAU * small


def probe_cache(
    measured: dict[str, Any] | None,
    reported: float,
    earlier: float | None = None,
    ladder: Callable[[float], float | None] | None = None,
) -> tuple[float, str]:
    """The last-level cache [B] the deep probes are sized by, and where it came from, first found of: the cache the
    read ladder of a torch profile found (`measured.bandwidth.read.by_working_set`, where its curve reached memory
    speed); the cache an `earlier` llama.cpp run into the same save was sized by (its types then join this run's);
    what `ladder(reported)` (ladder_cache, timed now) finds; what the OS `reported`. On a 2-core AMX Xeon VM sysfs
    said 300 MiB and the ladder 64 MiB (reads fell to memory speed from 128 MiB): sized by sysfs, each deep probe
    was 1 GiB and the default run measured one type in 60 s."""
    measured = measured or {}
    found = ((measured.get("bandwidth") or {}).get("read") or {}).get("by_working_set") or {}
    on_cpu = (measured.get("device") or {}).get("kind") == "cpu"  # a GPU profile's ladder is the GPU's caches
    # without cache_bytes even the smallest working set read at memory speed: the knee is then that smallest set
    cache = found.get("cache_bytes") or found.get("knee_bytes")
    if on_cpu and found.get("reached") and cache:
        return float(cache), "the read ladder"
    if earlier:
        return float(earlier), "the save's earlier llama.cpp run"
    if ladder and (now := ladder(reported)):
        return now, "this run's read ladder (one numpy thread: where reads reach memory speed)"
    return reported, "the OS"


LADDER_S = 3.0  # at most, of BUDGET_S: the read ladder a bare run times when no profile's ladder sizes its probes


def ladder_cache(reported: float, seconds: float = LADDER_S) -> float | None:
    """The cache [B] a bare run sizes its deep probes by when no profile's ladder says: the knee (the smallest
    working set read at memory speed, kernels.knee) of numpy's read bandwidth by working set (numpy_ladder: one
    thread, 1 MiB doubling up to 4x the `reported` cache, within MAX_BYTES; each the best of three sums after one;
    stopping before a fill that the fills so far say would pass `seconds`), or None where it never reached memory
    speed or read at it from the first rung. One numpy thread read 9-11 GB/s up to 16 MiB and about 6 from 32 MiB
    on a 2-core AMX Xeon VM (knee 32 MiB; torch's two-thread ladder put its knee at 64-128 MiB): the probes' 256 MB
    floor is past both. Sized by sysfs's 300 MiB the probes were 1.2 GB and a default run measured one type; with
    this ladder, three in 44 s."""
    from roofline.measure.kernels import knee

    found = knee(numpy_ladder(int(min(max(4 * reported, 64 * 2**20), MAX_BYTES)), seconds))
    # a knee at the first rung (no cache_bytes) is no cache seen: one thread's sums ran alike at every size (a 2-core
    # Zen 4 VM's said "1 MiB" where its L3 is 32 MiB, 2026-12-07), so the OS's figure stands
    return found["knee_bytes"] if found["reached"] and found["cache_bytes"] is not None else None


def numpy_ladder(total: int, seconds: float) -> list[dict[str, float]]:
    """ladder_cache's points: kernels.climb's loop from 1 MiB doubling up to `total` bytes (not past the largest
    doubling within it), one numpy thread's sums, each the best of three after one."""
    import numpy as np

    from roofline.measure.kernels import climb

    values = np.empty(total // 4, dtype=np.float32)  # reserved, touched as the ladder climbs
    deadline = time.perf_counter() + seconds

    def fill(lo: int, hi: int) -> None:
        values[lo // 4 : hi // 4] = 1.0

    def read_s(size: int) -> float:
        view = values[: size // 4]
        view.sum()
        times = []
        for _ in range(3):
            begin = time.perf_counter()
            view.sum()
            times.append(time.perf_counter() - begin)
        return min(times)

    top = 2 ** (max(total, 2**20).bit_length() - 1)  # doubling from 1 MiB: the largest such set within `total`
    return climb(fill, read_s, top, 2**20, lambda: deadline - time.perf_counter())


def layers_for(a: Architecture, kind: str, target: float) -> int:
    """Layers (2 to MAX_LAYERS) of a probe of `a`'s layer shape with `target` bytes of matrices."""
    return min(MAX_LAYERS, max(2, math.ceil(target / _layer_bytes(a, kind))))


def _layer_bytes(a: Architecture, kind: str) -> float:
    """Bytes of one layer's matrices of `a`'s shape in weight type `kind`."""
    from roofline.calc.llamacpp import BITS

    return _matrix_params(a._replace(layers=1)) * BITS[kind] / 8


def _matrix_params(a: Architecture) -> int:
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    return a.layers * (2 * a.hidden_size * q + 2 * a.hidden_size * kv + 3 * a.hidden_size * a.intermediate_size)


def _attention_flops(a: Architecture, prompt: int) -> float:
    """Causal attention of one prompt: QK^T and PV over prompt x (prompt + 1) / 2 pairs per layer."""
    return a.layers * 4 * a.num_heads * a.head_dim * prompt * (prompt + 1) / 2


def run(
    build: llamacpp.Build,
    cache_bytes: float,
    types: tuple[str, ...] = TYPES,
    threads: int | None = None,
    on_step: Callable[[str], None] = lambda s: None,
    budget_s: float | None = None,
    shape: Architecture | None = None,
    server: bool = True,
) -> dict[str, Any]:
    """The profile's engines.llamacpp entry (see the module docstring); with `shape`, each type also probed at that
    model's own layer shape (`at_width`); `server` False leaves out llama-server's own cost (measure_server), which
    only serving predictions use. What the run could not measure is said in `notes`. With `budget_s`, types are
    begun and stopped by `Pace`; the rest are listed under `skipped` (a type begun and stopped also under
    `stopped`), and each then has its prompts run alone (`prompt_types`, measure_prompts) while they would end by
    the deadline at the time a measured type's wide prompts took (writing their probes included), which the pace
    keeps for them; one that fails is left to its stand-in."""
    started = time.perf_counter()
    out: dict[str, Any] = {"build": build.found, "widths": [NARROW, WIDE], "types": {}, "cache_bytes": cache_bytes}
    notes: list[str] = []
    pace = Pace(None if budget_s is None else started + budget_s)
    with tempfile.TemporaryDirectory(prefix="roofline-llamacpp-", dir=scratch()) as folder:
        for i, kind in enumerate(types):
            # the prompts of the types skipped so far and of the later ones, should they be skipped
            reserve = (len(out.get("skipped", [])) + len(types) - i - 1) * pace.prompts_s()
            if out["types"] and not pace.may_begin(reserve):
                out.setdefault("skipped", []).append(kind)
                continue
            pace.begin(reserve)
            try:
                entry, info = measure_type(build, kind, Path(folder), cache_bytes, threads, on_step, shape, pace.mark)
            except OverBudget:  # the pace has reached the deadline: no more types
                out["stopped"] = kind
                out.setdefault("skipped", []).extend(types[types.index(kind) :])
                break
            out["types"][kind] = {**entry, "seconds": round(pace.end(), 1)}
            pace.prompts.append(info.pop("prompts_s"))
            out.update(info)
            if len(out["types"]) == 1 and not info.get("gpu"):  # once, in the budget, not a type
                on_step("llama.cpp: decode attention")
                out["attention"] = measure_attention(build, Path(folder), threads, on_step)
                if server:
                    on_step("llama.cpp: llama-server's own cost a step")
                    out["server"] = measure_server(build, Path(folder), threads, notes)
            elif len(out["types"]) == 1 and server:  # llama-server and llama-bench offload by other defaults there
                notes.append("llama-server's own cost a step not measured on a GPU build")
        for key in ("attention", "server"):
            if out.get(key) is None:
                out.pop(key, None)
        for kind in out.get("skipped", []):
            if not pace.may_begin_prompts():
                break
            try:
                entry = measure_prompts(build, kind, Path(folder), threads, out, on_step)
            except (RooflineError, OSError) as e:  # a crash, a full disk: its stand-in prices it; the profile stays
                on_step(f"llama.cpp {kind.lower()}: its prompts alone failed ({e})")
                continue
            out.setdefault("prompt_types", {})[kind] = entry
            pace.prompts.append(entry["seconds"])  # the time they really take, writing included
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["machine"] = machine.record()
    return out | ({"notes": notes} if notes else {})


class OverBudget(Exception):
    """A type's measurement stopped by its Pace: at its pace so far it would end past the deadline."""


class Pace:
    """The default run's types against a deadline [perf_counter s] (None: no deadline), each timed from its start,
    with `mark`s after each width's curve (not after the writing and the small fixed-cost probes, which take 0.1 s:
    their pace would be the writing's, which says little about the runs'). The reference is the median type so far
    (the lower middle by total time): a type is begun only while the reference would end by the deadline, and
    stopped (OverBudget, at a mark) when its time so far, scaled by the reference's total over the reference's time
    at the same mark, would end past it; the run then measures no more types. The first type is never stopped; its
    last run (the deep prompt) is never checked. On a 2-core AMX Xeon VM (2026-12-06), by the rule before (begun
    while the slowest so far fitted, never stopped), q5_0's slow prompt kernels took 13.3 s against about 10 s for
    the five types before it, and begun at 50 s it ended the run at 63-64 s, twice. Later runs of that VM recorded
    the types' times: the first (q4_k, cold) 11.1-13.2 s, q6_k 9.1-10.4, q8_0 9.8-11.7, f16 5.4-7.1, q5_k
    10.7-11.8; the median so far, not the slowest, is the reference, since the cold first type would leave a type's
    time unused. A type is begun and kept to the deadline less a reserve: the time the types skipped so far and
    those after it would take to run their prompts alone (measure_prompts), at prompts_s."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.done: list[tuple[float, list[float]]] = []  # each type's total and marks [s from its start]
        self.prompts: list[float] = []  # each measured type's wide prompts with their writing, each run alone [s]
        self.begun, self.marks, self.reserve = 0.0, [], 0.0

    def prompts_s(self) -> float:
        """A skipped type's prompts run alone [s]: the median of the measured types' wide prompts (their probes'
        writing included) and of the runs alone so far (0 before any)."""
        return statistics.median(self.prompts) if self.prompts else 0.0

    def reference(self) -> tuple[float, list[float]] | None:
        """The median type so far (its total and marks [s]), None before the first has ended."""
        return sorted(self.done)[(len(self.done) - 1) // 2] if self.done else None

    def may_begin(self, reserve: float = 0.0) -> bool:
        """Whether a type begun now would end by the deadline less `reserve` [s] at the reference's time."""
        ref = self.reference()
        return self.deadline is None or ref is None or time.perf_counter() + ref[0] + reserve <= self.deadline

    def may_begin_prompts(self) -> bool:
        """Whether a skipped type's prompts run alone now would end by the deadline at prompts_s."""
        return self.deadline is None or time.perf_counter() + self.prompts_s() <= self.deadline

    def begin(self, reserve: float = 0.0) -> None:
        """A type begins now, to end by the deadline less `reserve` [s]."""
        self.begun, self.marks, self.reserve = time.perf_counter(), [], reserve

    def mark(self) -> None:
        """Between two of the type's llama.cpp runs: OverBudget when its pace so far would end past the deadline."""
        self.marks.append(time.perf_counter() - self.begun)
        ref = self.reference()
        if self.deadline is None or ref is None:
            return
        total, marks = ref
        at = marks[len(self.marks) - 1] if len(self.marks) <= len(marks) else 0.0
        if at > 0 and self.begun + self.marks[-1] * total / at > self.deadline - self.reserve:
            raise OverBudget

    def end(self) -> float:
        """The type's time [s], kept."""
        total = time.perf_counter() - self.begun
        self.done.append((total, self.marks))
        return total


def scratch(needed: float = 3 * (MAX_BYTES + PROMPT_BYTES)) -> str | None:
    """Where the probes are written: /dev/shm (memory) where it has `needed` bytes free [B] (by default a type's
    probes at their largest: narrow, wide and a model's own shape, each deep and shallow), else the system's
    temporary folder (None). In memory, a probe is written in 0.35-0.45 s instead of 0.5-0.9 s (256 MB, this
    VM), and no disk write-back can run beside the next timed one."""
    import shutil

    try:
        return "/dev/shm" if shutil.disk_usage("/dev/shm").free >= needed else None
    except OSError:
        return None


def measure_type(
    build: llamacpp.Build,
    kind: str,
    folder: Path,
    cache_bytes: float,
    threads: int | None,
    on_step: Callable,
    shape: Architecture | None = None,
    mark: Callable[[], None] = lambda: None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One type's entry and the run's threads and build commit: its probes (and `shape`'s own, when given) written
    in `folder`, run, removed; `mark` called between its llama.cpp runs (Pace.mark)."""
    from roofline.specs.checkpoint import gguf_model

    layer_shapes = {"narrow": probe(NARROW, 1), "wide": probe(WIDE, 1)}
    if shape is not None:
        layer_shapes["own"] = own_probe(shape, 1)
    probes = [("small2", probe(SMALL, DEPTHS[0])), ("small8", probe(SMALL, DEPTHS[1]))]
    for name, a in layer_shapes.items():
        deep = own_layers(shape, kind) if name == "own" else deep_layers(a, kind, cache_bytes)
        probes.append((name, a._replace(layers=deep)))
        # A model's own prompts run at its own depth, up to the deep probes' (beyond it prompt_depth_factor is held):
        # they then need no depth ratio, which moved 1.12-1.72 between six profiles of one VM (2026-12-06).
        if name == "own":
            prompt_layers = min(deep, layers_for(a, kind, probe_bytes(cache_bytes)))
        else:
            prompt_layers = layers_for(a, kind, PROMPT_BYTES)
        probes.append((f"{name}_prompt", a._replace(layers=prompt_layers)))
    files, writing = {}, 0.0  # writing: the wide probes' seconds, which measure_prompts writes too
    for name, a in probes:
        same = next((f for f in files.values() if f[0] == a), None)  # the own probe doubling as its prompt probe
        if same is None:
            on_step(f"llama.cpp {kind.lower()}: writing the {name} probe")
            began = time.perf_counter()
            path = synthetic.write(a, folder / f"{name}-{kind}.gguf", kind, name)
            same = (a, path, sum(gguf_model(path)[1].streamed_by_dtype.values()))  # matrix bytes
            writing += time.perf_counter() - began if name in ("wide", "wide_prompt") else 0.0
        files[name] = same
    on_step(f"llama.cpp {kind.lower()}: llama-bench and llama-batched-bench")
    try:
        entry, info = _type_entry(build, files, threads, mark)
        info["prompts_s"] += writing
        return entry, info
    finally:
        for _, path, _ in files.values():
            path.unlink(missing_ok=True)


def measure_prompts(
    build: llamacpp.Build,
    kind: str,
    folder: Path,
    threads: int | None,
    profile: dict[str, Any],
    on_step: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """A type the default run had no time for, its prompts alone (`prompt_types`): the wide shallow prompt probe
    (PROMPT_BYTES of the type) at PROMPTS and the deep wide probe at PROMPT_ROWS (its prompt_depth, which differs by
    type: f16's 1.50 against q8_0's 1.27 in one Zen 4 profile), the fixed cost of the measured type that stands in
    for it taken out. roofline.calc.llamacpp.prompt_factor prices its prompts from them; its decode stays its
    stand-in's. 2-6 s a type on a 2-core Zen 4 VM, writing the probes included, against 5-13 s for a whole type."""
    from roofline.calc.llamacpp import measured_type
    from roofline.specs.checkpoint import gguf_model

    started = time.perf_counter()
    stand_in = profile["types"][measured_type(profile, kind)]
    per_step, per_layer = stand_in["per_step_s"], stand_in["per_layer_s"]
    wide = probe(WIDE, 1)
    files = []
    try:
        for name, layers in (("wide_prompt", layers_for(wide, kind, PROMPT_BYTES)), ("wide", None)):
            a = wide._replace(layers=layers or deep_layers(wide, kind, profile["cache_bytes"]))
            on_step(f"llama.cpp {kind.lower()}: its prompts alone ({name} probe)")
            path = synthetic.write(a, folder / f"{name}-{kind}.gguf", kind, name)
            files.append((a, path, sum(gguf_model(path)[1].streamed_by_dtype.values())))
        table, repack = prompt_seconds_per_byte(build, files[0], per_step, per_layer, threads)
        deep, _ = prompt_seconds_per_byte(
            build, files[1], per_step, per_layer, threads, repack=repack, prompts=(PROMPT_ROWS,)
        )
    finally:
        for _, path, _ in files:
            path.unlink(missing_ok=True)
    depth = {
        "shallow_bytes": files[0][2],
        "deep_bytes": files[1][2],
        "ratio": deep[str(PROMPT_ROWS)] / table[str(PROMPT_ROWS)],
    }
    return {
        "seconds_per_byte": table,
        "prompt_depth": depth,
        "repack": repack,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _type_entry(build, files: dict[str, tuple], threads: int | None, mark: Callable[[], None]) -> tuple[dict, dict]:
    tg = {}
    for name in ("small2", "small8"):
        a, path, _ = files[name]
        results, repack = llamacpp.bench(build, path, [], GENERATE, threads)
        tg[a.layers] = _median_s(results[0]) / results[0]["n_gen"]
        info = {"threads": results[0]["n_threads"], "build_commit": results[0].get("build_commit")}
        info["gpu"] = results[0].get("gpu_info") or ""  # the GPUs a GPU build runs on; empty on a CPU build
    per_step, per_layer = fixed_cost(tg)
    wide, repack_wide, info["prompts_s"] = _curve(
        build, files["wide"], files["wide_prompt"], per_step, per_layer, threads
    )
    mark()
    narrow, repack_narrow, _ = _curve(build, files["narrow"], files["narrow_prompt"], per_step, per_layer, threads)
    mark()
    own, repack_own = {}, True
    if "own" in files:
        o = files["own"][0]
        # Two passes: a model's own rows are what it is priced from, and one pass's 2-row point once came out 30%
        # slow (101 against 76-82 ps a byte in four other profiles), pricing a server's TPOT 1.27x at 0.7x load.
        table, repack_own, _ = _curve(build, files["own"], files["own_prompt"], per_step, per_layer, threads, passes=2)
        prompt_bytes = files["own_prompt"][2]  # its prompts' depth: prompt_depth_factor scales from it
        own[str(o.hidden_size)] = {"shape": _layer_shape(o), "prompt_bytes": prompt_bytes, "seconds_per_byte": table}
        mark()
    a, _, streamed = files["wide"]
    began = time.perf_counter()
    deep, _ = prompt_seconds_per_byte(
        build, files["wide"], per_step, per_layer, threads, repack=repack_wide, prompts=(PROMPT_ROWS,)
    )
    info["prompts_s"] += time.perf_counter() - began  # what measure_prompts runs for a skipped type: Pace keeps it
    entry = {
        "repack": bool(repack and repack_wide and repack_narrow and repack_own),
        "per_step_s": per_step,
        "per_layer_s": per_layer,
        "probe_bytes": streamed,
        "probe_layers": a.layers,  # the wide probe's depth: validate reruns it to see this machine's drift
        "prompt_probe_layers": files["wide_prompt"][0].layers,  # and the wide prompt probe's, for the prompts' drift
        "prompt_depth": {  # the same prompt on the deep wide probe: its weights no longer stay in cache
            "shallow_bytes": files["wide_prompt"][2],
            "deep_bytes": streamed,
            "ratio": deep[str(PROMPT_ROWS)] / wide[str(PROMPT_ROWS)],
        },
        "seconds_per_byte": wide,
        "narrow_seconds_per_byte": narrow,
    }
    if own:
        entry["at_width"] = own  # a model's own layer shape, which prices models of that width instead
    return entry, info


ATTENTION_PROMPTS = (1, 288)  # each row's cells: one row at 289 and more takes the split path (view 512)
ATTENTION_ROWS = (1, 4)  # one row (split at the longer prompt) and four (row by row at both)
ATTENTION_LAYERS = 8
STEPS = 32  # decode steps a run of the attention probe times
# Passes, each one llama-batched-bench run of both prompts (its added time from one moment): on the AMX Xeon VM
# (2026-12-06) one pass's figure ran 96-276 ns a head-cell from minute to minute, so the median of three is kept,
# with the range.
ATTENTION_PASSES = 3


def measure_attention(
    build: llamacpp.Build, folder: Path, threads: int | None, on_step: Callable[[str], None] = lambda s: None
) -> dict[str, Any] | None:
    """llama.cpp's decode attention on this CPU: seconds per head-cell (a query head over one cached token) on the
    busiest thread (roofline.calc.llamacpp.busiest_cells), from decode steps of a narrow probe after prompts of
    ATTENTION_PROMPTS tokens: the step time the longer prompt adds over the head-cells it adds, the median of
    ATTENTION_PASSES passes. Four rows give the row-by-row kernel's figure (`seconds_per_head_cell`), one row its
    split path's (`split_seconds_per_head_cell`: every head over one thread's share of the view). It is llama.cpp's
    decode path at fewer than 64 tokens a step (SmolLM2-135M q8_0 on a 2-core AMX Xeon VM: 4 rows 27 -> 73 ms a step
    from 1- to 480-token prompts; docs/guides/llamacpp.md, Decode attention). None when the added time is not
    positive (a moment's noise) or a run printed no row (named on `on_step`): the profile then prices attention at
    the matmuls' FLOP/s; a split figure that is not positive is left out alone. Weight repacking as llama.cpp's
    default runs the probe, else off (it crashes some types' prompts on AMX CPUs). The shorter prompt's one-row
    steps run row by row, not split: a few percent of the split cells, counted as split."""
    from roofline.calc.llamacpp import Heads, busiest_cells

    a = probe(NARROW, ATTENTION_LAYERS)
    path = synthetic.write(a, folder / "attention.gguf", "Q8_0", "attention")
    added: dict[int, list[float]] = {rows: [] for rows in ATTENTION_ROWS}
    repack = None
    try:
        for _ in range(ATTENTION_PASSES):  # both prompts in one run: their difference is from one moment
            found, repack = llamacpp.batched(
                build, path, [*ATTENTION_PROMPTS], STEPS, [*ATTENTION_ROWS], threads, repack
            )
            step = {(int(r["pp"]), int(r["pl"])): r["t_tg"] / r["tg"] for r in found}
            for rows in ATTENTION_ROWS:
                added[rows].append(step[ATTENTION_PROMPTS[1], rows] - step[ATTENTION_PROMPTS[0], rows])
    except RooflineError as e:
        on_step(f"llama.cpp: decode attention not measured ({e}); priced at the matmuls' FLOP/s")
        return None
    finally:
        path.unlink()
    nth = int(found[0].get("n_threads") or threads or 1)

    heads = Heads(a.num_heads, a.head_dim, a.layers)

    def cells(rows: int, prompt: int) -> float:  # mean over the steps, a step's rows at prompt + j + 1 cells
        keys = [rows * a.layers * (prompt + j + 1) for j in range(STEPS)]
        return statistics.mean(sum(busiest_cells(heads, nth, rows, k, rows)) for k in keys)

    per = {}
    for rows, times in added.items():
        more = cells(rows, ATTENTION_PROMPTS[1]) - cells(rows, ATTENTION_PROMPTS[0])
        per[rows] = statistics.median(times) / more, [min(times) / more, max(times) / more]
    (one, one_spread), (each, spread) = per[ATTENTION_ROWS[0]], per[ATTENTION_ROWS[1]]
    if each <= 0:
        return None
    out = {"seconds_per_head_cell": each, "spread": spread, "head_dim": a.head_dim, "threads": nth}
    return out | ({"split_seconds_per_head_cell": one, "split_spread": one_spread} if one > 0 else {})


# llama-server's own cost a decode step (measure_server). On the Zen 4 VM (2026-12-07, 3 interleaved rounds each,
# Qwen2.5-0.5B's layers 8 deep in q8_0) one sequence's decode step ran 0.69-1.23 ms longer served than under
# llama-bench with a vocabulary of 151,936 and 0.35-0.66 ms with 16,384 (medians 1.10 and 0.54); at 1 and 4
# sequences (5 rounds, twice each) about 0.2-0.3 ms more a sequence at 152k and 0.04-0.32 at 16k, within the noise:
# priced as a cost a step, measured at one sequence. The probe's vocabulary is Llama 3's, between the 32k and 152k
# of common models.
SERVER_VOCAB = 128256
SERVER_PROMPT = 128  # the request's prompt tokens, and llama-bench's depth
SERVER_STEPS = 32  # decode steps timed a request (and llama-bench's tokens generated)
SERVER_ROUNDS = 5  # interleaved rounds, each llama-bench then two requests


def measure_server(build: llamacpp.Build, folder: Path, threads: int | None, notes: list[str]) -> dict[str, Any] | None:
    """llama-server's own cost a decode step on this machine [s], which llama-bench's timings lack: the server
    samples each token and builds and streams its event, and a client on the same machine reads it (roofline
    bench, as it measures a server). The median over SERVER_ROUNDS interleaved rounds of a request's TPOT (a prompt
    of SERVER_PROMPT random token ids, SERVER_STEPS + 1 tokens, one sequence, timed from the stream by roofline
    bench's client) less llama-bench's time a generated token of the same probe at the same depth, with the spread;
    at least 0. None, with the reason added to `notes`, without httpx or when a run fails: the profile then prices
    llama-server's steps as llama-bench's (saved into a profile that has an earlier probe, by that one)."""
    try:
        import httpx  # noqa: F401
    except ImportError:
        notes.append("llama-server's own cost a step not measured: needs httpx (pip install 'roofline[bench]')")
        return None
    from roofline.bench import bench as load
    from roofline.calc.workload import Request

    a = probe(NARROW, ATTENTION_LAYERS)._replace(vocab_size=SERVER_VOCAB)
    path = folder / "server.gguf"
    request = Request(None, SERVER_PROMPT, SERVER_STEPS + 1)
    served: list[float] = []
    alone: list[float] = []
    try:
        synthetic.write(a, path, "Q8_0", "server")
        context = 4 * (SERVER_PROMPT + SERVER_STEPS + 1)
        with llamacpp.server(build, path, 1, context, threads=threads) as url:
            repack = None
            load(url, [request], concurrency=1, vocab=SERVER_VOCAB)  # warm-up
            for _ in range(SERVER_ROUNDS):
                found, repack = llamacpp.bench(build, path, [], SERVER_STEPS, threads, 2, repack, SERVER_PROMPT)
                alone.append(_median_s(found[0]) / (found[0].get("n_gen") or SERVER_STEPS))
                run = load(url, [request, request], concurrency=1, vocab=SERVER_VOCAB)
                if run.requests < 2 or run.tpot_s.get("p50") is None:
                    failed = f"{sum(run.errors.values())} of 2 requests failed ({run.errors})" if run.errors else ""
                    raise RooflineError(failed or "the server streamed no more than one token a request")
                served.append(run.tpot_s["p50"])
    except (RooflineError, OSError, KeyError) as e:  # KeyError: a llama-bench row without its samples
        notes.append(f"llama-server's own cost a step not measured ({e}); its steps priced without it")
        return None
    finally:
        path.unlink(missing_ok=True)
    gaps = [s - b for s, b in zip(served, alone)]
    return {
        "step_s": max(statistics.median(gaps), 0.0),
        "spread": [min(gaps), max(gaps)],
        "served_s": statistics.median(served),
        "bench_s": statistics.median(alone),
        "vocab_size": SERVER_VOCAB,
        "rounds": SERVER_ROUNDS,
    }


def _layer_shape(a: Architecture) -> str:
    """A probe's layer shape in words, recorded beside its times."""
    return (
        f"hidden {a.hidden_size}, MLP {a.intermediate_size}, {a.num_heads} heads, {a.num_kv_heads} KV heads, "
        f"head_dim {a.head_dim}, {a.layers} layers"
    )


def fixed_cost(steps: dict[int, float]) -> tuple[float, float]:
    """(per step, per layer) [s] of a decode step: the line through the small probe's step times [s] at DEPTHS."""
    per_layer = max((steps[DEPTHS[1]] - steps[DEPTHS[0]]) / (DEPTHS[1] - DEPTHS[0]), 0.0)
    return max(steps[DEPTHS[0]] - DEPTHS[0] * per_layer, 0.0), per_layer


def _curve(build, deep: tuple, shallow: tuple, per_step: float, per_layer: float, threads, passes: int = 1):
    """rows -> seconds per streamed matrix byte of one width, its fixed cost taken out: decode rows on the `deep`
    probe (the fastest of `passes` llama-batched-bench runs per row), prompts on the `shallow` one; the repack used;
    and the time the prompts took [s]. Each sequence's prompt is one token: 4 had taken 0.36 of a 1.05 s run
    (prefilling 4 x M tokens at each M) for the same decode steps (three alternating pairs: 9.2-12.4 ms at M = 1,
    53.5-55.6 at M = 16)."""
    began = time.perf_counter()
    table, repack = prompt_seconds_per_byte(build, shallow, per_step, per_layer, threads)
    prompts_s = time.perf_counter() - began
    a, path, streamed = deep
    fixed = per_step + a.layers * per_layer
    steps: dict[int, float] = {}
    for _ in range(passes):  # short prompts: fast
        rows, _ = llamacpp.batched(build, path, 1, BATCHED_GENERATE, list(DECODE_ROWS), threads, repack)
        for r in rows:
            steps[r["pl"]] = min(steps.get(r["pl"], math.inf), r["t_tg"] / r["tg"])
    table.update({str(m): streaming_s(step, fixed) / streamed for m, step in steps.items()})
    return dict(sorted(table.items(), key=lambda kv: int(kv[0]))), repack, prompts_s


def prompt_seconds_per_byte(
    build,
    shallow: tuple,
    per_step: float,
    per_layer: float,
    threads,
    reps: int = PROMPT_REPS,
    repack: bool | None = None,
    prompts: tuple[int, ...] = PROMPTS,
) -> tuple[dict[str, float], bool]:
    """prompt -> seconds per streamed matrix byte of the `shallow` probe (architecture, path, matrix bytes)
    processing `prompts`, its fixed cost and attention taken out; and the repack used."""
    a, path, streamed = shallow
    results, repack = llamacpp.bench(build, path, list(prompts), 0, threads, reps, repack)
    fixed = per_step + a.layers * per_layer
    table = {
        str(r["n_prompt"]): _per_byte(a, streamed, r["n_prompt"], streaming_s(_median_s(r), fixed)) for r in results
    }
    return table, repack


def streaming_s(seconds: float, fixed: float) -> float:
    """The part of a measured step [s] that streams the matrices: the step less the fixed cost the small probes
    measured, but at least half the step. The fixed cost comes from other probes at another moment, and a zero or
    negative time per byte cannot be priced: a CI validate (1 layer, q4_0) crashed with a math domain error in the
    log-log interpolation, which a fixed cost larger than the step leaves."""
    return max(seconds - fixed, seconds / 2)


def _per_byte(a: Architecture, streamed: float, prompt: int, seconds: float) -> float:
    """Seconds per streamed byte of a prompt's matmuls, its attention taken out at the same achieved FLOP/s."""
    matmuls = f.matmul_flops(_matrix_params(a), prompt)
    return seconds / (streamed * (1 + _attention_flops(a, prompt) / matmuls))


def _median_s(result: dict[str, Any]) -> float:
    return statistics.median(result["samples_ns"]) / 1e9


def spec(entry: dict[str, Any], base: Any = None) -> dict[str, Any]:
    """The hardware YAML mapping with engines.llamacpp = `entry`: `base`'s (a Hardware) figures, else this machine's
    as llama.cpp achieved them (the best decode bandwidth and prompt-processing FLOP/s of the probes)."""
    from roofline.calc.llamacpp import BITS
    from roofline.measure import machine
    from roofline.specs.hardware import hardware_to_mapping

    if base is not None:
        mapping = hardware_to_mapping(base)
        engines = mapping.get("engines") or {}
        before = engines.get("llamacpp") or {}
        if same_probes(before.get("cache_bytes"), entry.get("cache_bytes")) and all(
            before.get(key) == entry.get(key) for key in ("widths", "build")
        ):
            # the same probes and build: types measured before and not now are kept, and so are a type's own-width
            # probes of other models
            types = {**before.get("types", {}), **entry["types"]}
            for kind, new in entry["types"].items():
                kept = (before.get("types", {}).get(kind) or {}).get("at_width") or {}
                if kept:
                    types[kind] = {**new, "at_width": {**kept, **(new.get("at_width") or {})}}
            prompts = {**before.get("prompt_types", {}), **entry.get("prompt_types", {})}
            entry = {k: v for k, v in entry.items() if k != "prompt_types"} | {"types": types}
            if any(k not in types for k in prompts):  # a type measured whole needs no prompts alone
                entry["prompt_types"] = {k: v for k, v in prompts.items() if k not in types}
            for key in ("attention", "server"):  # not measured now: the earlier probe's
                if key not in entry and before.get(key):
                    entry[key] = before[key]
        return {**mapping, "engines": {**engines, "llamacpp": entry}}
    bandwidth = max(1 / t["seconds_per_byte"]["1"] for t in entry["types"].values())
    flops = {
        kind: max(2 * int(m) / (BITS[kind] / 8 * s) for m, s in t["seconds_per_byte"].items())
        for kind, t in entry["types"].items()
    }
    return {
        "name": f"{machine.cpu_name()} (measured by llama.cpp)",
        "source": f"roofline measure --engine llamacpp ({entry['build']}, {entry.get('threads')} threads)",
        "memory_capacity": machine.system_memory(),
        "memory_bandwidth": bandwidth,
        "peak_flops": {"fp32": max(flops.values()), "fp16": flops.get("F16", max(flops.values()))},
        "engines": {"llamacpp": entry},
    }


def as_hardware(entry: dict[str, Any], base: Any = None) -> Any:
    """spec() as a Hardware the calculator takes."""
    from roofline.specs.hardware import hardware_from_mapping

    return hardware_from_mapping(spec(entry, base), "llama.cpp measured here", "measured-llamacpp")


HEADER = """\
# engines.llamacpp: llama.cpp's costs per weight type measured by `roofline measure --engine llamacpp` from
# synthetic probe models: fixed seconds per decode step and per layer, and seconds per streamed weight byte by
# rows (1-16: decode steps of that many sequences; 128, 512: prompt processing). roofline.calc.llamacpp prices.
"""


def report(entry: dict[str, Any]) -> Any:
    """`measure --engine llamacpp --json`: the entry; a table row per type with its decode bandwidth (rows 1),
    prompt-processing FLOP/s (the largest rows), fixed costs, the deep probe's prompt against the shallow's and the
    seconds the type took; then the types whose prompts ran alone (no decode or fixed cost: None)."""
    from roofline.calc.llamacpp import BITS
    from roofline.report import Report

    rows = []
    alone = entry.get("prompt_types") or {}
    for kind, t in [*entry["types"].items(), *alone.items()]:
        table = t["seconds_per_byte"]
        largest = max(table, key=int)
        rows.append(
            {
                "type": kind,
                "prompts_alone": kind in alone and kind not in entry["types"],  # its decode priced by a stand-in
                "decode_bytes_per_s": 1 / table["1"] if "1" in table else None,
                "prefill_flop_per_s": 2 * int(largest) / (BITS[kind] / 8 * table[largest]),
                "prefill_rows": int(largest),
                "per_step_s": t.get("per_step_s"),
                "per_layer_s": t.get("per_layer_s"),
                "deep_prompt_ratio": (t.get("prompt_depth") or {}).get("ratio"),
                "repack": t["repack"],
                "seconds": t.get("seconds"),  # the type's measurement (absent in profiles before it was recorded)
            }
        )
    return Report("llamacpp-profile", entry, rows)


def reference_seconds_per_byte(
    build: llamacpp.Build, entry: dict[str, Any], kind: str, path: Path, threads: int | None = None
) -> float:
    """The wide probe of `kind` (written at `path` if absent) decoding one row now [s/B], as the profile measured
    it: streaming_s(step, fixed) / matrix bytes. Against the profile's seconds_per_byte["1"] it is this machine's
    drift."""
    from roofline.specs.checkpoint import gguf_model

    a = probe(WIDE, entry["probe_layers"])
    if not path.is_file():
        synthetic.write(a, path, kind, "wide")
    streamed = sum(gguf_model(path)[1].streamed_by_dtype.values())
    results, _ = llamacpp.bench(build, path, [], GENERATE, threads, repack=entry.get("repack", True))
    step = _median_s(results[0]) / results[0]["n_gen"]
    return streaming_s(step, entry["per_step_s"] + a.layers * entry["per_layer_s"]) / streamed


def reference_prompt_seconds_per_byte(
    build: llamacpp.Build, entry: dict[str, Any], kind: str, path: Path, threads: int | None = None
) -> dict[str, float]:
    """The wide prompt probe of `kind` (written at `path` if absent) processing PROMPTS now, one repetition after
    the warm-up: prompt -> seconds per streamed byte [s/B] as the profile measured it. Against the profile's
    seconds_per_byte at those rows it is this machine's drift for prompts."""
    from roofline.specs.checkpoint import gguf_model

    a = probe(WIDE, entry.get("prompt_probe_layers") or layers_for(probe(WIDE, 1), kind, PROMPT_BYTES))
    if not path.is_file():
        synthetic.write(a, path, kind, "wide_prompt")
    shallow = (a, path, sum(gguf_model(path)[1].streamed_by_dtype.values()))
    table, _ = prompt_seconds_per_byte(
        build, shallow, entry["per_step_s"], entry["per_layer_s"], threads, reps=1, repack=entry.get("repack", True)
    )
    return table
