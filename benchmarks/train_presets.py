"""Fit the engine presets (engines/NAME.yaml) on the published training cases (benchmarks/data/train.json, and
benchmarks/more_training.json: figures this project added).

Each training point is one published figure of one engine in one setup (benchmarks/reality.py maps the
setups). A preset's parameters (roofline/calc/presets.py) are fitted by pattern search to minimize the sum of
squared log(predicted / measured) over its points; the YAML records the values, the cases, each residual and
this script as its source. A preset with fewer than 3 usable points is not fitted: engines/README.md says so.
Rerun after changing the data or the model: python benchmarks/train_presets.py (about 8 minutes: the TensorRT-LLM
runs are simulated); --print-only fits without writing; --report prints the stored presets' report without fitting.
Held-aside cases (benchmarks/holdout.json: published figures found by this project, never fitted on) are then
predicted with the fitted preset; their residuals go to the YAML's `holdout:` and the printout. Cases with a
`build` come from an older build of the engine than the training cases: printed apart, outside the goal.
Cases not used: MLPerf's Offline runs (OpenOrca's prompt lengths vary up to 1024 and their mean is not in the
data, so their work per sample is unknown) and vLLM's KV-capacity figures (memory only, one engine build).

How each preset is shaped (STRUCTURE below), and the evidence, which this script prints as the roofs table:
- llama.cpp is two presets, one per backend: CUDA and Metal are different kernels with different efficiencies.
- llama.cpp's prefill follows the fp32 (CUDA-core) peak, not the tensor-core one its MMQ kernels multiply on:
  across H100, RTX 4090, 3090 and 5090 pp512 runs at 1.9-2.3x the fp32 peak but at 7-29% of the int8 peak.
  The block-scale and 4-bit unpacking arithmetic around each int8 mma runs on CUDA cores.
- llama.cpp's CUDA decode draws ~0.65-0.7 of a GDDR card's bandwidth but 0.32 of an H100's: a ceiling in bytes/s
  (bandwidth_cap), not a fraction, describes kernels that keep too few bytes in flight for HBM.
- TensorRT-LLM keeps the roofline's own shape: its training cases are all H100s, which cannot tell a cap apart.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

from roofline import estimate, load_hardware, load_model
from roofline.calc import presets
from roofline.calc.prepare import prepare, with_preset
from roofline.calc.replica import Scheduler
from roofline.calc.simulate import run_simulation
from roofline.calc.workload import closed_loop, lengths
from roofline.specs.presets import PROXY_RANGES, Preset

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import reality  # noqa: E402  (the case mapping lives beside this script)

HOLDOUT, MORE_TRAINING = reality.HOLDOUT, reality.MORE_TRAINING
START = {"bandwidth_fraction": 0.8, "compute_fraction": 0.5, "step_overhead_s": 0.001, "memory_fraction": 0.9}
STRUCTURE = {  # preset -> (its fixed keys, its extra fitted parameters (start values), what a reader should know)
    "trtllm": (
        {"backend": "cuda", "memory_fraction": reality.TRTLLM_KV_FRACTION, "kv_pool": "free", "scheduler": "trtllm"},
        {},
        (
            "Fitted on H100 runs only: other NVIDIA devices are extrapolated with the same fractions. The throughput "
            "runs are simulated as trtllm-bench ran them (its batch and token limits for the dataset, TensorRT-LLM's "
            "no-evict capacity scheduler, a KV pool of 0.95 of the memory the weights leave, as the runs state); the "
            "memory fraction is that stated one, not fitted."
        ),
    ),
    "llamacpp-cuda": (
        {"backend": "cuda", "compute_peak": "fp32"},
        {"bandwidth_cap": 1e12},
        (
            "Prefill priced on the fp32 (CUDA-core) peak, which the MMQ kernels' rate follows across H100, RTX 3090, "
            "4090 "
            "and 5090 (1.9-2.3x it; 7-29% of the int8 peak); decode capped in bytes/s (0.32 of an H100's bandwidth, "
            "0.6-0.7 of GDDR cards'). Fitted on Q4_0 runs of the 2025 scoreboard; builds from May 2024 differ (see "
            "holdout)."
        ),
    ),
    "llamacpp-metal": (
        {"backend": "metal", "compute_peak": "fp32"},
        {},
        (
            "The two training chips decode a 7B at the same 12 ms a token on 546 and 800 GB/s, so bandwidth and the "
            "per-step cost are not told apart: the fit puts a fixed cost on full bandwidth. Checked on a 70B (M3 Max)."
        ),
    ),
}
BOUND = reality.BOUND


def offline(model: str, device: str, tp: int, prompt: int, output: int, params: dict) -> float:
    """The output tokens/s a TensorRT-LLM preset predicts for a trtllm-bench throughput run, priced as it was measured:
    `roofline simulate` of the run's count of fixed-length requests queued at once (reality.TRTLLM_REQUESTS) on one
    tp-replica, FP8 weights and KV, with trtllm-bench's max batch size and max tokens a step for the dataset
    (reality.trtllm_bench_settings), TensorRT-LLM's capacity scheduler (admits a request only when its whole KV fits)
    and its KV pool (0.95 of the memory the weights leave)."""
    fitted = (params["bandwidth_fraction"], params["compute_fraction"], params["step_overhead_s"])
    key = (model, device, tp, prompt, output, *(round(v, 7) for v in fitted))
    if key not in _OFFLINE:
        m, h = load_model(model), load_hardware(device)
        setup = prepare(m, h, None, tp=tp, weight_dtype="fp8", kv_dtype="fp8")
        preset = Preset(
            "trtllm", *fitted, reality.TRTLLM_KV_FRACTION, cases=[], residuals={}, source="", kv_pool="free",
            scheduler="trtllm",
        )  # fmt: skip
        batch, tokens = reality.trtllm_bench_settings(m, h, tp, prompt, output)
        n = reality.TRTLLM_REQUESTS[(prompt, output)]
        requests = closed_loop(n, lengths(None, prompt, "prompt"), lengths(None, output, "output"), seed=0)
        sim = run_simulation(
            with_preset(setup, preset), requests, concurrency=n, scheduler=Scheduler("trtllm", batch, tokens,
            reality.TRTLLM_BLOCK), capacity=False,
        )  # fmt: skip
        _OFFLINE[key] = sim.output_tokens_per_s
    return _OFFLINE[key]


_OFFLINE: dict[tuple, float] = {}  # simulated runs, by case and parameters


def _preset_of(hardware_id: str) -> str:
    return f"llamacpp-{presets.backend_of(load_hardware(hardware_id))}"


def points(cases: dict) -> dict[str, list]:
    """preset -> [(case id / figure, predict(params) -> value, measured)] for the training cases."""
    fp8 = {"weight_dtype": "fp8", "kv_dtype": "fp8"}
    trtllm = []
    for case_id, model, devices, length in reality.TRTLLM_CASES:
        trtllm.append(
            (
                f"{case_id} output tok/s",
                lambda p, a=(model, devices, length): offline(a[0], "h100-sxm", a[1], a[2], a[2], p),
                cases[case_id]["value"],
            )
        )
    nim = cases["nim-llama33-70b-2xh100-5000-500-c1"]["value"]  # NIM 1.8 serves Llama-3.3-70B FP8 through TensorRT-LLM

    def nim_run(p):
        h = load_hardware("h100-sxm")
        e = estimate(
            load_model("llama-3.1-70b"),
            h,
            prompt_tokens=5000,
            output_tokens=500,
            tp=2,
            **fp8,
            **presets.knobs(p, h, "fp8"),
        )
        return presets.timings(e, p["step_overhead_s"])

    trtllm.append(("nim-llama33-70b-2xh100-5000-500-c1 TTFT s", lambda p: nim_run(p)[0], nim["ttft_ms"] / 1e3))
    trtllm.append(("nim-llama33-70b-2xh100-5000-500-c1 ITL s", lambda p: nim_run(p)[1], nim["itl_ms"] / 1e3))
    out = {"trtllm": trtllm, "llamacpp-cuda": [], "llamacpp-metal": []}  # vllm, sglang: benchmarks/fit_engines.py
    for c in reality.llamacpp_cases(cases, MORE_TRAINING):
        out[_preset_of(c["hardware"])] += _llamacpp_points(c)
    return out


def holdout_points() -> dict[str, list]:
    """preset -> [(case id / figure, predict(params) -> value, measured)] for the held-aside cases."""
    out: dict[str, list] = {}
    for c in json.loads(HOLDOUT.read_text())["cases"]:
        if c["engine"] == "trtllm":
            predict = lambda p, c=c: offline(  # noqa: E731
                c["model"], c["hardware"], c["tp"], c["prompt_tokens"], c["output_tokens"], p
            )
            out.setdefault("trtllm", []).append((f"{c['id']} output tok/s", predict, c["value"]))
        elif c["engine"] == "llamacpp":
            out.setdefault(_preset_of(c["hardware"]), []).extend(_llamacpp_points(c))
    return out


def other_builds() -> set[str]:
    """Held-aside case ids from an older build than the training cases'."""
    return {c["id"] for c in json.loads(HOLDOUT.read_text())["cases"] if "build" in c}


def _llamacpp_points(case: dict) -> list:
    """llama-bench's figures of one case (reality.llama_bench), each as (name, predict(params), measured): the preset's
    knobs on the bound's compute dtype, the library's default for a ggml format (int8 where the device lists it,
    activations in 8-bit blocks; else fp16), and its step cost on every decode step."""
    hardware = load_hardware(case["hardware"])
    out = []
    for test, decode, run, measured in reality.llama_bench(case):
        dtype = run().inputs.compute_dtype
        if decode:
            predict = lambda p, run=run, dtype=dtype: presets.timings(
                run(**presets.knobs(p, hardware, dtype)), p["step_overhead_s"]
            )[1]
        else:
            predict = lambda p, run=run, dtype=dtype: run(**presets.knobs(p, hardware, dtype)).ttft_s
        out.append((f"{case['id']} {test} s/token" if decode else f"{case['id']} {test} s", predict, measured))
    return out


def loss_of(training):
    def loss(params):
        total = 0.0
        for _, predict, measured in training:
            value = predict(params)
            if not value > 0:  # nothing fits at these parameters: never the answer
                return math.inf
            total += math.log(value / measured) ** 2
        return total

    return loss


def roofs() -> None:
    """The evidence for the llama.cpp presets' shape: each case's achieved prefill rate as a multiple of each peak,
    and its decode's share of peak bandwidth, at the bound's accounting (the roofline's FLOPs and bytes)."""
    print(
        "llama.cpp cases, achieved vs datasheet: prefill FLOP/s as a multiple of each peak; decode bytes/s as a share "
        "of bandwidth"
    )
    cases = {c["id"]: c for c in json.loads(reality.TRAIN.read_text())}
    for c in reality.llamacpp_cases(cases, MORE_TRAINING, HOLDOUT):
        h = load_hardware(c["hardware"])
        (_, tg, tg_measured), (_, _, pp_measured) = sorted(
            _llamacpp_points(c), key=lambda r: r[0].split(" ")[1], reverse=True
        )
        rate = (
            estimate(load_model(c["model"]), h, prompt_tokens=512, output_tokens=1, quant=c["quant"]).prefill.flops
            / pp_measured
        )
        multiples = "  ".join(
            f"{d} x{rate / h.peak_flops[d]:.2f}" for d in ("fp32", "fp16", "int8") if d in h.peak_flops
        )
        print(
            f"   {c['id']:42} {'(' + c['build'] + ')' if 'build' in c else '':11} prefill {multiples:36} "
            f"decode {tg(BOUND) / tg_measured:.2f} of {h.memory_bandwidth / 1e9:.0f} GB/s"
        )


def _row(name: str, predict, measured: float, params: dict) -> str:
    value = predict(params)
    return f"   {name:62} {measured:10.4g} {predict(BOUND):10.4g} {value:10.4g} {value / measured - 1:+7.0%}"


def fit(name: str, training: list) -> dict:
    """The preset's fitted parameters, rounded as stored, with its fixed keys."""
    fixed, extra, _ = STRUCTURE[name]
    ranges = PROXY_RANGES if "compute_peak" in fixed else presets.RANGES
    fitted = presets.pattern_search(
        loss_of([(n, lambda p, f=f, x=fixed: f({**p, **x}), m) for n, f, m in training]),
        {k: v for k, v in {**START, **extra}.items() if k not in fixed},  # a stated value is not searched
        ranges=ranges,
    )
    return {**{k: round(v, -9) if k == "bandwidth_cap" else round(v, 4) for k, v in fitted.items()}, **fixed}


def spread(name: str, training: list, full: dict) -> dict[str, list[float]]:
    """Each fitted parameter's range over the fit and its leave-one-case-out refits: where the data allows, i.e.
    with at least 3 cases (2 left per refit); {} otherwise."""
    cases = sorted({n.split(" ")[0] for n, _, _ in training})
    if len(cases) < 3:
        return {}
    refits = [fit(name, [t for t in training if t[0].split(" ")[0] != case]) for case in cases]
    return {
        k: [min(r[k] for r in [full, *refits]), max(r[k] for r in [full, *refits])]
        for k in full
        if k in presets.RANGES and k not in STRUCTURE[name][0]  # the fitted ones
    }


def report(name: str, full: dict, training: list, aside: list, held: dict, older: set, ranges: dict) -> None:
    worst = max(abs(math.log(predict(full) / measured)) for _, predict, measured in training)
    cap = f" up to {full['bandwidth_cap'] / 1e9:.0f} GB/s" if "bandwidth_cap" in full else ""
    roof = f"the {full['compute_peak']} peak" if "compute_peak" in full else "the bound's peak"
    print(
        f"\n{name} ({full.get('backend') or 'any device'}): bandwidth x{full['bandwidth_fraction']:.3g}{cap}, compute "
        f"x{full['compute_fraction']:.3g} of {roof}, +{full['step_overhead_s'] * 1e3:.2g} ms "
        f"a step, memory fraction {full['memory_fraction']:.3g} · {len(training)} points · worst |residual| "
        f"{worst:.3f} "
        f"(x{math.exp(worst):.2f})"
    )
    if ranges:
        print("   leave-one-case-out ranges: " + ", ".join(f"{k} {lo:.3g}-{hi:.3g}" for k, (lo, hi) in ranges.items()))
    else:
        print(f"   leave-one-case-out ranges: none ({len({n.split(' ')[0] for n, _, _ in training})} cases; 3 needed)")
    print(f"   {'case and figure':62} {'measured':>10} {'bound':>10} {'preset':>10} {'error':>7}")
    for n, predict, measured in training:
        print(_row(n, predict, measured, full))
    for label, group in (
        ("held aside (benchmarks/holdout.json)", [r for r in aside if r[0].split(" ")[0] not in older]),
        ("held aside, older build (outside the goal)", [r for r in aside if r[0].split(" ")[0] in older]),
    ):
        if not group:
            continue
        inside = sum(abs(math.exp(held[n]) - 1) <= 0.25 for n, _, _ in group)
        worst = max((held[n] for n, _, _ in group), key=abs)
        print(
            f"   {label}: {inside} of {len(group)} within +-25%, worst {math.exp(worst) - 1:+.0%}; "
            f"{'the misses' if len(group) > 12 else 'all'}:"
        )
        for n, predict, measured in group:
            if abs(math.exp(held[n]) - 1) > 0.25 or len(group) <= 12:
                print(_row(n, predict, measured, full))


def stored(name: str) -> tuple[dict, dict]:
    """(parameters, leave-one-case-out ranges) of the preset as engines/NAME.yaml holds it: what --report prints."""
    fixed, extra, _ = STRUCTURE[name]
    p = presets.load(name)._asdict()
    return {k: p[k] for k in (*START, *extra)} | fixed, dict(p["ranges"])


def main(write: bool = True, refit: bool = True) -> None:
    """Fit every preset and print the report; `write` the YAML files (--print-only: only print). Without `refit`
    (--report, as the docs do) the stored presets are reported: the same printout once the YAMLs are current, which
    tests/test_reality.py checks on the held-aside figures."""
    cases = {c["id"]: c for c in json.loads(reality.TRAIN.read_text())}
    out = ROOT / "engines"
    roofs()
    unsupported = []
    aside = holdout_points()
    older = other_builds()
    for name, training in points(cases).items():
        if len(training) < 3:
            unsupported.append((name, len(training)))
            continue
        if not refit:
            full, ranges = stored(name)
            held = {n: math.log(predict(full) / measured) for n, predict, measured in aside.get(name, [])}
            report(name, full, training, aside.get(name, []), held, older, ranges)
            continue
        full = fit(name, training)
        ranges = spread(name, training, full)
        residuals = {
            n: round(math.log(predict(full) / measured), 4) for n, predict, measured in training
        }  # of the values stored
        held = {n: round(math.log(predict(full) / measured), 4) for n, predict, measured in aside.get(name, [])}
        spec = {
            **full,
            **({"ranges": ranges} if ranges else {}),
            "cases": sorted({n.split(" ")[0] for n, _, _ in training}),
            "residuals": residuals,
            **({"holdout": held} if held else {}),
            "source": "benchmarks/train_presets.py: pattern search minimizing the sum of squared log(predicted / "
            "measured) over the cases "
            "below, from benchmarks/data/train.json and benchmarks/more_training.json (their sources are there)",
            "notes": STRUCTURE[name][2],
        }
        text = "# Fitted by benchmarks/train_presets.py; never edited by hand. Residual = log(predicted / measured).\n"
        if write:
            (out / f"{name}.yaml").write_text(text + yaml.safe_dump(spec, sort_keys=False, width=120))
        report(name, full, training, aside.get(name, []), held, older, ranges)
    lines = [
        "# Engine presets",
        "",
        (
            "Fitted, never edited by hand: `trtllm`, `llamacpp-cuda` and `llamacpp-metal` by "
            "`benchmarks/train_presets.py` on `benchmarks/data/train.json` and `benchmarks/more_training.json` "
            "(TensorRT-LLM's throughput runs priced by `roofline simulate` as trtllm-bench ran them); `vllm` (async "
            "scheduling: builds 0.14 and later, or 0.10-0.13 with --async-scheduling), `vllm-0.10` (0.10-0.13 "
            "without it) and `vllm-legacy` (older or unstated builds; all three one fit, each era its own step and "
            "layer costs) and `sglang` (its prefill rate is `vllm`'s: its own runs do not identify it) by "
            "`benchmarks/fit_engines.py` on `benchmarks/data/serving-train.json` and GPUStack's lab closed loops "
            "(`benchmarks/data/gpustack-candidates.json`), each run priced by `roofline simulate` as it was measured "
            "(`benchmarks/serving_cases.py`)."
        ),
        "",
    ]
    lines += [
        f"- `{e}`: {n} usable training point(s) in the published data: too few to fit a preset (3 needed), so none is "
        "given."
        for e, n in unsupported
    ]
    if write and refit:
        (out / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(write="--print-only" not in sys.argv[1:] and "--report" not in sys.argv[1:], refit="--report" not in sys.argv)
