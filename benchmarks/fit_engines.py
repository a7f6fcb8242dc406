"""Fit the engine presets (engines/NAME.yaml) on the published training cases (../shared/reality/train.json).

Each training point is one published figure of one engine in one setup (benchmarks/reality.py maps the
setups). A preset's four parameters (roofline/calc/presets.py) are fitted by coordinate search to minimize the
sum of squared log(predicted / measured) over its engine's points; the YAML records the values, the cases, each
residual and this script as its source. An engine with fewer than 3 usable points gets no preset: engines/README.md
says so. Rerun after changing the data or the model: python benchmarks/fit_engines.py
Held-aside cases (benchmarks/holdout.json: published figures found by this project, never fitted on) are then
predicted with the fitted preset; their residuals go to the YAML's `holdout:` and the printout.
Cases not used: MLPerf's Offline runs (OpenOrca's prompt lengths vary up to 1024 and their mean is not in the
data, so their work per sample is unknown) and vLLM's KV-capacity figures (memory only, one engine build).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

from roofline import estimate, load_hardware, load_model
from roofline.calc import presets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import reality  # noqa: E402  (the case mapping lives beside this script)


def offline(model, device, devices, prompt, output, params, **knobs) -> float:
    """The best output tokens/s a preset predicts for an offline run: engine-chosen batch and tp split."""
    return reality.best_throughput(model, device, devices, prompt, output, params, **knobs)[0]


def points(cases: dict) -> dict[str, list]:
    """engine -> [(case id / figure, predict(params) -> value, measured)]."""
    fp8 = {"weight_dtype": "fp8", "kv_dtype": "fp8"}
    trtllm = []
    for case_id, model, devices, length in (("trtllm-h100-llama31-8b-fp8-128-128", "llama-3.1-8b", 1, 128),
                                            ("trtllm-h100-llama31-8b-fp8-2048-2048", "llama-3.1-8b", 1, 2048),
                                            ("trtllm-h100x2-llama33-70b-fp8-1000-1000", "llama-3.1-70b", 2, 1000),
                                            ("trtllm-h100x8-llama31-405b-fp8-1000-1000", "llama-3.1-405b", 8, 1000)):
        trtllm.append((f"{case_id} output tok/s", lambda p, a=(model, devices, length): offline(a[0], "h100-sxm", a[1], a[2], a[2], p, **fp8),
                       cases[case_id]["value"]))
    nim = cases["nim-llama33-70b-2xh100-5000-500-c1"]["value"]  # NIM 1.8 serves Llama-3.3-70B FP8 through TensorRT-LLM

    def nim_run(p):
        e = estimate(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), prompt_tokens=5000, output_tokens=500, tp=2, **fp8, **presets.knobs(p))
        return presets.timings(e, p["step_overhead_s"])

    trtllm.append(("nim-llama33-70b-2xh100-5000-500-c1 TTFT s", lambda p: nim_run(p)[0], nim["ttft_ms"] / 1e3))
    trtllm.append(("nim-llama33-70b-2xh100-5000-500-c1 ITL s", lambda p: nim_run(p)[1], nim["itl_ms"] / 1e3))
    llamacpp = []
    for case_id, device in (("llamacpp-h100-llama2-7b-q4_0", "h100-sxm"), ("llamacpp-rtx4090-llama2-7b-q4_0", "rtx-4090"),
                            ("llamacpp-m4max-llama2-7b-q4_0", "apple-m4-max")):
        value = cases[case_id]["value"]
        tg, pp = _llamacpp(device)
        llamacpp.append((f"{case_id} tg128 s/token", tg, 1 / value["tg128_tokens_per_s"]))
        llamacpp.append((f"{case_id} pp512 s", pp, 512 / value["pp512_tokens_per_s"]))
    return {"trtllm": trtllm, "llamacpp": llamacpp, "vllm": [], "sglang": []}


HOLDOUT = ROOT / "benchmarks" / "holdout.json"


def holdout_points() -> dict[str, list]:
    """engine -> [(case id / figure, predict(params) -> value, measured)] for the held-aside cases."""
    out: dict[str, list] = {}
    for c in json.loads(HOLDOUT.read_text())["cases"]:
        if c["engine"] == "trtllm":
            predict = lambda p, c=c: offline(c["model"], c["hardware"], c["tp"], c["prompt_tokens"], c["output_tokens"], p,  # noqa: E731
                                             weight_dtype="fp8", kv_dtype="fp8")
            out.setdefault("trtllm", []).append((f"{c['id']} output tok/s", predict, c["value"]))
        elif c["engine"] == "llamacpp":
            tg, pp = _llamacpp(c["hardware"])
            out.setdefault("llamacpp", []).append((f"{c['id']} tg128 s/token", tg, 1 / c["value"]["tg128_tokens_per_s"]))
            out["llamacpp"].append((f"{c['id']} pp512 s", pp, 512 / c["value"]["pp512_tokens_per_s"]))
    return out


def _llamacpp(device: str):
    """llama-bench's tg128 (s/token from an empty context) and pp512 (s for one 512-token prompt) for Llama-2-7B Q4_0."""
    compute = None if device.startswith("apple") else "int8"  # CUDA MMQ kernels: int8 tensor cores (see reality.py)

    def tg(p):
        e = estimate(load_model("llama-2-7b"), load_hardware(device), prompt_tokens=1, output_tokens=129, quant="q4_0", kv_dtype="fp16",
                     **presets.knobs(p))
        return presets.timings(e, p["step_overhead_s"])[1]

    def pp(p):
        e = estimate(load_model("llama-2-7b"), load_hardware(device), prompt_tokens=512, output_tokens=1, quant="q4_0", kv_dtype="fp16",
                     compute_dtype=compute, **presets.knobs(p))
        return e.ttft_s

    return tg, pp


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


START = {"bandwidth_fraction": 0.8, "compute_fraction": 0.5, "step_overhead_s": 0.001, "memory_fraction": 0.9}


BOUND = reality.BOUND


def _row(name: str, predict, measured: float, params: dict) -> str:
    value = predict(params)
    return f"   {name:62} {measured:10.4g} {predict(BOUND):10.4g} {value:10.4g} {value / measured - 1:+7.0%}"


def main() -> None:
    cases = {c["id"]: c for c in json.loads(reality.TRAIN.read_text())}
    out = ROOT / "engines"
    out.mkdir(exist_ok=True)
    unsupported = []
    aside = holdout_points()
    for engine, training in points(cases).items():
        if len(training) < 3:
            unsupported.append((engine, len(training)))
            continue
        params = {k: round(v, 4) for k, v in presets.fit(loss_of(training), START).items()}  # residuals of the values stored
        residuals = {name: round(math.log(predict(params) / measured), 4) for name, predict, measured in training}
        held = {name: round(math.log(predict(params) / measured), 4) for name, predict, measured in aside.get(engine, [])}
        spec = {**params,
                "cases": sorted({name.split(" ")[0] for name, _, _ in training}),
                "residuals": residuals,
                **({"holdout": held} if held else {}),
                "source": "benchmarks/fit_engines.py: coordinate search minimizing the sum of squared log(predicted / measured) "
                          "over the cases below, from ../shared/reality/train.json (their sources are there)"}
        text = "# Fitted by benchmarks/fit_engines.py; never edited by hand. Residual = log(predicted / measured).\n"
        (out / f"{engine}.yaml").write_text(text + yaml.safe_dump(spec, sort_keys=False, width=120))
        worst = max(abs(r) for r in residuals.values())
        print(f"{engine}: {params} · {len(training)} points · worst |residual| {worst:.3f} (x{math.exp(worst):.2f})")
        print(f"   {'case and figure':62} {'measured':>10} {'bound':>10} {'preset':>10} {'error':>7}")
        for name, predict, measured in training:
            print(_row(name, predict, measured, params))
        if held:
            inside = sum(abs(math.exp(r) - 1) <= 0.25 for r in held.values())
            worst = max(held.values(), key=abs)
            print(f"   held aside (benchmarks/holdout.json): {inside} of {len(held)} within +-25%, worst {math.exp(worst) - 1:+.0%}; "
                  f"{'the misses' if engine == 'trtllm' else 'all'}:")
            for name, predict, measured in aside[engine]:
                if abs(math.exp(held[name]) - 1) > 0.25 or engine != "trtllm":
                    print(_row(name, predict, measured, params))
    lines = ["# Engine presets", "", "Fitted by `benchmarks/fit_engines.py` on `../shared/reality/train.json`; never edited by hand.", ""]
    lines += [f"- `{e}`: {n} usable training point(s) in the published data: too few to fit a preset (3 needed), so none is given."
              for e, n in unsupported]
    (out / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
