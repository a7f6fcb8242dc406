"""Price published serving runs the presets were not fitted on (benchmarks/data/gpustack-candidates.json: GPUStack's
performance lab, extracted with their sources) with the stored presets, the way each was measured, and print the
errors grouped by load: closed loops of a few clients against all requests at once (`vllm bench serve` at rate
inf, 100-1000 requests: the engine saturated), and by whether the run's simulated mean batch is beyond the largest its
preset's fitted runs reached (`batch_covered`, where `estimate` and `simulate` say their typical error stops).

Kept: vLLM or SGLang runs of a bundled model (Qwen3-8B/14B/32B, bf16 or FP8; gpt-oss-20b/120b) on one A100 SXM 80GB
or H100 SXM, without speculative decoding, data/expert/pipeline parallelism, and not already in serving-train.json.

    python benchmarks/candidates.py [vllm|sglang]
"""

import json
import math
import statistics
import sys
from pathlib import Path

from roofline.calc.presets import beyond_runs
from roofline.specs import presets

sys.path.insert(0, str(Path(__file__).parent))
import fit_engines  # noqa: E402
import serving_cases  # noqa: E402

DATA = Path(__file__).parent / "data" / "gpustack-candidates.json"
MODELS = {  # checkpoint -> (bundled model, named weight format other than the model's own: FP8 keeps lm_head bf16)
    "Qwen/Qwen3-8B": ("qwen3-8b", None),
    "Qwen/Qwen3-8B-FP8": ("qwen3-8b", "fp8"),
    "Qwen/Qwen3-14B": ("qwen3-14b", None),
    "Qwen/Qwen3-14B-FP8": ("qwen3-14b", "fp8"),
    "Qwen/Qwen3-32B": ("qwen3-32b", None),
    "openai/gpt-oss-20b": ("gpt-oss-20b", None),
    "openai/gpt-oss-120b": ("gpt-oss-120b", None),
}
LEFT_OUT = ("SPECULATIVE", "SAME RUN", "DATA PARALLEL", "EXPERT PARALLEL", "PIPELINE")  # the file's flags in notes


def hardware(stated: str) -> str | None:
    """The bundled device a run's card is, from what its page says (before the extraction's own remarks)."""
    card = stated.split(" (")[0]
    if card.startswith("NVIDIA A100 SXM 80GB"):
        return "a100-80gb-sxm"
    if card.startswith("NVIDIA H100 SXM"):
        return "h100-sxm"
    return None  # an A100 of unstated memory, an RTX 4090, an Ascend NPU, ...


def cases(engine: str) -> list[dict]:
    out = []
    for c in json.loads(DATA.read_text())["cases"]:
        device = hardware(c["hardware"])
        lengths = (c["input_tokens"], c["output_tokens"])
        if c["engine"] != engine or c["model"] not in MODELS or device is None or c["tp"] != 1 or c["pp"] != 1:
            continue
        if any(flag in c["notes"] for flag in LEFT_OUT) or not all(isinstance(n, (int, float)) for n in lengths):
            continue
        model, dtype = MODELS[c["model"]]
        requests = int(c["dataset"].split(" successful")[0].split()[-1])
        clients = c["concurrency"] or requests  # rate inf without a cap: every request at once
        dist = serving_cases.SHAREGPT if "sharegpt" in c["dataset"].lower() else None
        extra = {"quant": dtype} if dtype else {}
        setup = serving_cases.loop(model, round(lengths[0]), round(lengths[1]), clients, requests, dist, **extra)
        measured = {m: c["metrics"][m] for m in serving_cases.METRICS if m in c["metrics"]}
        version = serving_cases.version_of(c["engine_version"] or "")
        out.append({**setup, "hardware": device, "id": c["id"], "measured": measured, "version": version})
    return out


def main(engines: list[str]) -> None:
    for engine in engines:
        found = cases(engine)
        pricer, params = fit_engines.Pricer(engine, found), fit_engines.stored(engine)
        groups: dict[tuple[str, str], list[float]] = {}
        print(f"{engine}: {len(found)} runs")
        loaded = {era: presets.load(era) for era in fit_engines.eras(engine)}
        for c in found:
            errors = {m: math.exp(r) - 1 for m, r in pricer.residuals(c, params).items()}
            load = "all at once" if c["concurrency"] == c["requests"] else f"{c['concurrency']} clients"
            batch = pricer.batch(c, params)
            beyond = beyond_runs(loaded[fit_engines.era_of(engine, c)], batch) is not None
            print(f"  {c['id']:<70} {load:<12} batch {batch:5.0f}{' beyond' if beyond else ''}",
                  " ".join(f"{m} {e:+.0%}" for m, e in errors.items()))  # fmt: skip
            for m, e in errors.items():
                groups.setdefault(("all at once" if load == "all at once" else "closed loop", m), []).append(e)
                groups.setdefault(("beyond" if beyond else "within", m), []).append(e)
        for (load, m), errors in sorted(groups.items()):
            print(f"  {load:<12} {m:<14} runs {len(errors):>3}  median {statistics.median(errors):+.0%}")


if __name__ == "__main__":
    asked = sys.argv[1:] or ["vllm", "sglang"]
    if not set(asked) <= {"vllm", "sglang"}:
        sys.exit(f"candidates.py: expected vllm and/or sglang, got {' '.join(asked)}")
    main(asked)
