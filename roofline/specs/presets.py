"""Engine presets as data: engines/NAME.yaml read and validated into a Preset (how one is priced:
roofline.calc.presets). A preset is fitted by benchmarks/train_presets.py on published benchmark cases and never
edited by hand; every mistake in one names the file and the field.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.errors import UsageError
from roofline.specs.records import DTYPE_BYTES

PARAMETERS = ("bandwidth_fraction", "compute_fraction", "step_overhead_s", "memory_fraction")
RANGES = {
    "bandwidth_fraction": (0.05, 1.0),
    "compute_fraction": (0.02, 1.0),
    "step_overhead_s": (0.0, 0.05),
    "memory_fraction": (0.3, 0.98),
    "bandwidth_cap": (5e10, 1e13),
    "request_overhead_s": (0.0, 2.0),
    "request_overhead_cv": (0.0, 2.0),
    "layer_overhead_s": (0.0, 1e-3),
    "rocm_layer_overhead_s": (0.0, 1e-3),
    "reserve_bytes": (0.0, 1e11),
}
COVERED = (0.0, 1e5)  # batch_covered: a recorded mean batch, not a fitted parameter
PROXY_RANGES = {**RANGES, "compute_fraction": (0.02, 4.0)}  # with a compute_peak: a multiple of another unit's peak
BACKENDS = {"cuda": "NVIDIA", "metal": "Apple", "rocm": "AMD Instinct"}  # backend -> device names (prefix) on it
KV_POOLS = ("memory", "free")  # what memory_fraction is a share of: all memory, or what the weights leave
SCHEDULERS = ("vllm", "trtllm")  # roofline.calc.replica.POLICIES an engine preset may name
COMPUTE_PEAKS = ("fp32", "fp16", "bf16", "fp8", "int8")
FORMATS = tuple(d for d in DTYPE_BYTES if DTYPE_BYTES[d] < 2)  # format_bandwidth's keys: bandwidth_fraction is 16-bit's


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
    holdout_setup: dict[str, float] = {}  # case/figure -> log(predicted / measured), refitted without its setup's runs
    holdout_device: dict[str, float] = {}  # case/figure -> log(predicted / measured), refitted without its device
    device_folds: dict[str, dict[str, float]] = {}  # device left out -> the refit's parameters that priced its runs
    backend: str | None = None  # cuda / metal: the devices it was fitted on and applies to (None: any)
    compute_peak: str | None = (
        None  # the dtype whose peak compute_fraction multiplies (None: the estimate's compute dtype)
    )
    bandwidth_cap: float | None = None  # bytes/s its decode never exceeds (None: no cap)
    ranges: dict[str, list[float]] = {}  # fitted parameter -> [low, high] over leave-one-case-out refits (3+ cases)
    request_overhead_s: float = 0.0  # seconds each request spends outside the engine loop (API, tokenizer): TTFT
    request_overhead_cv: float = 0.0  # its coefficient of variation from request to request (simulate: gamma draws)
    layer_overhead_s: float = 0.0  # seconds per layer per step on top of step_overhead_s (launches, norms, syncs)
    rocm_layer_overhead_s: float = 0.0  # seconds per layer per step more on ROCm devices (AMD Instinct)
    reserve_bytes: float = 0.0  # bytes per device the engine keeps out of its KV pool (activations, graphs)
    errors: dict[
        str, dict[str, float]
    ] = {}  # metric -> {runs, case, setup, device}: median |error| held out (fractions)
    kv_pool: str = "memory"  # memory: KV = memory_fraction x memory - weights (vLLM); free: of what weights leave
    scheduler: str = "vllm"  # the simulator's policy for this engine (roofline.calc.replica.POLICIES)
    devices: list[str] = []  # the devices its runs are on: elsewhere its errors are the leave-one-device-out ones
    batch_covered: float = 0.0  # the largest mean running batch of its fitted runs as simulated (0: not recorded)
    format_bandwidth: dict[str, float] = {}  # weight dtype -> the share of peak bandwidth its weights' reads reach


def load(name: str) -> Preset:
    """The preset engines/NAME.yaml, validated; an engine without one is an error saying why."""
    from roofline.specs.catalog import data_dir
    from roofline.specs.fields import Fields, choice, number_between, read_yaml, text

    path = data_dir() / "engines" / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(
            f"no preset for {name!r} (presets: {', '.join(names()) or 'none'}; engines/README.md says which "
            "engines the "
            "published data cannot support)",
            "engine",
        )
    f = Fields(read_yaml(path), str(path))
    ranges = PROXY_RANGES if "compute_peak" in f.data else RANGES
    values = {
        p: f.take(p, number_between(*ranges[p]), f"a number from {ranges[p][0]} to {ranges[p][1]}") for p in PARAMETERS
    }
    cases = f.take("cases", _strings, "a list of training case ids")
    devices = f.take("devices", _strings, "a list of the hardware ids its runs are on", [])
    residuals = f.take("residuals", _residuals, "a mapping of case/figure to log(predicted / measured)")
    holdout = f.take("holdout", _residuals, "a mapping of held-aside case/figure to log(predicted / measured)", {})
    by_setup = f.take(
        "holdout_setup", _residuals, "a mapping of case/figure to log(predicted / measured) without its setup", {}
    )
    by_device = f.take(
        "holdout_device", _residuals, "a mapping of case/figure to log(predicted / measured) without its device", {}
    )
    folds = f.take("device_folds", _folds, "a mapping of device to {parameter: number}", {})
    backend = f.take("backend", choice(*BACKENDS), f"one of: {', '.join(BACKENDS)}", None)
    peak = f.take("compute_peak", choice(*COMPUTE_PEAKS), f"one of: {', '.join(COMPUTE_PEAKS)}", None)
    low, high = RANGES["bandwidth_cap"]
    cap = f.take("bandwidth_cap", number_between(low, high), f"bytes/s from {low:g} to {high:g}", None)
    extra = {
        name: f.take(
            name, number_between(*RANGES[name]), f"a number from {RANGES[name][0]:g} to {RANGES[name][1]:g}", 0.0
        )
        for name in (
            "request_overhead_s",
            "request_overhead_cv",
            "layer_overhead_s",
            "rocm_layer_overhead_s",
            "reserve_bytes",
        )
    }
    pool = f.take("kv_pool", choice(*KV_POOLS), f"one of: {', '.join(KV_POOLS)}", "memory")
    policy = f.take("scheduler", choice(*SCHEDULERS), f"one of: {', '.join(SCHEDULERS)}", "vllm")
    errors = f.take("errors", _errors, "a mapping of metric to {runs, case, setup, device} held-out median errors", {})
    covered = f.take("batch_covered", number_between(*COVERED), f"a number from {COVERED[0]:g} to {COVERED[1]:g}", 0.0)
    formats = f.take(
        "format_bandwidth",
        _fractions,
        f"a mapping of quantized weight dtype ({', '.join(FORMATS)}) to a fraction 0.05-1",
        {},
    )
    fitted = {**values, **extra, **({"bandwidth_cap": cap} if cap is not None else {})}
    fitted.update({f"format_bandwidth:{k}": v for k, v in formats.items()})  # their spans: format_bandwidth:fp8
    spans = f.take("ranges", _spans(fitted), "a mapping of fitted parameter to [low, high] around its value", {})
    source = f.take("source", text, "how the preset was fitted")
    f.take("notes", text, "notes", "")
    f.done(
        [
            *PARAMETERS,
            "cases",
            "devices",
            "residuals",
            "holdout",
            "holdout_setup",
            "holdout_device",
            "device_folds",
            "backend",
            "compute_peak",
            "bandwidth_cap",
            "ranges",
            "request_overhead_s",
            "request_overhead_cv",
            "layer_overhead_s",
            "rocm_layer_overhead_s",
            "reserve_bytes",
            "batch_covered",
            "format_bandwidth",
            "errors",
            "kv_pool",
            "scheduler",
            "source",
            "notes",
        ]
    )
    return Preset(
        name,
        **values,
        cases=cases,
        devices=devices,
        residuals=residuals,
        source=source,
        holdout=holdout,
        holdout_setup=by_setup,
        holdout_device=by_device,
        device_folds=folds,
        backend=backend,
        compute_peak=peak,
        bandwidth_cap=cap,
        ranges=spans,
        **extra,
        errors=errors,
        batch_covered=covered,
        format_bandwidth=formats,
        kv_pool=pool,
        scheduler=policy,
    )


def names() -> list[str]:
    from roofline.specs.catalog import data_dir

    return sorted(p.stem for p in (data_dir() / "engines").glob("*.yaml"))


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TypeError
    return value


def _fractions(value: Any) -> dict[str, float]:
    low, high = RANGES["bandwidth_fraction"]
    if not isinstance(value, dict) or not set(value) <= set(FORMATS):
        raise TypeError
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v <= high for v in value.values()):
        raise TypeError
    return {k: float(v) for k, v in value.items()}


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


def _folds(value: Any) -> dict[str, dict[str, float]]:
    if not isinstance(value, dict) or not all(isinstance(d, str) for d in value):
        raise TypeError
    for params in value.values():
        _residuals(params)
    return value


def _errors(value: Any) -> dict[str, dict[str, float]]:
    if not isinstance(value, dict):
        raise TypeError
    for entry in value.values():
        if not isinstance(entry, dict) or not set(entry) <= {"runs", "case", "setup", "device"} or "runs" not in entry:
            raise TypeError
        if not all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0) for v in entry.values()
        ):
            raise TypeError
    return value
