"""roofline's bound against published measurements (benchmarks/data/train.json): the sanity property.

For every case the roofline bound for that setup must be at least the measured performance: throughput at or
above it, latency at or below it, capacity at or above it. A published number that beats the bound points at
a wrong datasheet figure, model accounting, precision or convention; this script prints each case's bound,
measurement and ratio (bound / measured for throughput and capacity, measured / bound for latency: >= 1 holds).

Offline throughput cases let the engine choose the batch: the bound is the best end-to-end output tokens/s over
every batch that fits and every way to split the devices into tensor-parallel replicas (tp 1, 2, 4, 8), at a
memory fraction of 0.95. Variable-length datasets (MLPerf's OpenOrca: prompts up to 1024 tokens) are bounded
at their cap and at 128 tokens, a range.
Run: python benchmarks/reality.py [PATH to train.json]
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline import estimate, load_hardware, load_model
from roofline.calc import presets
from roofline.calc.estimate import estimate_at, prepare
from roofline.calc.sweep import default_batches

TRAIN = (
    Path(__file__).resolve().parent / "data" / "train.json"
)  # published figures, each with its source (data/README.md)
HOLDOUT = Path(__file__).resolve().parent / "holdout.json"  # published figures held aside (benchmarks/train_presets.py)
MORE_TRAINING = (
    Path(__file__).resolve().parent / "more_training.json"
)  # published figures this project added to training


# The roofline itself as a preset: full efficiency, no step cost, the offline runs' memory fraction.
BOUND = {"bandwidth_fraction": 1.0, "compute_fraction": 1.0, "step_overhead_s": 0.0, "memory_fraction": 0.95}


def best_throughput(
    model: str, device: str, devices: int, prompt: int, output: int, params: dict | None = None, **knobs
) -> tuple[float, str]:
    """The largest end-to-end output tokens/s of `devices` devices split into tp-replicas, over batches that fit,
    at a preset's `params` (default: the bound). benchmarks/train_presets.py predicts the offline cases with it."""
    params = params or BOUND
    m, h = load_model(model), load_hardware(device)
    best, how = 0.0, "nothing fits"
    for tp in (1, 2, 4, 8):
        if tp > devices or devices % tp or (tp > 1 and h.interconnect_bandwidth is None):
            continue
        setup = prepare(m, h, tp=tp, **presets.knobs(params), **knobs)
        first = estimate_at(setup, 1, prompt, output)
        if not first.fits:
            continue
        for batch in default_batches(first.max_batch):
            e = estimate_at(setup, batch, prompt, output)
            total = devices // tp * presets.timings(e, params["step_overhead_s"])[2]
            if e.fits and total > best:
                best, how = total, f"{devices // tp} x tp{tp} at batch {batch}"
    return best, how


# train.json's llama.cpp cases: Llama-2-7B Q4_0 from the CUDA and Metal scoreboards, on these devices.
LLAMACPP_TRAIN = {
    "llamacpp-h100-llama2-7b-q4_0": "h100-sxm",
    "llamacpp-rtx4090-llama2-7b-q4_0": "rtx-4090",
    "llamacpp-m4max-llama2-7b-q4_0": "apple-m4-max",
}


def llamacpp_cases(cases: dict[str, dict], *files: Path) -> list[dict]:
    """train.json's llama.cpp cases in the shape of the JSON files' (id, model, hardware, quant, value), then each
    llama.cpp case of `files` (more_training.json, holdout.json)."""
    out = [
        {"id": i, "model": "llama-2-7b", "hardware": d, "quant": "q4_0", "value": cases[i]["value"]}
        for i, d in LLAMACPP_TRAIN.items()
        if i in cases
    ]
    return out + [c for f in files for c in json.loads(f.read_text())["cases"] if c["engine"] == "llamacpp"]


# TensorRT-LLM's H100 FP8 throughput tables (train.json): (case id, model, devices, prompt = output length).
TRTLLM_CASES = (
    ("trtllm-h100-llama31-8b-fp8-128-128", "llama-3.1-8b", 1, 128),
    ("trtllm-h100-llama31-8b-fp8-2048-2048", "llama-3.1-8b", 1, 2048),
    ("trtllm-h100x2-llama33-70b-fp8-1000-1000", "llama-3.1-70b", 2, 1000),
    ("trtllm-h100x8-llama31-405b-fp8-1000-1000", "llama-3.1-405b", 8, 1000),
)


# trtllm-bench's request counts per ISL/OSL in TensorRT-LLM's Performance Overview (perf-overview.md at commit
# 00f37686, "Preparing a Dataset"): a run is that many fixed-length requests queued at once.
TRTLLM_REQUESTS = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
    (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000,
}  # fmt: skip
TRTLLM_KV_FRACTION = 0.95  # "--kv_cache_free_gpu_mem_fraction 0.95" in many runs (same page; the default is 0.90)
TRTLLM_BLOCK = 32  # tokens a KV block (KvCacheConfig.tokens_per_block's default)


def trtllm_bench_settings(model, hardware, tp: int, isl: int, osl: int) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench throughput picks for a dataset of isl/osl tokens, FP8 weights
    and KV, KV fraction TRTLLM_KV_FRACTION (tensorrt_llm/bench/build/tuning.py: calc_engine_setting and
    finetune_setting, pp 1), in its own GiB units."""
    a = model.arch
    per_token = 2 * a.layers * max(tp, a.num_kv_heads) * a.head_dim / 2**30  # 1 B an FP8 element, all devices
    available = (hardware.memory_capacity * tp - model.params) / 2**30  # 1 B an FP8 weight
    raw_bs = min(available * TRTLLM_KV_FRACTION / (per_token * (isl + osl)), 4096)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    bs = max(64, _round_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256))))
    return bs, max(2048, _round_up(raw_tokens, ((4096, 256), (8192, 512), (math.inf, 1024))))


def _round_up(value: float, tiers: tuple[tuple[float, int], ...]) -> int:
    """`value` rounded up to the multiple of the first tier (below, multiple) whose bound it is below."""
    multiple = next(m for below, m in tiers if value < below)
    return multiple * math.ceil(value / multiple)


def llama_bench(case: dict) -> list[tuple[str, bool, Callable[..., Any], float]]:
    """Each llama-bench figure of one llama.cpp case as (test, is_decode, run(**knobs) -> Estimate, measured s):
    tgN is N tokens generated from an empty context (s/token: TPOT), ppN one N-token prefill (s: TTFT), at
    llama.cpp's default fp16 KV cache."""
    model, hardware = load_model(case["model"]), load_hardware(case["hardware"])
    out = []
    for key, measured in case["value"].items():
        test = key.split("_")[0]  # tg128, tg512, pp512
        n = int(test[2:])
        decode = test.startswith("tg")
        lengths = {"prompt_tokens": 1, "output_tokens": n + 1} if decode else {"prompt_tokens": n, "output_tokens": 1}

        def run(lengths=lengths, **knobs):
            return estimate(model, hardware, batch=1, quant=case["quant"], kv_dtype="fp16", **lengths, **knobs)

        out.append((test, decode, run, 1 / measured if decode else n / measured))
    return out


def decode_case(model: str, device: str, prompt: int, output: int, tp: int = 1, **knobs):
    return estimate(
        load_model(model), load_hardware(device), batch=1, prompt_tokens=prompt, output_tokens=output, tp=tp, **knobs
    )


def rows(cases: dict[str, dict]) -> list[tuple[str, str, float, float, str]]:
    """(case, figure, bound, measured, how): ratio >= 1 means the bound holds (see the module docstring)."""
    out = []

    def offline(case_id, model, device, devices, output, **knobs):
        value = cases[case_id]["value"]
        for prompt in (1024, 128):
            bound, how = best_throughput(model, device, devices, prompt, output, **knobs)
            out.append((case_id, f"output tok/s, prompt {prompt}", bound, value, how))

    offline("mlperf41-h100x8-llama2-70b-offline", "llama-2-70b", "h100-sxm", 8, 290, weight_dtype="fp8", kv_dtype="fp8")
    offline(
        "mlperf41-b200x1-llama2-70b-offline",
        "llama-2-70b",
        "b200",
        1,
        274,
        weight_dtype="fp4",
        compute_dtype="fp4",
        kv_dtype="fp8",
    )
    offline("mlperf41-mi300x8-llama2-70b-offline", "llama-2-70b", "mi300x", 8, 293, weight_dtype="fp8", kv_dtype="fp8")
    for case_id, model, devices, length in TRTLLM_CASES:
        bound, how = best_throughput(model, "h100-sxm", devices, length, length, weight_dtype="fp8", kv_dtype="fp8")
        out.append((case_id, f"output tok/s, {length}/{length}", bound, cases[case_id]["value"], how))
    nim = cases["nim-llama33-70b-2xh100-5000-500-c1"]["value"]
    e = decode_case("llama-3.1-70b", "h100-sxm", 5000, 500, tp=2, weight_dtype="fp8", kv_dtype="fp8")
    out.append(
        ("nim-llama33-70b-2xh100-5000-500-c1", "TTFT s (latency)", e.ttft_s, nim["ttft_ms"] / 1e3, "tp2 batch 1")
    )
    out.append(("nim-llama33-70b-2xh100-5000-500-c1", "ITL s (latency)", e.tpot_s, nim["itl_ms"] / 1e3, "tp2 batch 1"))
    # llama.cpp's llama-bench: tgN is N tokens generated from an empty context, ppN one N-token prefill. The bound's
    # compute dtype is the library default for a ggml format: int8 where the device lists it (llama.cpp multiplies
    # against 8-bit activation blocks: MMQ on CUDA), else fp16. The cases this project added are checked too.
    for c in llamacpp_cases(cases, MORE_TRAINING, HOLDOUT):
        for test, decode, run, measured in llama_bench(c):
            e = run()
            what = f"{test} s/token (latency)" if decode else f"{test} s (latency)"
            out.append((c["id"], what, e.tpot_s if decode else e.ttft_s, measured, "batch 1"))
    kv = cases["vllm-kv-capacity-h100"]["value"]
    for key, model, tp in (("llama2_7b_tp1_tokens", "llama-2-7b", 1), ("llama2_70b_tp4_tokens", "llama-2-70b", 4)):
        e = estimate(load_model(model), load_hardware("h100-sxm"), tp=tp, output_tokens=2)
        tokens = e.kv_budget_bytes / (e.kv_bytes_per_token * (1 / tp if tp <= 8 else 1))
        out.append(("vllm-kv-capacity-h100", f"KV tokens {model} tp{tp}", tokens, kv[key], "0.9 x memory - weights"))
    return out


def main(path: str | None = None) -> None:
    cases = {c["id"]: c for c in json.loads(Path(path or TRAIN).read_text())}
    print(f"{'case':44} {'figure':30} {'bound':>12} {'measured':>12} {'ratio':>6}  holds  how")
    broken = 0
    for case_id, figure, bound, measured, how in rows(cases):
        latency = "latency" in figure
        ratio = measured / bound if latency else bound / measured
        broken += ratio < 1
        print(
            f"{case_id:44} {figure:30} {bound:12.4g} {measured:12.4g} {ratio:6.2f}  "
            f"{'yes' if ratio >= 1 else 'NO ':5}  {how}"
        )
    print(f"\n{broken} figure(s) beat the bound (ratio < 1)")


if __name__ == "__main__":
    main(*sys.argv[1:])
