"""The published vLLM and SGLang serving runs roofline can price, each as the workload it was measured with
(benchmarks/fit_engines.py fits the engine presets on them): those of benchmarks/data/serving-train.json, and the
closed loops of GPUStack's performance lab (benchmarks/data/gpustack-candidates.json, extracted with their sources;
its runs of every request at once are priced by benchmarks/candidates.py, not fitted on: see `lab`).

A case is priced the way it was measured: `roofline simulate` with the run's scheduler settings, lengths and load
(constant or Poisson rate, a closed loop of N clients, or all requests at once = a closed loop of as many clients as
requests; an offline batch of 8 is a closed loop of 8 clients running 8 requests). Lengths are the stated means:
fixed where the benchmark fixes them, lognormal with CV 1 for ShareGPT (heavy-tailed), lognormal with CV 0.087 for
"+-15%" (a uniform +-15% has that CV). Metrics are log-compared to the simulation's: TTFT mean/p50/p99, TPOT mean,
ITL p50, E2E mean, output tokens/s.

Left out, and why (case ids in serving-train.json):
- lss-rtxpro6000x2 (data parallel x2 with EP), mlperf50-amd-mi325x8 (MLPerf harness, 8-way DP, token budgets not
  stated), vllmblog-mi300x-llama31-405b (FP8 405B with unstated lengths), sglang-h200x16/mi300x8 DeepSeek-V3
  (multi-node EP and MLA kernels beyond one replica's step model): setups roofline's one-replica simulator does
  not reproduce.
- vllmblog-spark-nemotron3super (hybrid Mamba layers: out of scope, refused by name); sglang-spark-llama31-8b bs32
  (an aggregate decode rate with no lengths).
- The DGX Spark runs state no lengths: priced at a 512-token prompt (a chat's: 30), whose batch-1 decode step is
  the weights' read; their TPOT only.
- vllmblog-fp8kv-*-c1 (an ITL fit over a length sweep, not a run), gpustack A100 Qwen3-14B (memory size not
  stated): not a figure that can be priced as measured.
- gpustack H100 Qwen3-32B (every request at once; serving-train.json's copy of the page says "NVIDIA H100 GPUs",
  the page's newest commit "A single NVIDIA H100 SXM GPU"): the saturated regime the step model does not capture
  (docs/reality.md), like the lab's other runs of every request at once.
- The blisgt "reasoning" runs are saturated (4 requests/s offered, under 2.2 served): their TTFT and E2E grow with
  the run's length, and their output tokens/s (537 for the 7B, a sixth of 128 sequences at their TPOT) counts
  requests the client gave up on: only their TPOT is used.
- The blisgt Llama-2-7B runs' output tokens/s: the client counted fewer tokens than were generated
  (`_undercounted`).
"""

import json
import re
from pathlib import Path

DATA = Path(__file__).parent / "data" / "serving-train.json"
LAB = Path(__file__).parent / "data" / "gpustack-candidates.json"
METRICS = {  # serving-train.json metric -> (simulation metric, statistic)
    "ttft_ms_mean": ("ttft_s", "mean"),
    "ttft_ms_p50": ("ttft_s", "p50"),
    "ttft_ms_p99": ("ttft_s", "p99"),
    "tpot_ms_mean": ("tpot_s", "mean"),
    "itl_ms_p50": ("itl_s", "p50"),
    "e2e_ms_mean": ("e2e_s", "mean"),
    "batch_latency_ms_mean": ("e2e_s", "mean"),
    "output_tok_s": ("output_tokens_per_s", None),
}
BLIS_MODELS = {
    "llama-2-7b": ("llama-2-7b", 1),
    "llama-2-70b": ("llama-2-70b", 4),
    "codellama-34b": ("codellama-34b", 2),
}
SHAREGPT = "lognormal:1"
PLUS_MINUS_15 = "lognormal:0.087"


def _blis(case: dict) -> dict:
    """BLIS ground-truth runs (inference-perf, vLLM 0.15.1 on H100 SXM): constant rate, a shared system prompt
    (prefix caching on), the measured prompt mean (tokenizer and chat template included), fixed output."""
    name = next(k for k in BLIS_MODELS if f"-{k}-" in case["id"])
    model, tp = BLIS_MODELS[name]
    prompt = float(re.search(r"measured prompt_len mean ([0-9.]+)", case["dataset"])[1])
    shared = int(re.search(r"system prompt (\d+) tok", case["dataset"])[1])
    saturated = "reasoning" in case["id"]
    requests = 1200 if saturated else 600
    skip = ("ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "e2e_ms_mean") if saturated else ()
    if saturated or _undercounted(case):
        skip = (*skip, "output_tok_s")
    return {
        "model": model,
        "hardware": "h100-sxm",
        "tp": tp,
        "prompt": round(prompt),
        "output": round(case["output_tokens"]),
        "cached": shared,
        "rate": case["request_rate"],
        "arrival": "constant",
        "requests": requests,
        "scheduler": (128, 2048),
        "kv_tokens": int(re.search(r"GPU KV capacity (\d+) tokens", case["notes"])[1]),
        "skip": skip,
    }


def _undercounted(case: dict) -> bool:
    """Whether the client counted fewer output tokens per request than the run generated: output tokens/s over
    requests/s more than 5% under the fixed output (ignore_eos). The Llama-2-7B runs count 194-210 of 247-251
    (stage_0_lifecycle_metrics.json: output_len mean 193.7, min 0, median 247) while no request ended sooner than
    1.54 s, over 200 tokens at their TPOT: the client re-tokenizes the streamed text. Their output tokens/s is not
    the engine's; their TPOT and E2E are (the derived TPOT divides by the fixed output)."""
    m = case["metrics"]
    if not (m.get("output_tok_s") and m.get("request_tput_req_s")):
        return False
    return m["output_tok_s"] / m["request_tput_req_s"] < 0.95 * case["output_tokens"]


def _batch(model: str, hardware: str, tp: int, prompt: int, output: int, **extra) -> dict:
    """vLLM's benchmark_latency: an offline batch of 8, fixed lengths, latency of the whole batch."""
    return {"model": model, "hardware": hardware, "tp": tp, "prompt": prompt, "output": output, "concurrency": 8,
            "requests": 8, "warmup": 0, "skip": ("tpot_ms_mean",), **extra}  # fmt: skip


def _single(model: str, hardware: str, tp: int, prompt: int, output: int, dtype: str) -> dict:
    """One request at a time (SGLang's bench_one_batch_server at batch 1, a single chat): its TPOT."""
    # mxfp4: the checkpoint's own format; fp8: the named format (linear layers in fp8, embeddings and lm_head in bf16,
    # as FP8 checkpoints and SGLang's online fp8 quantization keep them)
    weights = {} if dtype == "mxfp4" else {"quant": "fp8"} if dtype == "fp8" else {"weight_dtype": dtype}
    return {"model": model, "hardware": hardware, "tp": tp, "prompt": prompt, "output": output, "concurrency": 1,
            "requests": 2, "warmup": 0, **weights}  # fmt: skip


def loop(model: str, prompt: int, output: int, clients: int, requests: int, dist: str | None, **extra) -> dict:
    """A closed loop of `clients` on one H100 SXM (`vllm bench serve --max-concurrency`; all requests at once when
    there are as many clients as requests; `lab` sets each run's own device), lengths around the means by `dist`
    (None: fixed)."""
    lengths = {"prompt_dist": dist, "output_dist": dist} if dist else {}
    return {"model": model, "hardware": "h100-sxm", "tp": 1, "prompt": prompt, "output": output,
            "concurrency": clients, "requests": requests, **lengths, **extra}  # fmt: skip


SETUPS = {
    "vllmperf-a100-llama31-8b-bs8": _batch("llama-3.1-8b", "a100-80gb-sxm", 1, 32, 128),
    "vllmperf-h100-llama31-8b-bs8": _batch("llama-3.1-8b", "h100-sxm", 1, 32, 128),
    "vllmperf-h200-llama31-8b-bs8": _batch("llama-3.1-8b", "h200", 1, 32, 128),
    "vllmperf-h100-llama3-70b-tp4-bs8": _batch("llama-3.1-70b", "h100-sxm", 4, 32, 128),
    "vllmperf-h200-llama3-70b-tp4-bs8": _batch("llama-3.1-70b", "h200", 4, 32, 128),
    "vllmperf-h100-mixtral-8x7b-tp2-bs8": _batch("mixtral-8x7b", "h100-sxm", 2, 32, 128),
    "vllmperf-h200-mixtral-8x7b-tp2-bs8": _batch("mixtral-8x7b", "h200", 2, 32, 128),
    "rocmblog-mi300x-llama3-8b-latency-512-512-fp16": _batch("llama-3.1-8b", "mi300x", 1, 512, 512),
    "rocmblog-mi300x-llama3-8b-latency-512-512-fp8": _batch("llama-3.1-8b", "mi300x", 1, 512, 512, quant="fp8"),
    "vllmblog-fp8kv-h100-llama31-8b-c8-20k-bf16kv": loop("llama-3.1-8b", 20000, 2000, 8, 150, PLUS_MINUS_15),
    "vllmblog-fp8kv-h100-llama31-8b-c8-20k-fp8kv": loop(
        "llama-3.1-8b", 20000, 2000, 8, 150, PLUS_MINUS_15, kv_dtype="fp8"
    ),
    "vllmblog-fp8kv-h100-gptoss20b-c8-20k-bf16kv": loop("gpt-oss-20b", 20000, 2000, 8, 150, PLUS_MINUS_15),
    "gpustack-h100-qwen3-8b-c4-vllm": loop("qwen3-8b", 233, 221, 4, 100, SHAREGPT),
    "gpustack-h100-qwen3-8b-c4-sglang": loop("qwen3-8b", 233, 221, 4, 100, SHAREGPT),
    "gpustack-h100-qwen3-8b-fp8-c4-sglang": loop("qwen3-8b", 233, 221, 4, 100, SHAREGPT, quant="fp8"),
    **{
        f"sglang-gptoss120b-{device}-tp{tp}-{dtype}-bs1": _single("gpt-oss-120b", hardware, tp, 1024, 512, dtype)
        for device, hardware, tp in (("b200", "b200", 4), ("h100", "h100-sxm", 8), ("mi350", "mi350x", 8))
        for dtype in ("mxfp4", "bf16")
    },
    # DGX Spark: lengths not stated (the blog's spreadsheet only): a short prompt, whose decode step is the weights'
    "sglang-spark-llama31-8b-fp8-bs1": _single("llama-3.1-8b", "dgx-spark", 1, 512, 128, "fp8"),
    "sglang-spark-llama31-70b-fp8-bs1": _single("llama-3.1-70b", "dgx-spark", 1, 512, 128, "fp8"),
    "sglang-spark-gptoss20b-c1": _single("gpt-oss-20b", "dgx-spark", 1, 30, 1000, "mxfp4"),
    "sglang-spark-gptoss120b-c1": _single("gpt-oss-120b", "dgx-spark", 1, 30, 1000, "mxfp4"),
}


def cases(engine: str) -> list[dict]:
    """The priceable cases of `engine` (vllm or sglang): each its setup, measured metrics and source."""
    out = []
    for case in json.loads(DATA.read_text())["cases"]:
        if case["engine"] != engine:
            continue
        setup = _blis(case) if case["id"].startswith("blisgt-") else SETUPS.get(case["id"])
        if setup is None:
            continue
        skip = setup.get("skip", ())
        measured = {m: case["metrics"][m] for m in METRICS if m in case["metrics"] and m not in skip}
        version = version_of(case.get("engine_version") or "")
        overlap = async_scheduling(version, case.get("notes") or "")
        out.append({**setup, "id": case["id"], "measured": measured, "source": case["source"], "version": version,
                    "async_scheduling": overlap})  # fmt: skip
    out += [c for c in lab(engine) if c["concurrency"] < c["requests"]]
    return [{**c, "measured": _warm(c["measured"], c.get("concurrency"))} for c in out]


COLD = ("ttft_ms_mean", "ttft_ms_p99", "e2e_ms_mean", "output_tok_s")  # what a cold start's stall is in


def _warm(measured: dict, clients: int | None) -> dict:
    """A closed loop's metrics without those a cold start shows in (COLD): where its TTFT p99 is above 2N x the
    median at N clients. A request waits behind at most the N - 1 others' prefills, so the load alone keeps its TTFT
    within about N x the median; beyond twice that, a few requests paid what the client's single warm-up request did
    not cover (SGLang FP8 Qwen3-8B at 4 clients with the FlashInfer attention backend: p50 40.7 ms, p99 5,701 ms, mean
    269 ms; with Triton's: 43.8, 493, 60.2). The stall lengthens the run too (FlashInfer's: 557 output tokens/s over
    its 39.6 s, about 649 without its first four requests' ~5.7 s), so its throughput and mean E2E go with them; its
    TTFT median, TPOT and ITL stay. Runs at a rate (no clients) are left alone: their queue has no such bound."""
    p50, p99 = measured.get("ttft_ms_p50"), measured.get("ttft_ms_p99")
    if clients is None or p50 is None or p99 is None or p99 <= 2 * clients * p50:
        return measured
    return {m: v for m, v in measured.items() if m not in COLD}


def published() -> dict[str, dict]:
    """Every run of both files as published (id -> its record: engine, hardware, metrics, source)."""
    return {c["id"]: c for path in (DATA, LAB) for c in json.loads(path.read_text())["cases"]}


ASYNC_DEFAULT = (0, 14)  # vLLM's first build that schedules step N+1 while step N runs unless told not to
FULL_ISL_DEFAULT = (0, 19)  # vLLM's first build that admits a request only when its whole prompt fits


def async_scheduling(version: tuple[int, int] | None, notes: str) -> bool:
    """Whether a vLLM run overlapped its scheduler with the GPU (async scheduling): on by default from v0.14.0 ("Async
    scheduling is now enabled by default": its release notes, 2026-01), before that only where the serve command
    says `--async-scheduling`; `--no-async-scheduling` turns it off."""
    if "--no-async-scheduling" in notes:
        return False
    return "--async-scheduling" in notes or (version is not None and version >= ASYNC_DEFAULT)


def version_of(stated: str) -> tuple[int, int] | None:
    """(major, minor) of the build a run names ("0.15.1", "0.6.2 (commit cb3b2b9)"), None where it names none
    ("not stated ... (CI build of vLLM main, 2024-25)", "ROCm build (version not stated)")."""
    found = re.match(r"v?(\d+)\.(\d+)", stated.strip())
    return (int(found[1]), int(found[2])) if found else None


LAB_MODELS = {  # checkpoint -> (bundled model, named weight format other than the model's own: FP8 keeps lm_head bf16)
    "Qwen/Qwen3-8B": ("qwen3-8b", None),
    "Qwen/Qwen3-8B-FP8": ("qwen3-8b", "fp8"),
    "Qwen/Qwen3-14B": ("qwen3-14b", None),
    "Qwen/Qwen3-14B-FP8": ("qwen3-14b", "fp8"),
    "Qwen/Qwen3-32B": ("qwen3-32b", None),
    "openai/gpt-oss-20b": ("gpt-oss-20b", None),
    "openai/gpt-oss-120b": ("gpt-oss-120b", None),
}
LAB_LEFT_OUT = ("SPECULATIVE", "SAME RUN", "DATA PARALLEL", "EXPERT PARALLEL", "PIPELINE")  # the file's flags in notes


def lab_hardware(stated: str) -> str | None:
    """The bundled device a lab run's card is, from what its page says (before the extraction's own remarks)."""
    card = stated.split(" (")[0]
    if card.startswith("NVIDIA A100 SXM 80GB"):
        return "a100-80gb-sxm"
    if card.startswith("NVIDIA H100 SXM"):
        return "h100-sxm"
    return None  # an A100 of unstated memory, an RTX 4090, an Ascend NPU, ...


def lab(engine: str) -> list[dict]:
    """GPUStack's performance-lab runs of `engine` roofline can price: a bundled model (Qwen3-8B/14B/32B in bf16 or
    FP8, gpt-oss-20b/120b) on one A100 SXM 80GB or H100 SXM, without speculative decoding, data, expert or pipeline
    parallelism, and not a reprint of a serving-train.json run. All `vllm bench serve` with ShareGPT or random
    prompts: a closed loop of `--max-concurrency` clients, or every request at once (rate inf, no cap: as many clients
    as requests). The closed loops are training runs (`cases`); the runs of every request at once, where the engines
    serve about half of what the step model prices (docs/reality.md), are what benchmarks/candidates.py prices."""
    out = []
    for c in json.loads(LAB.read_text())["cases"]:
        device = lab_hardware(c["hardware"])
        means = (c["input_tokens"], c["output_tokens"])
        if c["engine"] != engine or c["model"] not in LAB_MODELS or device is None or c["tp"] != 1 or c["pp"] != 1:
            continue
        if any(flag in c["notes"] for flag in LAB_LEFT_OUT) or not all(isinstance(n, (int, float)) for n in means):
            continue
        model, dtype = LAB_MODELS[c["model"]]
        requests = int(c["dataset"].split(" successful")[0].split()[-1])
        clients = c["concurrency"] or requests  # rate inf without a cap: every request at once
        dist = SHAREGPT if "sharegpt" in c["dataset"].lower() else None
        extra = {"quant": dtype} if dtype else {}
        setup = loop(model, round(means[0]), round(means[1]), clients, requests, dist, **extra)
        measured = {m: c["metrics"][m] for m in METRICS if m in c["metrics"]}
        version = version_of(c["engine_version"] or "")
        out.append({**setup, "hardware": device, "id": c["id"], "measured": measured, "source": c["source"],
                    "version": version, "async_scheduling": async_scheduling(version, c["notes"])})  # fmt: skip
    return out
