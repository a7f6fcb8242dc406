"""Engine presets: what a serving engine achieves of the roofline, learned from published benchmarks.

A preset is data (engines/NAME.yaml), fitted by benchmarks/train_presets.py on the training cases and never
edited by hand. It holds, per engine: the fraction of peak bandwidth its decode reaches, the fraction of peak
FLOP/s its prefill reaches, a fixed cost per decode step, and the share of memory left for weights + KV once
the engine has kept its own (activations, CUDA graphs, workspace). A prediction with a preset is the roofline
estimate with those efficiencies and memory fraction, plus the fixed cost on every decode step:
    TPOT = max(FLOPs / (F x compute), bytes / (W x bandwidth)) + step_overhead_s + layers x layer_overhead_s
           (+ layers x rocm_layer_overhead_s on an AMD Instinct device: ROCm's launches and syncs cost more;
           the weights' bytes at format_bandwidth[weight dtype] where the preset has the format's own, e.g. fp8)
    output tokens/s = B x O / (TTFT + (O - 1) x TPOT)
Three optional keys shape a preset whose engine the datasheet peaks describe badly (benchmarks/train_presets.py
says why each is used): `backend` (cuda, metal or rocm: the devices it applies to; `--engine llamacpp` picks
llamacpp-cuda or llamacpp-metal by the device), `compute_peak` (the dtype whose peak its compute fraction
multiplies, e.g. fp32: llama.cpp's prefill follows the CUDA-core rate, not the tensor-core one, so the fraction
can exceed 1), and `bandwidth_cap` (bytes/s its decode kernels never exceed, whatever the device offers).
Either way a preset is never faster than the bound: compute and bandwidth are capped at the bound's peaks.
`batch_covered` (vllm, sglang) is the largest mean batch its fitted runs reached as simulated: beyond it a note says
its typical error does not apply (beyond_runs), as one does for a simulation that sends every request at one moment
while some of them wait (at_once), a load none of those runs had.
"""

from collections.abc import Callable
from typing import Any

from roofline.errors import UsageError
from roofline.specs.presets import BACKENDS, RANGES, Preset, load, names


def for_device(engine: str, hardware) -> Preset:
    """The preset of `engine` for `hardware`: engines/ENGINE.yaml, else the one of the device's backend
    (llamacpp on an NVIDIA device: llamacpp-cuda); one that was fitted on another backend is an error."""
    backend = backend_of(hardware)
    have = names()
    name = engine if engine in have else f"{engine}-{backend}" if f"{engine}-{backend}" in have else None
    if name is None:
        mine = [n for n in have if n.startswith(f"{engine}-")]
        if not mine:
            return load(engine)  # says there is none
        each = [f"{n} for {BACKENDS[n.removeprefix(engine + '-')]} devices" for n in mine]
        raise UsageError(f"no {engine} preset for {hardware.id} (presets: {', '.join(each)})", "engine")
    preset = load(name)
    if preset.backend is not None and preset.backend != backend:
        raise UsageError(
            f"the {name} preset was fitted on {BACKENDS[preset.backend]} devices ({preset.backend}); "
            f"{hardware.id} is not one",
            "engine",
        )
    return preset


def backend_of(hardware) -> str | None:
    """cuda for NVIDIA devices, metal for Apple's, rocm for AMD Instinct GPUs, by the datasheet name; None for the
    rest (CPUs, TPUs)."""
    return next((b for b, vendor in BACKENDS.items() if hardware.name.startswith(vendor)), None)


def knobs(preset: "Preset | dict[str, Any]", hardware=None, compute_dtype: str | None = None) -> dict[str, float]:
    """The estimate knobs a preset sets on `hardware` computing in `compute_dtype`: its efficiencies, relative to the
    bound's peaks and never above them, and its memory fraction. (hardware and compute_dtype are needed only for a
    preset with compute_peak or bandwidth_cap.)"""
    p = preset._asdict() if hasattr(preset, "_asdict") else preset
    compute = p["compute_fraction"]
    roof = p.get("compute_peak")
    if roof is not None and roof != compute_dtype:
        if roof not in hardware.peak_flops:
            raise UsageError(
                f"the {p.get('name', 'engine')} preset prices prefill against the {roof} peak, which "
                f"{hardware.id} does "
                "not list",
                "engine",
            )
        compute *= hardware.peak_flops[roof] / hardware.peak_flops[compute_dtype]
    bandwidth = p["bandwidth_fraction"]
    if p.get("bandwidth_cap") is not None:
        bandwidth = min(bandwidth, p["bandwidth_cap"] / hardware.memory_bandwidth)
    reserve = p.get("reserve_bytes") or 0.0  # the engine's own memory, kept out of its KV pool on every device
    return {
        "compute_efficiency": min(compute, 1.0),
        "bandwidth_efficiency": min(bandwidth, 1.0),
        "memory_fraction": max(p["memory_fraction"] - (reserve / hardware.memory_capacity if reserve else 0.0), 0.01),
    }


def weight_share(preset: "Preset", weight_dtype: str, hardware) -> float | None:
    """The share of `hardware`'s peak bandwidth the preset's engine reads weights stored in `weight_dtype` at, where
    the preset has the format's own (format_bandwidth: fp8 or MXFP4 weights run other kernels than bf16's), never
    above 1 or its bandwidth_cap; None: its general bandwidth fraction, which every other read (the KV cache,
    activations) keeps either way."""
    own = preset.format_bandwidth.get(weight_dtype)
    if own is None:
        return None
    if preset.bandwidth_cap is not None:
        own = min(own, preset.bandwidth_cap / hardware.memory_bandwidth)
    return min(own, 1.0)


def of_free(fraction: float, weight_bytes: float, hardware) -> float:
    """The memory fraction (of all memory, weights included) that leaves the KV pool `fraction` x (memory - weights):
    TensorRT-LLM's kv_cache_free_gpu_mem_fraction (KvCacheConfig: a share of the memory free once the weights are
    loaded). f x C - w = fraction x (C - w)  =>  f = fraction + (1 - fraction) x w / C."""
    return fraction + (1.0 - fraction) * weight_bytes / hardware.memory_capacity


def step_cost(preset: Preset, model, hardware) -> float:
    """Seconds a preset adds to every engine step of `model` on `hardware`: its fixed cost plus its cost per layer,
    and on a ROCm device its extra cost per layer (none for a params-only model, whose layers are unknown)."""
    layers = model.arch.layers if model.arch is not None else 0
    per_layer = preset.layer_overhead_s + (preset.rocm_layer_overhead_s if backend_of(hardware) == "rocm" else 0.0)
    return preset.step_overhead_s + per_layer * layers


def timings(e, step_overhead_s: float, request_overhead_s: float = 0.0) -> tuple[float, float, float]:
    """(TTFT, TPOT, output tokens/s) of an estimate made with a preset's knobs, with its fixed step cost added to
    every step (each of the prefill's, one per chunk when chunked, as the simulator steps it, and each decode's) and
    its per-request cost to the first token."""
    prefill_steps = e.chunked.steps_to_first_token if e.chunked is not None else 1
    tpot = e.tpot_s + step_overhead_s
    ttft = e.ttft_s + prefill_steps * step_overhead_s + request_overhead_s
    outputs = e.inputs.output_tokens
    latency = ttft + max(outputs - 1, 0) * tpot
    return ttft, tpot, e.inputs.batch * outputs / latency if latency > 0 else 0.0


def typical_errors(preset: Preset, hardware) -> dict[str, dict]:
    """The preset's held-out errors that apply on `hardware`, per metric: {runs, case, setup, device, applies,
    elsewhere}. On a device its runs are on, the leave-one-setup-out median (applies: setup: a model the fit has not
    seen on a device it has); on any other (elsewhere: true), the leave-one-device-out one (applies: device), the
    error of a device the fit never saw; the leave-one-run-out one (applies: case) where that fold could not score
    the metric (or the preset stores none)."""
    elsewhere = bool(preset.devices) and hardware.id not in preset.devices
    out = {}
    for metric, e in preset.errors.items():
        usual = "device" if elsewhere else "setup"
        applies = usual if e.get(usual) is not None else "case"
        out[metric] = {**e, "applies": applies, "elsewhere": elsewhere}
    return out


LEFT_OUT = {  # what a held-out error left out of the fit, as the summary says it
    "case": "each run left out of the fit",
    "setup": "each model's runs on its device left out of the fit",
    "device": "each device's left out of the fit",
}
MARK = {"case": ", each run left out", "device": ", each device left out"}  # a figure not of the usual kind there


def error_summary(preset: Preset, hardware) -> str:
    """'TTFT +-12% (20 runs), TPOT +-9% (30 runs), ...': the preset's held-out errors on `hardware` (typical_errors),
    each figure of another kind than the usual one there (a device's fold off its devices, else a setup's) marked,
    or '' without them."""
    errors = typical_errors(preset, hardware)
    labels = {
        "ttft_mean": "TTFT",
        "ttft_p99": "p99 TTFT",
        "tpot": "TPOT",
        "e2e": "E2E",
        "output_tokens_per_s": "output tokens/s",
    }
    shown = {k: v for k, v in errors.items() if k in labels and v.get("case") is not None}
    if not shown:
        return ""
    kinds = [v["applies"] for v in shown.values()]
    usual = next(k for k in ("device", "setup", "case") if k in kinds)
    parts = [
        f"{labels[k]} +-{v[v['applies']] * 100:.0f}% ({v['runs']:.0f} runs"
        f"{'' if v['applies'] == usual else MARK[v['applies']]})"
        for k, v in shown.items()
    ]
    marked = " where not marked" if any(k != usual for k in kinds) else ""
    elsewhere = f" ({hardware.id} has none of its runs)" if any(v["elsewhere"] for v in shown.values()) else ""
    return f"{', '.join(parts)}: median |error| on published runs, {LEFT_OUT[usual]}{marked}{elsewhere}"


def beyond_runs(preset: Preset, batch: float) -> str | None:
    """A note when a prediction runs a mean batch above any its preset's fitted runs reached (batch_covered, as
    simulated), where its typical error was never measured. GPUStack's vLLM and SGLang runs with every request sent
    at once whose simulated mean batch is beyond their preset's (43 vLLM runs at 9-280 against 128 for async builds and
    7.5 for 0.10-0.13, 14 SGLang ones at 11-340 against 4; benchmarks/candidates.py) served a median 0.46 of the
    output tokens/s priced (docs/reality.md). None within its runs, or without the record."""
    if not preset.batch_covered or batch <= preset.batch_covered:
        return None
    return (
        f"engine {preset.name}: a mean batch of {batch:.1f} is beyond its published runs' ({preset.batch_covered:.1f} "
        "at most), so its typical error does not apply; published runs beyond their preset's (mean batches 9-340, "
        "every request sent at once) served a median 0.46x the output tokens/s priced (docs/reality.md)"
    )


def at_once(preset: Preset) -> str | None:
    """A note for a simulation that sends every request at one moment while some of them wait (simulate._at_once),
    with a preset fitted on published serving runs (batch_covered recorded), none of which was such a load (an
    offline batch of 8 all runs at once). GPUStack's vLLM 0.10-0.11 and SGLang 0.5 runs of it (69: `vllm bench serve`
    at rate inf, 100-1,000 requests, each simulated with a queue; benchmarks/candidates.py) served a median 0.43 of
    the output tokens/s priced over mean batches 1-340, and 0.36 for the 12 whose simulated batch is within their
    preset's (docs/reality.md): the shortfall goes with the load, not only the batch. None for a preset without the
    record (TensorRT-LLM's is fitted on trtllm-bench's queued runs)."""
    if not preset.batch_covered:
        return None
    return (
        f"engine {preset.name}: every request sent at once, some waiting, is a load none of its published runs had, "
        "so its typical error does not apply; published runs of every request at once (69, at mean batches 1-340) "
        "served a median 0.43x the output tokens/s priced (docs/reality.md)"
    )


def pattern_search(
    loss: Callable[[dict[str, float]], float],
    start: dict[str, float],
    tolerance: float = 1e-3,
    max_steps: int = 2000,
    ranges: dict[str, tuple[float, float]] = RANGES,
    scale: float = 0.25,
) -> dict[str, float]:
    """Minimize `loss(params)` within `ranges` by pattern search (Hooke & Jeeves 1961): try a step up and down in
    each parameter, keep any improvement, and halve the steps only when none improves, until every step is under
    `tolerance` of its range; the first steps are `scale` of each range (small to refine a nearby start).
    Deterministic and dependency-free; correlated parameters (bandwidth and a fixed cost explain the same decode
    time) just take more steps."""
    best = dict(start)
    best_loss = loss(best)
    step = {n: (ranges[n][1] - ranges[n][0]) * scale for n in start}
    for _ in range(max_steps):
        improved = False
        for name in start:
            low, high = ranges[name]
            for candidate in (best[name] - step[name], best[name] + step[name]):
                trial = {**best, name: min(high, max(low, candidate))}
                value = loss(trial)
                if value < best_loss:
                    best, best_loss, improved = trial, value, True
        if not improved:
            step = {n: s / 2 for n, s in step.items()}
            if all(s < tolerance * (ranges[n][1] - ranges[n][0]) for n, s in step.items()):
                break
    return best
