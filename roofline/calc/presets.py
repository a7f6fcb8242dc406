"""Engine presets: what a serving engine achieves of the roofline, learned from published benchmarks.

A preset is data (engines/NAME.yaml), fitted by benchmarks/fit_engines.py on the training cases and never
edited by hand. It holds, per engine: the fraction of peak bandwidth its decode reaches, the fraction of peak
FLOP/s its prefill reaches, a fixed cost per decode step, and the share of memory left for weights + KV once
the engine has kept its own (activations, CUDA graphs, workspace). A prediction with a preset is the roofline
estimate with those efficiencies and memory fraction, plus the fixed cost on every decode step:
    TPOT = max(FLOPs / (F x compute_fraction), bytes / (W x bandwidth_fraction)) + step_overhead_s
    output tokens/s = B x O / (TTFT + (O - 1) x TPOT)
"""

import math
from typing import Any, Callable, NamedTuple

from roofline.errors import UsageError

PARAMETERS = ("bandwidth_fraction", "compute_fraction", "step_overhead_s", "memory_fraction")
RANGES = {"bandwidth_fraction": (0.05, 1.0), "compute_fraction": (0.02, 1.0), "step_overhead_s": (0.0, 0.05), "memory_fraction": (0.3, 0.98)}


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


def load(name: str) -> Preset:
    """The preset engines/NAME.yaml, validated; an engine without one is an error saying why."""
    from roofline.specs.catalog import data_dir
    from roofline.specs.fields import Fields, number_between, read_yaml, text

    path = data_dir() / "engines" / f"{name}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in (data_dir() / "engines").glob("*.yaml"))
        raise UsageError(f"no preset for {name!r} (presets: {', '.join(have) or 'none'}; engines/README.md says which engines the "
                         "published data cannot support)", "engine")
    f = Fields(read_yaml(path), str(path))
    values = {p: f.take(p, number_between(*RANGES[p]), f"a number from {RANGES[p][0]} to {RANGES[p][1]}") for p in PARAMETERS}
    cases = f.take("cases", _strings, "a list of training case ids")
    residuals = f.take("residuals", _residuals, "a mapping of case/figure to log(predicted / measured)")
    holdout = f.take("holdout", _residuals, "a mapping of held-aside case/figure to log(predicted / measured)", {})
    source = f.take("source", text, "how the preset was fitted")
    f.take("notes", text, "notes", "")
    f.done([*PARAMETERS, "cases", "residuals", "holdout", "source", "notes"])
    return Preset(name, **values, cases=cases, residuals=residuals, source=source, holdout=holdout)


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TypeError
    return value


def _residuals(value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value.values()):
        raise TypeError
    return value


def knobs(preset: "Preset | dict[str, float]") -> dict[str, float]:
    """The estimate knobs a preset sets."""
    p = preset._asdict() if hasattr(preset, "_asdict") else preset
    return {"compute_efficiency": p["compute_fraction"], "bandwidth_efficiency": p["bandwidth_fraction"], "memory_fraction": p["memory_fraction"]}


def timings(e, step_overhead_s: float) -> tuple[float, float, float]:
    """(TTFT, TPOT, output tokens/s) of an estimate made with a preset's knobs, with its fixed step cost added."""
    tpot = e.tpot_s + step_overhead_s
    outputs = e.inputs.output_tokens
    latency = e.ttft_s + max(outputs - 1, 0) * tpot
    return e.ttft_s, tpot, e.inputs.batch * outputs / latency if latency > 0 else 0.0


def fit(loss: Callable[[dict[str, float]], float], start: dict[str, float], tolerance: float = 1e-3, max_steps: int = 2000) -> dict[str, float]:
    """Minimize `loss(params)` within RANGES by pattern search (Hooke & Jeeves 1961): try a step up and down in
    each parameter, keep any improvement, and halve the steps only when none improves, until every step is under
    `tolerance` of its range. Deterministic and dependency-free; correlated parameters (bandwidth and a fixed
    cost explain the same decode time) just take more steps."""
    best = dict(start)
    best_loss = loss(best)
    step = {n: (RANGES[n][1] - RANGES[n][0]) / 4 for n in start}
    for _ in range(max_steps):
        improved = False
        for name in start:
            low, high = RANGES[name]
            for candidate in (best[name] - step[name], best[name] + step[name]):
                trial = {**best, name: min(high, max(low, candidate))}
                value = loss(trial)
                if value < best_loss:
                    best, best_loss, improved = trial, value, True
        if not improved:
            step = {n: s / 2 for n, s in step.items()}
            if all(s < tolerance * (RANGES[n][1] - RANGES[n][0]) for n, s in step.items()):
                break
    return best
