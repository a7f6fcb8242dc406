"""Price published serving runs with the stored engine presets, as `roofline simulate --engine` prices them, and say
how far each prediction lands from its measurement: a check of the presets on runs they were never fitted on.

Input: JSON files in serving-train.json's form (`{"cases": [...]}` or a list), each run with `engine` (vllm, sglang,
trtllm), `engine_version`, `model` (a Hugging Face id), `hardware` (a device's name), `tp`, `pp`, `count`,
`input_tokens` / `output_tokens` (mean tokens), `concurrency` or `request_rate`, `arrival`, `dataset`, `weight_dtype`,
`kv_dtype`, `notes` and `metrics` (ttft_ms_mean/p50/p99, tpot_ms_mean, itl_ms_p50, e2e_ms_mean, output_tok_s). A run
becomes simulate's flags by rules that read no run id (`setup`):
- model: the bundled model whose config.json repository or name is the run's, compared without the org and without
  -Instruct, -chat, -hf, -it, -base, -FP8, -AWQ, -GPTQ and -bf16 (which set the weight format); Meta-Llama-3-8B/70B
  are priced as Llama-3.1-8B/70B (the same layers and widths; only the context differs);
- device: the bundled device every word of whose id the run's hardware names (NVIDIA A100-SXM4-80GB ->
  a100-80gb-sxm); a chip named without its form (NVIDIA H100) is the SXM part, as serving benchmarks run it;
- engine: vLLM's preset by build (`vllm` 0.14+ or with --async-scheduling, `vllm-0.10`, `vllm-legacy`: the eras of
  benchmarks/fit_engines.py), `sglang`, `trtllm`;
- load: `concurrency` N is a closed loop of N clients (an offline or single batch of N: N requests at once);
  `request_rate` R arrivals at R a second, constant where the arrival says constant or fixed, else Poisson; an
  infinite rate is every request at once (as many clients as requests); the request count from the dataset ("100
  prompts", "150 requests"), else 10 a client or a minute of arrivals (100-1,000);
- lengths: fixed at the means, lognormal with CV 1 for ShareGPT, CV 0.087 for "+-15%" (serving_cases' rules);
- scheduler: max_num_seqs and max_num_batched_tokens where the notes give them, else the engine's defaults; vLLM's
  admission on the whole prompt from build 0.19, on the first chunk before (or a build not stated).
A run whose setup these rules cannot read (lengths not numbers, data parallelism, a device or model not bundled,
a rate with a concurrency cap) or whose notes name what no preset's runs had (speculative decoding, data, expert or
pipeline parallelism) is listed with the reason, not priced. The rules are generic: where
benchmarks/serving_cases.py knows more about a run (BLIS's shared system prompt, its measured prompt mean, a
client that undercounts tokens), its pricing in the fit differs from this one.

Run: python benchmarks/price_runs.py FILE [FILE ...] [--json | --summary]
Prints each priced run's predicted / measured per metric, and each metric group's median |predicted / measured - 1|
(the figure the presets' held-out errors give)."""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import serving_cases  # noqa: E402  (lengths' distributions, metric names, async scheduling by build)
from fit_engines import GROUPS, era_of  # noqa: E402  (the presets' error groups, vLLM's preset by build)

VARIANT = {"instruct", "chat", "hf", "it", "base", "fp8", "dynamic", "bf16", "awq", "gptq", "int4"}  # not its layers
NOT_PRICED = ("speculative", "eagle", "data parallel", "expert parallel", "pipeline parallel")  # in a run's notes
SAME_LAYERS = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}  # config.json alike but rope/context


def _stem(name: str) -> str:
    """A checkpoint's name without its org, variant words and release date: meta-llama/Llama-2-70b-chat-hf ->
    llama-2-70b, Qwen/Qwen3-30B-A3B-Instruct-2507 -> qwen3-30b-a3b, Mixtral-8x7B-Instruct-v0.1 -> mixtral-8x7b-v0.1."""
    parts = name.split("/")[-1].lower().split("-")
    kept = [w for w in parts if w not in VARIANT and not re.fullmatch(r"\d{4}", w)]
    return "-".join(kept).removeprefix("meta-")


@functools.cache
def _catalog(folder: str) -> dict[str, dict]:
    """The bundled spec files of `folder` (models, hardware) by id, read once."""
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted((ROOT / folder).glob("*.yaml"))}


def model_of(stated: str, weight_dtype: str = "") -> tuple[str | None, dict]:
    """The bundled model id a run's checkpoint is, and the weight format flags it names (quant fp8, weight_dtype
    bf16)."""
    name = stated.split()[0] if stated.strip() else ""
    stem = _stem(name)
    found = None
    for model_id, spec in _catalog("models").items():
        repo = re.search(r"huggingface\.co/([^/]+/[^/]+)/", spec.get("source") or "")
        if stem and stem in {_stem(repo[1]) if repo else None, _stem(spec["name"]), model_id}:
            found = model_id
            break
    return found or SAME_LAYERS.get(stem), weight_flags(name, stated, weight_dtype)


def weight_flags(name: str, stated: str, weight_dtype: str) -> dict:
    """simulate's flags for the weights' format: the one the checkpoint's name ends in (-FP8, -AWQ, -bf16), else
    the one its model text names in brackets ("(--quantization fp8)", "(FP8)"), else the first word of the run's
    weight_dtype; {"unread": ...} for a format roofline's flags do not name (int8 W8A8, int4 w4a16); nothing for
    the checkpoint's own (bf16, fp16, mxfp4 for gpt-oss)."""
    words = [name.lower().rsplit("-", 1)[-1]]
    rest = stated.lower().split(name.lower(), 1)[-1] if name else stated.lower()  # what follows the checkpoint
    words += re.findall(r"\b(fp8|awq|gptq|nvfp4|mxfp4|int8|int4|w8a8|w4a16)\b", rest)
    words += re.findall(r"^\s*([a-z0-9]+)", weight_dtype.lower())
    for word in words:
        if word in ("fp8", "awq", "gptq", "nvfp4"):
            return {"quant": word}
        if word in ("int8", "int4", "w8a8", "w4a16"):
            return {"unread": f"weight format {weight_dtype or word!r}"}
        if word == "bf16" and word == words[0]:  # a bf16 copy of a checkpoint that ships in another format
            return {"weight_dtype": "bf16"}
        if word in ("bf16", "fp16", "mxfp4", "auto"):
            return {}
    return {}


def _words(text: str) -> set[str]:
    return {re.sub(r"^sxm\d$", "sxm", w) for w in re.findall(r"[a-z0-9]+", text.lower().replace("-", " "))}


def device_of(stated: str) -> str | None:
    """The bundled device a run's hardware names: every word of its id in the text, else the one device of the chip
    named (an H100 without its form: the SXM part; an A100 without its memory: none), else the one device of the
    family named (MI350: mi350x); None where none or several fit."""
    words, catalog = _words(stated), _catalog("hardware")
    ids = list(catalog)
    whole = [i for i in ids if set(i.split("-")) <= words]
    if len(whole) == 1:
        return whole[0]
    chip = [i for i in ids if i.split("-")[0] in words]
    if len(chip) == 1:
        return chip[0]
    sxm = [i for i in chip if i.endswith("-sxm")]
    alike = len({catalog[i]["memory_capacity"] for i in chip}) == 1  # forms of one memory (H100 SXM and PCIe)
    if len(sxm) == 1 and alike and not words & {"pcie", "nvl"}:  # a form named that is not bundled: none
        return sxm[0]
    family = [i for i in ids if any(len(w) >= 4 and i.split("-")[0].startswith(w) for w in words)]
    return family[0] if len(family) == 1 else None  # AMD Instinct MI350 -> mi350x, its one part bundled


def engine_of(case: dict) -> str | None:
    """The preset a run is priced with: vLLM's by its build and scheduling, or the engine's own name."""
    engine = case.get("engine")
    if engine != "vllm":
        return engine if engine in ("sglang", "trtllm") else None
    version = vllm_version(case)
    overlap = serving_cases.async_scheduling(version, case.get("notes") or "")
    return era_of("vllm", {"version": version, "async_scheduling": overlap})


def vllm_version(case: dict) -> tuple[int, int] | None:
    """(major, minor) of the vLLM build a run names ("0.15.1", "...:v0.10.1"), None where it names none."""
    found = re.search(r"(?<![\w.])v?(\d+)\.(\d+)", case.get("engine_version") or "")
    return (int(found[1]), int(found[2])) if found else None


def full_isl_of(case: dict) -> bool | None:
    """vLLM's admission rule for the run's build: the whole prompt from 0.19, its first chunk before (a build not
    stated: before); None for other engines (their default)."""
    if case.get("engine") != "vllm":
        return None
    return (vllm_version(case) or (0, 0)) >= serving_cases.FULL_ISL_DEFAULT


def _count(text: str) -> int | None:
    found = re.search(r"(\d[\d,]*)\s+(?:successful\s+)?(?:requests|prompts|samples)", text)
    return int(found[1].replace(",", "")) if found else None


def _flag(notes: str, name: str) -> int | None:
    found = re.search(rf"{name}[\s=:]+(\d+)", notes.replace("-", "_"))
    return int(found[1]) if found else None


def setup(case: dict) -> dict | str:
    """simulate's arguments for a run, or why the rules cannot read it."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    model, flags = model_of(case.get("model") or "", case.get("weight_dtype") or "")
    device, engine = device_of(case.get("hardware") or ""), engine_of(case)
    tp, pp, count = case.get("tp"), case.get("pp") or 1, case.get("count") or 1
    prompt, output = case.get("input_tokens"), case.get("output_tokens")
    clients, rate = case.get("concurrency"), case.get("request_rate")
    rate = float("inf") if str(rate).lower() in ("inf", "infinity") else rate
    arrival, dataset, notes = (case.get(k) or "" for k in ("arrival", "dataset", "notes"))
    unpriced = next((f for f in NOT_PRICED if f in notes.lower()), None)
    reasons = [
        (model is None, f"no bundled model for {case.get('model')!r}"),
        (device is None, f"no bundled device for {case.get('hardware')!r}"),
        (engine is None, f"no preset for engine {case.get('engine')!r}"),
        (not number(tp) or pp != 1, f"tp {tp}, pp {pp}: one replica with tensor parallelism only"),
        (number(tp) and count > tp * pp, f"{count} devices for tp {tp}: data parallelism"),
        (bool(unpriced), f"{unpriced}: no preset's runs had it"),
        (not (number(prompt) and number(output)), "lengths not stated as numbers"),
        (clients is not None and not number(clients), f"concurrency {clients!r}"),
        (number(clients) and number(rate) and rate != float("inf"), "a rate with a concurrency cap"),
        (clients is None and not number(rate), "neither a concurrency nor a rate"),
    ]
    unread = flags.pop("unread", None)
    reasons.append((unread is not None, f"{unread}: not one of roofline's formats"))
    reason = next((why for bad, why in reasons if bad), None)
    if reason:
        return reason
    stated = _count(dataset)
    everyone = rate == float("inf") or "all at once" in arrival.lower()
    load: dict = {}
    if number(clients) and re.search(r"\bbatch\b", arrival.lower()):  # an offline or single batch: N at once
        requests, load = int(clients), {"concurrency": int(clients)}
    elif number(clients) or everyone:
        requests = stated or min(max(10 * int(clients or 0), 100), 1000)
        load = {"concurrency": int(clients) if number(clients) else requests}
    else:
        requests = stated or min(max(round(60 * rate), 100), 1000)
        load = {"rate": float(rate), "arrival": "constant" if re.search(r"constant|fixed", arrival) else "poisson"}
    text = f"{dataset} {arrival}".lower()
    dist = serving_cases.SHAREGPT if "sharegpt" in text else serving_cases.PLUS_MINUS_15 if "15%" in text else None
    kv = {"kv_dtype": "fp8"} if "fp8" in (case.get("kv_dtype") or "").lower() else {}
    return {
        "engine": engine,
        "model": model,
        "hardware": device,
        "tp": int(tp),
        "prompt_tokens": round(prompt),
        "output_tokens": round(output),
        "prompt_dist": dist,
        "output_dist": dist,
        "requests": requests,
        "max_num_seqs": _flag(notes, "max_num_seqs"),
        "max_num_batched_tokens": _flag(notes, "max_num_batched_tokens"),
        "reserve_full_isl": full_isl_of(case),
        **load,
        **flags,
        **kv,
    }


def price(run: dict) -> dict[str, float]:
    """The run's metrics as `roofline simulate` prices them, in serving-train.json's units (ms, tokens/s)."""
    from roofline.calc.replica import Scheduler
    from roofline.calc.simulate import simulate

    args = dict(run)
    limits = (args.pop("max_num_seqs"), args.pop("max_num_batched_tokens"))
    scheduler = Scheduler(None, *limits, None, None, args.pop("reserve_full_isl"))
    s = simulate(args.pop("model"), args.pop("hardware"), scheduler=scheduler, **args)
    out = {}
    for name, (metric, stat) in serving_cases.METRICS.items():
        value = getattr(s, metric)
        out[name] = value if stat is None else value[stat] * 1e3
    return out


def check(cases: list[dict]) -> dict:
    """Each run priced (predicted / measured per metric) or its reason, and each group's median |ratio - 1|."""
    from roofline.errors import UsageError

    priced, skipped = {}, {}
    for k, case in enumerate(cases):
        name = str(case.get("id") or f"run {k + 1}") if isinstance(case, dict) else f"run {k + 1}"
        run = setup(case) if isinstance(case, dict) else "not a JSON object"
        if isinstance(run, str):
            skipped[name] = run
            continue
        try:
            predicted = price(run)
        except UsageError as e:
            skipped[name] = str(e)
            continue
        measured = {m: v for m, v in case.get("metrics", {}).items() if m in serving_cases.METRICS and v}
        ratios = {m: predicted[m] / v for m, v in measured.items()}
        at_once = run.get("concurrency", 0) >= run["requests"] > 8  # every request at once (an offline 8 aside)
        priced[name] = {"setup": run, "ratio": ratios, "at_once": at_once}
    summary = {}
    for kind, runs in (("all", priced.values()), ("queued", [p for p in priced.values() if not p["at_once"]])):
        for group, names in GROUPS.items():
            errors = [abs(r[m] - 1) for p in runs for m in names if (r := p["ratio"]).get(m) is not None]
            summary.setdefault(kind, {})[group] = {
                "figures": len(errors),
                "median_error": statistics.median(errors) if errors else None,
            }
    return {"priced": priced, "not_priced": skipped, "summary": summary}


def _load(path: str) -> list[dict]:
    """A file's runs: its `cases` list, or the list it is; a one-line error naming the file otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"price_runs: error: {path}: {e}") from None
    runs = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(runs, list):
        raise SystemExit(f"price_runs: error: {path}: expected a list of runs or an object with a 'cases' list")
    return runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--summary", action="store_true", help="only the counts and the medians")
    args = parser.parse_args(argv)
    result = check([c for f in args.files for c in _load(f)])
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{len(result['priced'])} runs priced, {len(result['not_priced'])} not (their reasons: without --summary)")
    for run_id, p in result["priced"].items() if not args.summary else ():
        s = p["setup"]
        load = f"{s['concurrency']} clients" if "concurrency" in s else f"{s['rate']:g}/s {s['arrival']}"
        ratios = ", ".join(f"{m} {r:.2f}" for m, r in p["ratio"].items())
        mark = " (every request at once: no preset's runs had that load, docs/reality.md)" if p["at_once"] else ""
        print(f"{run_id}: {s['engine']} {s['model']} on {s['hardware']} tp {s['tp']}, {load}{mark}: {ratios}")
    for run_id, why in result["not_priced"].items() if not args.summary else ():
        print(f"{run_id}: not priced: {why}")
    for kind, title in (("all", "every priced run"), ("queued", "without the runs of every request at once")):
        print(f"median |predicted / measured - 1|, {title}:")
        for group, g in result["summary"][kind].items():
            shown = "n/a" if g["median_error"] is None else f"{g['median_error']:.1%}"
            print(f"  {group}: {shown} ({g['figures']} figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
