"""Engine presets: what a serving engine achieves of the roofline, learned from published benchmarks.

A preset is data (engines/NAME.yaml), fitted by benchmarks/fit_engines.py on the training cases and never
edited by hand. It holds, per engine: the fraction of peak bandwidth its decode reaches, the fraction of peak
FLOP/s its prefill reaches, a fixed cost per decode step, and the share of memory left for weights + KV once
the engine has kept its own (activations, CUDA graphs, workspace). A prediction with a preset is the roofline
estimate with those efficiencies and memory fraction, plus the fixed cost on every decode step:
    TPOT = max(FLOPs / (F x compute), bytes / (W x bandwidth)) + step_overhead_s
    output tokens/s = B x O / (TTFT + (O - 1) x TPOT)
Three optional keys shape a preset whose engine the datasheet peaks describe badly (benchmarks/fit_engines.py
says why each is used): `backend` (cuda or metal: the devices it applies to; `--engine llamacpp` picks
llamacpp-cuda or llamacpp-metal by the device), `compute_peak` (the dtype whose peak its compute fraction
multiplies, e.g. fp32: llama.cpp's prefill follows the CUDA-core rate, not the tensor-core one, so the fraction
can exceed 1), and `bandwidth_cap` (bytes/s its decode kernels never exceed, whatever the device offers).
Either way a preset is never faster than the bound: compute and bandwidth are capped at the bound's peaks.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.errors import UsageError

PARAMETERS = ("bandwidth_fraction", "compute_fraction", "step_overhead_s", "memory_fraction")
RANGES = {
    "bandwidth_fraction": (0.05, 1.0),
    "compute_fraction": (0.02, 1.0),
    "step_overhead_s": (0.0, 0.05),
    "memory_fraction": (0.3, 0.98),
    "bandwidth_cap": (5e10, 1e13),
}
PROXY_RANGES = {**RANGES, "compute_fraction": (0.02, 4.0)}  # with a compute_peak: a multiple of another unit's peak
BACKENDS = {"cuda": "NVIDIA", "metal": "Apple"}  # a preset's backend -> the device names (prefix) it applies to
COMPUTE_PEAKS = ("fp32", "fp16", "bf16", "fp8", "int8")


class Preset(NamedTuple):
    name: str
    bandwidth_fraction: float
    compute_fraction: float
    step_overhead_s: float
    memory_fraction: float
    cases: list[str]
    residuals: dict[str, float]  # case/figure -> log(predicted / measured)
    source: str
    holdout: dict[str, float] = {}  # held-aside case/figure -> log(predicted / measured): never fitted on
    backend: str | None = None  # cuda / metal: the devices it was fitted on and applies to (None: any)
    compute_peak: str | None = (
        None  # the dtype whose peak compute_fraction multiplies (None: the estimate's compute dtype)
    )
    bandwidth_cap: float | None = None  # bytes/s its decode never exceeds (None: no cap)
    ranges: dict[str, list[float]] = {}  # fitted parameter -> [low, high] over leave-one-case-out refits (3+ cases)


def load(name: str) -> Preset:
    """The preset engines/NAME.yaml, validated; an engine without one is an error saying why."""
    from roofline.specs.catalog import data_dir
    from roofline.specs.fields import Fields, choice, number_between, read_yaml, text

    path = data_dir() / "engines" / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(
            f"no preset for {name!r} (presets: {', '.join(names()) or 'none'}; engines/README.md says which engines the "
            "published data cannot support)",
            "engine",
        )
    f = Fields(read_yaml(path), str(path))
    ranges = PROXY_RANGES if "compute_peak" in f.data else RANGES
    values = {
        p: f.take(p, number_between(*ranges[p]), f"a number from {ranges[p][0]} to {ranges[p][1]}") for p in PARAMETERS
    }
    cases = f.take("cases", _strings, "a list of training case ids")
    residuals = f.take("residuals", _residuals, "a mapping of case/figure to log(predicted / measured)")
    holdout = f.take("holdout", _residuals, "a mapping of held-aside case/figure to log(predicted / measured)", {})
    backend = f.take("backend", choice(*BACKENDS), f"one of: {', '.join(BACKENDS)}", None)
    peak = f.take("compute_peak", choice(*COMPUTE_PEAKS), f"one of: {', '.join(COMPUTE_PEAKS)}", None)
    low, high = RANGES["bandwidth_cap"]
    cap = f.take("bandwidth_cap", number_between(low, high), f"bytes/s from {low:g} to {high:g}", None)
    fitted = {**values, **({"bandwidth_cap": cap} if cap is not None else {})}
    spans = f.take("ranges", _spans(fitted), "a mapping of fitted parameter to [low, high] around its value", {})
    source = f.take("source", text, "how the preset was fitted")
    f.take("notes", text, "notes", "")
    f.done(
        [
            *PARAMETERS,
            "cases",
            "residuals",
            "holdout",
            "backend",
            "compute_peak",
            "bandwidth_cap",
            "ranges",
            "source",
            "notes",
        ]
    )
    return Preset(
        name,
        **values,
        cases=cases,
        residuals=residuals,
        source=source,
        holdout=holdout,
        backend=backend,
        compute_peak=peak,
        bandwidth_cap=cap,
        ranges=spans,
    )


def names() -> list[str]:
    from roofline.specs.catalog import data_dir

    return sorted(p.stem for p in (data_dir() / "engines").glob("*.yaml"))


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
    """cuda for NVIDIA devices, metal for Apple's, by the datasheet name; None for the rest."""
    return next((b for b, vendor in BACKENDS.items() if hardware.name.startswith(vendor)), None)


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TypeError
    return value


def _spans(fitted: dict[str, float]) -> Callable[[Any], dict[str, list[float]]]:
    def check(value: Any) -> dict[str, list[float]]:
        if not isinstance(value, dict) or not set(value) <= set(fitted):
            raise TypeError
        for name, span in value.items():
            if (
                not isinstance(span, list)
                or len(span) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in span)
                or not span[0] <= fitted[name] <= span[1]
            ):
                raise TypeError
        return value

    return check


def _residuals(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value.values()
    ):
        raise TypeError
    return value


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
                f"the {p.get('name', 'engine')} preset prices prefill against the {roof} peak, which {hardware.id} does not list",
                "engine",
            )
        compute *= hardware.peak_flops[roof] / hardware.peak_flops[compute_dtype]
    bandwidth = p["bandwidth_fraction"]
    if p.get("bandwidth_cap") is not None:
        bandwidth = min(bandwidth, p["bandwidth_cap"] / hardware.memory_bandwidth)
    return {
        "compute_efficiency": min(compute, 1.0),
        "bandwidth_efficiency": min(bandwidth, 1.0),
        "memory_fraction": p["memory_fraction"],
    }


def timings(e, step_overhead_s: float) -> tuple[float, float, float]:
    """(TTFT, TPOT, output tokens/s) of an estimate made with a preset's knobs, with its fixed step cost added."""
    tpot = e.tpot_s + step_overhead_s
    outputs = e.inputs.output_tokens
    latency = e.ttft_s + max(outputs - 1, 0) * tpot
    return e.ttft_s, tpot, e.inputs.batch * outputs / latency if latency > 0 else 0.0


def fit(
    loss: Callable[[dict[str, float]], float],
    start: dict[str, float],
    tolerance: float = 1e-3,
    max_steps: int = 2000,
    ranges: dict[str, tuple[float, float]] = RANGES,
) -> dict[str, float]:
    """Minimize `loss(params)` within `ranges` by pattern search (Hooke & Jeeves 1961): try a step up and down in
    each parameter, keep any improvement, and halve the steps only when none improves, until every step is under
    `tolerance` of its range. Deterministic and dependency-free; correlated parameters (bandwidth and a fixed
    cost explain the same decode time) just take more steps."""
    best = dict(start)
    best_loss = loss(best)
    step = {n: (ranges[n][1] - ranges[n][0]) / 4 for n in start}
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
