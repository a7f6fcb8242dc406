"""`measure --engine llamacpp`: llama.cpp's backend on this machine, per weight type, from synthetic probe models.

Per type: a narrow probe (hidden 256) at depths 2 and 8 gives the fixed cost of a decode step, per step and per
layer (its weights sit in cache: what is left is the graph's own cost); a wide probe (hidden 1024, as many layers
as make its weights 4x the last-level cache, 256 MB to 1 GiB) gives the time per streamed weight byte at M rows:
decode steps of M = 1, 2, 4, 8, 16 sequences (llama-batched-bench) and prompt processing of 128 and 512 tokens
(llama-bench); the narrow probe's prompt processing gives how much slower narrow layers run compute-bound
(roofline.calc.llamacpp prices with them). Each test is the median of llama-bench's repetitions after its warm-up run.
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
from roofline.measure import llamacpp, synthetic
from roofline.specs.params import Architecture

TYPES = ("F16", "Q8_0", "Q4_0")
NARROW, WIDE = 256, 1024
DEPTHS = (2, 8)
DECODE_ROWS = (1, 2, 4, 8, 16)
PROMPTS = (128, 512)
GENERATE = 16
MIN_BYTES, MAX_BYTES = 256e6, 2**30


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


def wide_layers(kind: str, cache_bytes: float) -> int:
    """Layers of the wide probe whose weights are 4x the cache, within MIN_BYTES..MAX_BYTES."""
    from roofline.calc.llamacpp import BITS

    target = min(max(4 * cache_bytes, MIN_BYTES), MAX_BYTES)
    per_layer = _matrix_params(probe(WIDE, 1)) * BITS[kind] / 8
    return max(2, math.ceil(target / per_layer))


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
) -> dict[str, Any]:
    """The profile's engines.llamacpp entry (see the module docstring)."""
    from roofline.specs.checkpoint import gguf_model

    started = time.perf_counter()
    out: dict[str, Any] = {"build": build.found, "widths": [NARROW, WIDE], "types": {}}
    with tempfile.TemporaryDirectory(prefix="roofline-llamacpp-") as folder:
        for kind in types:
            files = {}
            for name, a in (
                ("narrow2", probe(NARROW, DEPTHS[0])),
                ("narrow8", probe(NARROW, DEPTHS[1])),
                ("wide", probe(WIDE, wide_layers(kind, cache_bytes))),
            ):
                on_step(f"llama.cpp {kind.lower()}: writing the {name} probe")
                path = synthetic.write(a, Path(folder) / f"{name}-{kind}.gguf", kind, name)
                files[name] = (a, path, sum(gguf_model(path)[1].streamed_by_dtype.values()))  # matrix bytes
            on_step(f"llama.cpp {kind.lower()}: llama-bench and llama-batched-bench")
            entry, info = _type_entry(build, files, threads)
            out["types"][kind] = entry
            out.update(info)
            for _, path, _ in files.values():
                path.unlink()
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def _type_entry(build, files: dict[str, tuple], threads: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    tg, repack, info = {}, True, {}
    pp_narrow: dict[int, float] = {}
    for name in ("narrow2", "narrow8"):
        a, path, _ = files[name]
        results, repack = llamacpp.bench(build, path, list(PROMPTS) if name == "narrow8" else [], GENERATE, threads)
        for r in results:
            if r["n_gen"]:
                tg[a.layers] = _median_s(r) / r["n_gen"]
            else:
                pp_narrow[r["n_prompt"]] = _median_s(r)
        info = {"threads": results[0]["n_threads"], "build_commit": results[0].get("build_commit")}
    per_layer = max((tg[DEPTHS[1]] - tg[DEPTHS[0]]) / (DEPTHS[1] - DEPTHS[0]), 0.0)
    per_step = max(tg[DEPTHS[0]] - DEPTHS[0] * per_layer, 0.0)
    fixed = lambda a: per_step + a.layers * per_layer  # noqa: E731
    a, path, streamed = files["wide"]
    results, repack_wide = llamacpp.bench(build, path, list(PROMPTS), 0, threads)
    seconds_per_byte = {}
    for r in results:
        seconds_per_byte[str(r["n_prompt"])] = _per_byte(a, streamed, r["n_prompt"], _median_s(r) - fixed(a))
    rows, _ = llamacpp.batched(build, path, 32, GENERATE, list(DECODE_ROWS), threads, repack_wide)
    for r in rows:
        step = r["t_tg"] / r["tg"]
        seconds_per_byte[str(r["pl"])] = (step - fixed(a)) / streamed
    a8, _, streamed8 = files["narrow8"]
    narrow = {str(p): _per_byte(a8, streamed8, p, t - fixed(a8)) for p, t in pp_narrow.items()}
    entry = {
        "repack": bool(repack and repack_wide),
        "per_step_s": per_step,
        "per_layer_s": per_layer,
        "probe_bytes": streamed,
        "seconds_per_byte": dict(sorted(seconds_per_byte.items(), key=lambda kv: int(kv[0]))),
        "narrow_seconds_per_byte": narrow,
    }
    return entry, info


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
        return {**mapping, "engines": {**(mapping.get("engines") or {}), "llamacpp": entry}}
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
    prompt-processing FLOP/s (the largest rows) and fixed costs."""
    from roofline.calc.llamacpp import BITS
    from roofline.report import Report

    rows = []
    for kind, t in entry["types"].items():
        table = t["seconds_per_byte"]
        largest = max(table, key=int)
        rows.append(
            {
                "type": kind,
                "decode_bytes_per_s": 1 / table["1"],
                "prefill_flop_per_s": 2 * int(largest) / (BITS[kind] / 8 * table[largest]),
                "prefill_rows": int(largest),
                "per_step_s": t["per_step_s"],
                "per_layer_s": t["per_layer_s"],
                "repack": t["repack"],
            }
        )
    return Report("llamacpp-profile", entry, rows)
