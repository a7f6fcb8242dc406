"""The vLLM and SGLang presets (engines/vllm.yaml, engines/sglang.yaml): fitted by benchmarks/fit_engines.py on the
published serving runs of benchmarks/data/serving-train.json and GPUStack's lab closed loops
(benchmarks/data/gpustack-candidates.json), priced through the simulator."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from roofline import estimate, load_hardware, load_model
from roofline.calc import presets

ROOT = Path(__file__).resolve().parent.parent


def load(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_serving_presets_load_with_their_error_bars():
    data = set(load("serving_cases").published())
    for name in ("vllm", "sglang"):
        p = presets.load(name)
        assert set(p.cases) <= data and len(p.cases) >= 3
        assert 0 < p.bandwidth_fraction <= 1 and 0 < p.compute_fraction <= 1  # never faster than the bound
        assert p.step_overhead_s >= 0 and p.request_overhead_s >= 0 and p.layer_overhead_s >= 0
        for metric in ("ttft_mean", "ttft_p99", "tpot", "output_tokens_per_s"):
            # SGLang's runs under load (the lab's Qwen3-8B closed loops) report TTFT and throughput: 3-5 of each
            assert p.errors[metric]["runs"] >= 2 and p.errors[metric]["case"] is not None, (name, metric)
    vllm = presets.load("vllm")
    assert len(vllm.cases) >= 20 and vllm.errors["e2e"]["device"] is not None  # several devices: held out by device
    legacy = presets.load("vllm-legacy")  # older or unstated builds: offline batch latencies only, no TTFT
    assert len(legacy.cases) >= 5 and legacy.errors["e2e"]["runs"] == len(legacy.cases)
    sync = presets.load("vllm-0.10")  # 0.10-0.13 without async scheduling: the lab's closed loops
    assert len(sync.cases) >= 5 and sync.errors["ttft_p99"]["runs"] >= 3
    shared = ("bandwidth_fraction", "compute_fraction", "request_overhead_s", "reserve_bytes", "format_bandwidth")
    for other in (legacy, sync):
        assert not set(other.cases) & set(vllm.cases) and other.step_overhead_s >= 0 and other.layer_overhead_s >= 0
        assert all(getattr(other, n) == getattr(vllm, n) for n in shared)  # one fit: only the loop's costs differ


def test_a_runs_build_and_scheduling_pick_its_preset():
    # serving-train.json's and the lab's engine_version strings and serve commands: async scheduling (on by default
    # from v0.14.0, its release notes: "Async scheduling is now enabled by default"; before, `--async-scheduling`)
    # -> vllm; 0.10-0.13 without it -> vllm-0.10; older or not stated -> vllm-legacy.
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    assert serving_cases.version_of("0.15.1") == (0, 15)
    assert serving_cases.version_of("0.6.2 (commit cb3b2b9)") == (0, 6)
    assert serving_cases.version_of("v0.11.0") == (0, 11)
    assert serving_cases.version_of("not stated in the stored report (CI build of vLLM main, 2024-25)") is None
    overlap = serving_cases.async_scheduling
    assert overlap((0, 14), "") and overlap((0, 19), "") and not overlap((0, 13), "") and not overlap(None, "")
    assert overlap((0, 11), "serve command: `vllm serve openai/gpt-oss-120b --async-scheduling`")
    assert not overlap((0, 15), "`vllm serve m --no-async-scheduling`")
    runs = [((0, 19), True), ((0, 14), True), ((0, 11), True), ((0, 13), False), ((0, 10), False), ((0, 9), False)]
    era = [fit_engines.era_of("vllm", {"version": v, "async_scheduling": a}) for v, a in runs]
    assert era == ["vllm", "vllm", "vllm", "vllm-0.10", "vllm-0.10", "vllm-legacy"]
    assert fit_engines.era_of("vllm", {"version": None, "async_scheduling": False}) == "vllm-legacy"
    assert fit_engines.era_of("sglang", {"version": (0, 5), "async_scheduling": False}) == "sglang"
    by_id = {c["id"]: c for c in serving_cases.cases("vllm")}
    picked = {
        "blisgt-h100-llama-2-7b-tp1-general-s0-8rps": "vllm",  # 0.15.1
        "gpustack-a100-gpt-oss-120b-sharegpt-c4-vllm-async-mnbt-4096": "vllm",  # 0.11.0 with --async-scheduling
        "gpustack-h100-qwen3-8b-sharegpt-c1-vllm-default": "vllm-0.10",  # 0.11.0, defaults
        "vllmperf-h200-llama31-8b-bs8": "vllm-legacy",  # not stated
    }
    assert {i: fit_engines.era_of("vllm", by_id[i]) for i in picked} == picked


def test_a_client_that_undercounts_output_tokens_is_not_used_for_throughput():
    # BLIS Llama-2-7B codegen at 5 req/s (inference-perf stage_0_lifecycle_metrics.json): output tokens/s 966.0 over
    # 4.987 requests/s = 193.7 tokens a request, under 0.95 x 247 = 234.65 of the fixed output (ignore_eos): its
    # output tokens/s is dropped, its TPOT and E2E kept. Llama-2-70B tp4 general at 8 req/s: 1955.1 / 7.945 = 246.1,
    # over 0.95 x 248 = 235.6: kept.
    serving_cases = load("serving_cases")
    by_id = {c["id"]: c for c in serving_cases.cases("vllm")}
    small = by_id["blisgt-h100-llama-2-7b-tp1-codegen-s0-5rps"]["measured"]
    assert "output_tok_s" not in small and {"tpot_ms_mean", "e2e_ms_mean"} <= set(small)
    assert "output_tok_s" in by_id["blisgt-h100-llama-2-70b-tp4-general-s0-8rps"]["measured"]


def test_the_labs_closed_loops_are_training_runs_and_its_runs_all_at_once_are_not():
    # GPUStack's performance lab (gpustack-candidates.json, from docs/performance-lab/*.md): on one H100 SXM or A100
    # SXM 80GB, tp 1, a bundled model, vLLM ran closed loops of Qwen3-8B at 1, 2 and 8 clients (qwen3-8b/
    # h100-latency.md, 100 ShareGPT requests each) and gpt-oss-120b at 4 (A100 twice, H100 once); SGLang Qwen3-8B at 4
    # three times (bf16 with cuda-graph-max-bs 8; FP8 with the Triton and FlashInfer attention backends). Every other
    # lab run of those sends every request at once (rate inf, no --max-concurrency).
    serving_cases = load("serving_cases")
    for engine, loops in (("vllm", [1, 2, 8, 4, 4, 4]), ("sglang", [4, 4, 4])):
        runs = serving_cases.lab(engine)
        fitted = [c for c in serving_cases.cases(engine) if c["id"].startswith("gpustack-")]
        closed = [c for c in runs if c["concurrency"] < c["requests"]]
        assert sorted(c["concurrency"] for c in closed) == sorted(loops)
        assert {c["id"] for c in closed} <= {c["id"] for c in fitted}
        assert all(c["concurrency"] < c["requests"] for c in fitted)  # none of every request at once is fitted on
        published = serving_cases.published()
        assert all(published[c["id"]]["concurrency"] is None for c in runs if c not in closed)  # rate inf, no cap
    by_id = {c["id"]: c for c in serving_cases.lab("vllm")}
    a100 = by_id["gpustack-a100-gpt-oss-120b-sharegpt-c4-vllm-max-model-len-32768"]
    assert (a100["hardware"], a100["model"], a100["requests"]) == ("a100-80gb-sxm", "gpt-oss-120b", 100)
    # Qwen3-8B at 8 clients: Total input tokens 23260 / 100 requests, generated 22061 / 100 (the page's block)
    c8 = by_id["gpustack-h100-qwen3-8b-sharegpt-c8-vllm-default"]
    assert (c8["prompt"], c8["output"], c8["prompt_dist"]) == (233, 221, "lognormal:1")
    fp8 = {c["id"]: c for c in serving_cases.lab("sglang")}["gpustack-h100-qwen3-8b-sharegpt-c4-sglang-fp8-attn-triton"]
    assert fp8["quant"] == "fp8"
    # A cold start at 4 clients (a TTFT p99 above 2 x 4 x the median): SGLang FP8 with the Triton attention backend,
    # p50 43.84 ms, p99 493.14 ms (11.2x): its TTFT mean and p99 and its output tokens/s (the stall is in the run's
    # duration) are not fitted on; its TTFT p50, TPOT and ITL are. The FP8 run of serving-train.json, 33.38 and
    # 134.98 ms (4.0x), keeps them all. BLIS's Llama-2-70B at 20 requests/s (p99 / p50 = 14.5) is a rate-driven
    # queue, not a closed loop: kept.
    kept = {c["id"]: set(c["measured"]) for c in serving_cases.cases("sglang")}
    assert kept[fp8["id"]] == {"ttft_ms_p50", "tpot_ms_mean", "itl_ms_p50"}
    assert {"ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "output_tok_s"} <= kept[
        "gpustack-h100-qwen3-8b-fp8-c4-sglang"
    ]
    blis = {c["id"]: set(c["measured"]) for c in serving_cases.cases("vllm")}[
        "blisgt-h100-llama-2-70b-tp4-general-s1-20rps"
    ]
    assert {"ttft_ms_mean", "ttft_ms_p99", "e2e_ms_mean", "output_tok_s"} <= blis


def test_vllm_kv_reserve_from_its_logged_capacities_by_hand():
    # vLLM 0.15.1's logged GPU KV capacity on H100 SXM (80 GiB) at gpu_memory_utilization 0.9 (serving-train.json,
    # BLIS runs): reserve = 0.9 x 80 GiB - weights per device - tokens x KV bytes per token per device. Parameter
    # counts from the checkpoints' safetensors metadata (Llama-2-7b-hf 6,738,415,616; Llama-2-70b-hf 68,976,648,192;
    # CodeLlama-34b 33,743,970,304), fp16:
    #   7B:      77,309,411,328 - 13,476,831,232 - 119,408 x 524,288       = 1,228,398,592
    #   70B tp4: 77,309,411,328 - 34,488,324,096 - 501,712 x 81,920        = 1,720,840,192
    #   34B tp2: 77,309,411,328 - 33,743,970,304 - 425,648 x 98,304        = 1,722,540,032
    # The median, 1.72 GB, is the reserve vLLM keeps out of its KV pool on every device.
    assert presets.load("vllm").reserve_bytes == pytest.approx(1_720_840_192, abs=2e7)


def test_vllm_preset_memory_rule_reproduces_a_logged_kv_capacity():
    # The KV pool the simulator gives vLLM for Llama-2-7B on one H100 is 0.9 x memory - weights - reserve:
    # (77,309,411,328 - 13,476,831,232 - 1,720,840,192) / 524,288 B per token = 118,467 tokens, within 1% of the
    # 119,408 vLLM logged (its own reserve for the 7B is 0.5 GB smaller than the median).
    from roofline.calc.prepare import prepare
    from roofline.calc.simulate import replica_setup

    p = prepare(load_model("llama-2-7b"), load_hardware("h100-sxm"), None, engine="vllm")
    _, kv_tokens, _ = replica_setup(p)
    assert kv_tokens == pytest.approx(118_467, rel=0.003)
    assert kv_tokens == pytest.approx(119_408, rel=0.01)


@pytest.mark.parametrize(
    "model, hardware, batch, prompt, extra",
    [
        ("llama-3.1-8b", "h100-sxm", 1, 128, {}),
        ("llama-3.1-8b", "h100-sxm", 256, 8192, {}),  # a big batch at a long prompt
        ("llama-3.1-70b", "h200", 64, 32000, {"tp": 4}),
        ("gemma-2-9b", "a100-80gb-sxm", 16, 4000, {}),  # sliding windows
        ("mixtral-8x7b", "mi300x", 32, 2048, {}),
    ],
)
def test_a_serving_preset_never_predicts_faster_than_the_bound(model, hardware, batch, prompt, extra):
    for engine in ("vllm", "sglang"):
        e = estimate(
            load_model(model),
            load_hardware(hardware),
            batch=batch,
            prompt_tokens=prompt,
            output_tokens=256,
            engine=engine,
            **extra,
        )
        if e.engine is None:
            continue  # the engine's memory rule cannot hold it: no prediction, said in a note
        assert e.engine.ttft_s >= e.ttft_s and e.engine.tpot_s >= e.tpot_s
        assert e.engine.output_tokens_per_s <= e.output_tokens_per_s


def test_simulate_with_a_serving_preset_is_slower_than_the_bound_and_says_its_error():
    from roofline.calc.simulate import simulate

    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    bound = simulate(m, h, rate=4, requests=200, prompt_tokens=1000, output_tokens=200)
    vllm = simulate(m, h, rate=4, requests=200, prompt_tokens=1000, output_tokens=200, engine="vllm")
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        assert vllm.to_dict()[metric]["mean"] > bound.to_dict()[metric]["mean"]
    assert any("typical error TTFT +-" in n and "published runs" in n for n in vllm.notes)


def test_estimate_prints_the_presets_typical_error_beside_its_prediction():
    from typer.testing import CliRunner

    from roofline.cli import app

    p = presets.load("vllm")
    tpot = round(p.errors["tpot"]["setup"] * 100)  # a model left out on a device the fit has (setup_of)
    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm"])
    assert r.exit_code == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert f"(vllm preset, +-{tpot}% on {p.errors['tpot']['runs']} published runs)" in out


def test_on_a_device_none_of_its_runs_is_on_the_error_shown_is_the_left_out_devices():
    # vllm's runs are on an H100 SXM and an A100 SXM 80GB: there its TPOT error is the leave-one-setup-out median; on
    # an H200 the preset is priced for a device the fit never saw, and the error that describes that is the
    # leave-one-device-out median (both stored in engines/vllm.yaml).
    from typer.testing import CliRunner

    from roofline.cli import app

    p = presets.load("vllm")
    assert p.devices == ["a100-80gb-sxm", "h100-sxm"] and p.errors["tpot"]["device"] != p.errors["tpot"]["case"]
    for device, key, where in (("h100-sxm", "setup", ""), ("h200", "device", ", each device left out")):
        r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", device, "--engine", "vllm"])
        assert r.exit_code == 0, r.stderr
        shown = round(p.errors["tpot"][key] * 100)
        runs = p.errors["tpot"]["runs"]  # the runs with a TPOT (engines/vllm.yaml)
        assert f"(vllm preset, +-{shown}% on {runs} published runs{where})" in " ".join(r.stdout.split()), device
        e = estimate(load_model("llama-3.1-8b"), load_hardware(device), batch=1, engine="vllm")
        assert e.engine.typical_error["tpot"]["applies"] == key


def test_off_its_devices_a_metric_no_device_fold_scored_shows_its_each_run_figure_and_says_so():
    # SGLang's TTFT runs are all on one H100, and its H100 fold, with no TTFT left, cannot score them (fit_engines
    # held_out): on an A100 its TTFT error is the leave-one-run-out median, labelled as such beside the TPOT's
    # leave-one-device-out one (both stored in engines/sglang.yaml).
    from typer.testing import CliRunner

    from roofline.cli import app

    p = presets.load("sglang")
    assert "a100-80gb-sxm" not in p.devices
    ttft, tpot = p.errors["ttft_mean"], p.errors["tpot"]
    assert ttft["device"] is None and tpot["device"] is not None
    r = CliRunner().invoke(
        app, ["estimate", "-m", "llama-3.1-8b", "-H", "a100-80gb-sxm", "-b", "4", "--engine", "sglang"]
    )
    assert r.exit_code == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert f"+-{round(ttft['case'] * 100)}% on {ttft['runs']} published runs, each run left out)" in out
    assert f"+-{round(tpot['device'] * 100)}% on {tpot['runs']} published runs, each device left out)" in out
    said = presets.error_summary(p, load_hardware("a100-80gb-sxm"))  # simulate's note
    assert f"TTFT +-{round(ttft['case'] * 100)}% ({ttft['runs']} runs, each run left out)" in said
    assert f"TPOT +-{round(tpot['device'] * 100)}% ({tpot['runs']} runs)" in said and "where not marked" in said
    # On its own H100 the TPOT error is a model's left out (setup_of: its TTFT runs are all one setup, so only each
    # run left out scores them, marked as such)
    own = presets.error_summary(p, load_hardware("h100-sxm"))
    assert f"TPOT +-{round(tpot['setup'] * 100)}% ({tpot['runs']} runs)" in own and "each model's runs" in own
    assert f"TTFT +-{round(ttft['case'] * 100)}% ({ttft['runs']} runs, each run left out)" in own


def test_the_fit_recovers_known_parameters_from_cases_it_priced():
    # Synthetic measurements: four legacy-era batch runs (32, 80 and 32 MoE layers on H100s, 32 on an MI300X) priced
    # with known parameters, the era's step cost apart from the shared one and ROCm's extra layer cost; the fit,
    # started elsewhere, finds them.
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    chosen = {
        "vllmperf-h100-llama31-8b-bs8",
        "vllmperf-h100-llama3-70b-tp4-bs8",
        "vllmperf-h100-mixtral-8x7b-tp2-bs8",
        "rocmblog-mi300x-llama3-8b-latency-512-512-fp16",  # the one on ROCm: its extra layer cost
    }
    cases = [c for c in serving_cases.cases("vllm") if c["id"] in chosen]
    truth = {
        **fit_engines.START,
        "bandwidth_fraction": 0.7,
        "step_overhead_s@vllm-legacy": 0.006,
        "layer_overhead_s@vllm-legacy": 0.0,
        "rocm_layer_overhead_s@vllm-legacy": 3e-5,
    }
    pricer = fit_engines.Pricer("vllm", cases)
    for c in cases:
        c["measured"] = pricer.price(c, truth)
    fitted = pricer.fit(cases, {**fit_engines.start("vllm"), "rocm_layer_overhead_s": 5e-5})
    assert pricer.loss(cases, fitted) < 1e-4  # every run within about 1.4%: robust() is r^2 / 2 there
    assert fitted["bandwidth_fraction"] == pytest.approx(0.7, rel=0.1)
    assert fitted["step_overhead_s@vllm-legacy"] == pytest.approx(0.006, rel=0.2)
    assert fitted["rocm_layer_overhead_s@vllm-legacy"] == pytest.approx(3e-5, rel=0.2)
    assert fitted["rocm_layer_overhead_s"] == 0.0  # the async era has no ROCm run here: held at 0, not at its start


def test_sglang_takes_the_prefill_rate_its_runs_cannot_identify_from_vllm():
    # SGLang's two TTFT runs (Qwen3-8B, 233-token prompts at 4 clients) are priced with known parameters, a prefill
    # rate of 0.5 among them; the fit holds the rate at vLLM's stored value however well 0.5 would fit, and the
    # stored SGLang preset carries that value.
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    vllm = presets.load("vllm").compute_fraction
    assert presets.load("sglang").compute_fraction == vllm
    cases = [c for c in serving_cases.cases("sglang") if c["id"].startswith("gpustack-")]
    pricer = fit_engines.Pricer("sglang", cases)
    truth = {**fit_engines.START, "compute_fraction": 0.5}
    for c in cases:
        c["measured"] = pricer.price(c, truth)
    fitted = pricer.fit(cases, fit_engines.start("sglang"))
    assert fitted["compute_fraction"] == vllm != 0.5
    assert fit_engines.start("vllm")["compute_fraction"] == fit_engines.START["compute_fraction"]  # vLLM fits its own


def test_serving_presets_are_current_with_the_simulator():
    # A golden snapshot, not a derivation: the YAML's in-sample residuals were computed by benchmarks/fit_engines.py;
    # repricing every fitted run of both engines now must agree (182 figures, about a second), so a change that moves
    # a prediction fails here until the presets are refitted (`python benchmarks/fit_engines.py`) and the move
    # reported. The windowed KV accounting of 2026-12-07 moved none by more than 1e-4 (gpt-oss's short loops).
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    checked = 0
    for engine in ("vllm", "sglang"):
        cases = serving_cases.cases(engine)
        pricer = fit_engines.Pricer(engine, cases)
        for c in cases:
            p = presets.load(fit_engines.era_of(engine, c))  # each run is priced with its build's preset
            params = {n: getattr(p, n) for n in fit_engines.RANGES}
            params |= {fit_engines.format_key(f): v for f, v in (p.format_bandwidth or {}).items()}
            for metric, r in pricer.residuals(c, params).items():
                assert r == pytest.approx(p.residuals[f"{c['id']} {metric}"], abs=2e-3), (c["id"], metric)
                checked += 1
    assert checked >= 180


def test_hybrid_mamba_models_are_refused_by_name(tmp_path):
    from roofline.errors import RooflineError

    config = {"model_type": "nemotron_h", "hybrid_override_pattern": "M-M-M*-", "hidden_size": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RooflineError, match="Mamba .state-space. layers, which are out of scope"):
        load_model(str(tmp_path / "config.json"))


def test_a_presets_prediction_by_hand():
    # Llama-3.1-8B at batch 32 on an H100 SXM (3.35 TB/s, 989 TFLOP/s bf16 dense) with the vLLM preset: decode is
    # memory-bound, so TPOT = the bound's decode bytes / (bandwidth_fraction x 3.35e12) + the step costs; prefill is
    # compute-bound, so TTFT = the bound's prefill FLOPs / (compute_fraction x 989e12) + one step + the request cost.
    p = presets.load("vllm")
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=32, engine="vllm")
    step = p.step_overhead_s + 32 * p.layer_overhead_s  # Llama-3.1-8B: 32 layers (config.json num_hidden_layers)
    tpot = e.decode.bytes / (p.bandwidth_fraction * 3.35e12) + step
    ttft = e.prefill.flops / (p.compute_fraction * 989e12) + step + p.request_overhead_s
    assert e.engine.tpot_s == pytest.approx(tpot, rel=0.01) and e.engine.ttft_s == pytest.approx(ttft, rel=0.01)


def test_a_rocm_devices_extra_layer_cost_by_hand():
    # The SGLang preset on an MI300X (5.3 TB/s; AMD datasheet) and on an H100 SXM (3.35 TB/s): decode at batch 1 is
    # memory-bound on both, so TPOT = decode bytes / (bandwidth_fraction x W) + step_overhead_s + 32 x per-layer cost,
    # where the per-layer cost on the AMD Instinct device is layer_overhead_s + rocm_layer_overhead_s and on the
    # NVIDIA one layer_overhead_s alone. The MI350X runs identify the ROCm cost, so it is not 0.
    p = presets.load("sglang")
    assert p.rocm_layer_overhead_s > 0
    m = load_model("llama-3.1-8b")
    for device, bandwidth, per_layer in (
        ("mi300x", 5.3e12, p.layer_overhead_s + p.rocm_layer_overhead_s),
        ("h100-sxm", 3.35e12, p.layer_overhead_s),
    ):
        e = estimate(m, load_hardware(device), batch=1, engine="sglang")
        tpot = e.decode.bytes / (p.bandwidth_fraction * bandwidth) + p.step_overhead_s + 32 * per_layer
        assert e.engine.tpot_s == pytest.approx(tpot, rel=0.01), device


def test_the_fit_leaves_the_rocm_cost_at_zero_without_a_rocm_run():
    # A fold with no run on an AMD Instinct device cannot identify ROCm's extra cost: it is held at 0 (CUDA's), not
    # at the full fit's value, which would leak the left-out device's runs into their own prediction.
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    cases = [c for c in serving_cases.cases("sglang") if c["id"].startswith("sglang-gptoss120b-h100")]
    pricer = fit_engines.Pricer("sglang", cases)
    fitted = pricer.fit(cases, {**fit_engines.start("sglang"), "rocm_layer_overhead_s": 5e-5}, scale=0.05)
    assert fitted["rocm_layer_overhead_s"] == 0.0


def test_an_unknown_engine_lists_every_preset_name_it_could_take():
    from typer.testing import CliRunner

    from roofline.cli import app

    r = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vlm"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "presets: llamacpp, sglang, trtllm, vllm, vllm-0.10, vllm-legacy)" in " ".join(r.output.split())


def test_a_preset_records_the_largest_batch_its_runs_reached():
    # vLLM's offline batches of 8 (benchmark_latency: 8 requests of 32 + 128 tokens, sent together) run all 8
    # sequences from the first step to the last, so their mean running batch is 8; the legacy preset's runs are all
    # such batches, so the largest batch it covers is 8. The async builds' runs reach far more (BLIS's open loops).
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    case = next(c for c in serving_cases.cases("vllm") if c["id"] == "vllmperf-h100-llama31-8b-bs8")
    pricer = fit_engines.Pricer("vllm", [case])
    assert pricer.batch(case, fit_engines.start("vllm")) == pytest.approx(8, rel=0.02)
    assert presets.load("vllm-legacy").batch_covered == pytest.approx(8, rel=0.02)
    assert presets.load("vllm").batch_covered >= 8 and presets.load("sglang").batch_covered >= 4


def test_a_prediction_beyond_the_presets_runs_says_so():
    # A closed loop runs at most as many sequences as it has clients: 4 clients stay within a preset whose runs
    # reached a mean batch of 8, 32 clients (1,000-token answers, so they overlap for most of the run) go beyond it.
    from roofline.calc.prepare import prepare, with_preset
    from roofline.calc.simulate import run_simulation
    from roofline.calc.workload import closed_loop, lengths

    preset = presets.load("vllm")._replace(batch_covered=8.0)
    p = with_preset(prepare(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), None), preset)
    said = {}
    for clients in (4, 32):
        requests = closed_loop(4 * clients, lengths(None, 256, "prompt"), lengths(None, 1000, "output"), seed=0)
        s = run_simulation(p, requests, concurrency=clients, warmup=0, capacity=False)
        said[clients] = [n for n in s.notes if "beyond its published runs" in n]
    assert not said[4] and len(said[32]) == 1 and "(8.0 at most)" in said[32][0]
    typical = [n for n in s.notes if n.startswith("engine vllm: typical error")]
    assert not typical  # beyond its runs, the held-out error is not printed as if it applied
    # estimate's batch is the running batch itself: at the recorded batch no note, one more sequence a note and no
    # typical error beside the prediction; a preset without the record (trtllm) says nothing either way.
    covered = presets.load("vllm").batch_covered
    model, h100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    at, above = (estimate(model, h100, batch=b, engine="vllm") for b in (int(covered), int(covered) + 1))
    assert not any("beyond its published runs" in n for n in at.notes) and at.engine.typical_error
    assert sum("beyond its published runs" in n for n in above.notes) == 1 and above.engine.typical_error == {}
    e = estimate(model, h100, batch=4 * int(covered), engine="trtllm")
    assert presets.load("trtllm").batch_covered == 0 and not any("beyond its published runs" in n for n in e.notes)


def test_every_request_at_once_with_some_waiting_says_its_error_does_not_apply():
    # GPUStack's runs that sent every request at once (benchmarks/candidates.py: 69, each simulated with a queue)
    # served about half the priced throughput even where their simulated batch was within the preset's runs, a load
    # none of those runs had. It is the load whatever sends it (at least as many clients as requests, or a trace with
    # one arrival time) and whatever makes a request wait (the sequence limit, or preemption when the KV fills). Not
    # that load: an offline batch that all runs at once (vLLM's batch-of-8 latency runs, the legacy preset's own), a
    # closed loop of fewer clients than requests; nor a preset without published serving runs (trtllm).
    from roofline.calc.prepare import prepare, with_preset
    from roofline.calc.replica import Scheduler
    from roofline.calc.simulate import run_simulation
    from roofline.calc.workload import closed_loop, lengths

    def notes(engine, requests, clients, max_seqs=None, output=64, device="h100-sxm", preset=None, trace=False):
        p = prepare(load_model("llama-3.1-8b"), load_hardware(device), None)
        p = with_preset(p, preset or presets.load(engine))
        work = closed_loop(requests, lengths(None, 512, "prompt"), lengths(None, output, "output"), seed=0)
        if trace:  # an open loop whose arrivals are all at 0 s
            work, clients = [r._replace(arrival_s=0.0) for r in work], None
        s = run_simulation(p, work, concurrency=clients, warmup=0, capacity=False, scheduler=Scheduler(None, max_seqs))
        return [n for n in s.notes if n.startswith(f"engine {engine}:") and "preset's efficiencies" not in n]

    at_once = "every request sent at once, some waiting"
    for said in (
        notes("vllm", 64, 64, max_seqs=16),  # 64 at once, 16 run at once
        notes("vllm", 64, 100, max_seqs=16),  # more clients than requests
        notes("vllm", 64, None, max_seqs=16, trace=True),
        notes("vllm", 16, 16, output=4096, device="l4"),  # all 16 admitted, then preempted as their KV outgrows it
    ):
        assert len(said) == 1 and at_once in said[0] and "0.43x" in said[0], said
    for engine, requests, clients in (("vllm-legacy", 8, 8), ("vllm", 64, 16)):
        said = notes(engine, requests, clients, max_seqs=16)
        assert len(said) == 1 and said[0].startswith(f"engine {engine}: typical error"), (engine, said)
    # the load and the batch both beyond the runs: both notes
    said = notes("vllm", 64, 64, max_seqs=16, preset=presets.load("vllm")._replace(batch_covered=8.0))
    assert len(said) == 2 and at_once in said[0] and "beyond its published runs' (8.0 at most)" in said[1]
    assert presets.at_once(presets.load("trtllm")) is None


def test_a_bad_batch_covered_names_the_file_and_field(tmp_path, monkeypatch):
    from roofline.errors import RooflineError
    from roofline.specs import catalog

    (tmp_path / "engines").mkdir()
    text = (ROOT / "engines" / "sglang.yaml").read_text().replace("batch_covered: 4.0", "batch_covered: -3")
    (tmp_path / "engines" / "sglang.yaml").write_text(text)
    monkeypatch.setattr(catalog, "data_dir", lambda: tmp_path)
    with pytest.raises(
        RooflineError, match=r"sglang\.yaml: key .batch_covered.: expected a number from 0 to 100000, got -3"
    ):
        presets.load("sglang")


def test_a_plan_beyond_the_presets_runs_says_so(monkeypatch):
    # plan --rate simulates each replica with the preset, so an option whose replicas run beyond the preset's runs
    # says so. Little's law with hand bounds: at 2 requests/s of 1,000-token answers, one or two replicas each take
    # at least 1 request/s, and a request decodes 999 steps of at least 4.79 ms (Llama-3.1-8B's 16.06 GB of bf16
    # weights read at the H100 SXM's 3.35 TB/s), so a replica holds 4.8 sequences or more on average: beyond runs
    # that reached 1. At 1 request/s of 100-token answers whose p99 TPOT meets 200 ms, a request stays about 20 s
    # at most, so a replica holds about 20 or fewer: within the stored vLLM preset's 118.
    from roofline.calc.plan import plan

    stored = presets.load
    small = lambda name: stored(name)._replace(batch_covered=1.0) if name == "vllm" else stored(name)  # noqa: E731
    model, h100 = load_model("llama-3.1-8b"), [load_hardware("h100-sxm")]
    light = plan(model, h100, prompt_tokens=200, output_tokens=100, rate=1.0, tpot_slo=0.2, tps=(1,), engine="vllm")
    assert light.best.reason == "meets the SLOs"
    monkeypatch.setattr(presets, "load", small)
    busy = plan(model, h100, prompt_tokens=200, output_tokens=1000, rate=2.0, tpot_slo=0.2, tps=(1,), engine="vllm")
    assert busy.best.reason.startswith("meets the SLOs; engine vllm: a mean batch of")
    assert "(1.0 at most)" in busy.best.reason


def test_a_weight_formats_own_bandwidth_fraction_by_hand():
    # SGLang's fp8 runs (Qwen3-8B-FP8 on H100, Llama-3.1-8B/70B FP8 on DGX Spark) give fp8 weights their own share of
    # peak bandwidth; the KV cache is read by the same attention kernels whatever the weights, at the general share.
    # Llama-3.1-8B on an H100 SXM (3.35 TB/s) decodes memory-bound at batch 1 and at batch 32 with 8k-token prompts,
    # so TPOT = the streamed weight bytes / (weight fraction x 3.35e12) + the step's other bytes (KV) / (general
    # fraction x 3.35e12) + step_overhead_s + 32 layers x layer_overhead_s, with fp8 weights (--quant fp8: linear
    # layers in fp8, lm_head in bf16) at the fp8 fraction and bf16 ones at the general fraction. Where KV dominates
    # the bytes, fp8 weights still decode faster than bf16 ones (fewer weight bytes, the same KV).
    p = presets.load("sglang")
    fp8, general = p.format_bandwidth["fp8"], p.bandwidth_fraction
    assert fp8 < general  # the fp8 runs were slower a token than the general fraction priced them
    model, h100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    step = p.step_overhead_s + 32 * p.layer_overhead_s  # Llama-3.1-8B: 32 layers (config.json num_hidden_layers)
    for batch, prompt in ((1, 1024), (32, 8192)):
        tpot = {}
        for quant, own in (("fp8", fp8), (None, general)):
            e = estimate(model, h100, batch=batch, prompt_tokens=prompt, quant=quant, engine="sglang")
            weights = e.weight_bytes_streamed
            bound = estimate(model, h100, batch=batch, prompt_tokens=prompt, quant=quant)
            assert (weights, e.decode.bytes) == (bound.weight_bytes_streamed, bound.decode.bytes)  # bytes, not time
            hand = weights / (own * 3.35e12) + (e.decode.bytes - weights) / (general * 3.35e12) + step
            assert e.engine.tpot_s == pytest.approx(hand, rel=0.01), (batch, quant)
            said = [n for n in e.notes if n.startswith("engine sglang: a preset")][0]
            assert (f"{general:.2f} of peak bandwidth (fp8 weights {fp8:.2f})" in said) == (quant == "fp8"), said
            assert "bf16 weights" not in said
            tpot[quant] = e.engine.tpot_s
        assert tpot["fp8"] < tpot[None], batch


def test_vllms_mxfp4_fraction_prices_all_of_gpt_oss_weight_reads_by_hand():
    # vLLM's MXFP4 runs (the vLLM blog's gpt-oss-20b at 8 clients, GPUStack's gpt-oss-120b at 4 on A100 and H100) give
    # fp4 weights their own share of peak bandwidth. gpt-oss-120b at batch 1 on an H100 SXM, prompt 1024, output 256,
    # counted by hand from config.json (a helper that saw neither this code nor its output): per layer bf16 attention
    # with biases 26,550,080 params (+64 sinks, not counted here), router 368,768, two norms 5,760; four experts of
    # 3 x 2880^2 MXFP4 weights at 4.25 bits (13,219,200 B each) + 8,640 bf16 biases; 36 layers + lm_head 201,088 x
    # 2880 bf16 + final norm = 5,002,897,536 B a step. KV: 2 x 8 x 64 x 2 B = 2,048 B a token a layer; the 255 decode
    # steps after prefill's token read 1024 + j cached tokens (j = 0..254, mean 1151) in the 18 full layers and 128 in
    # the 18 windowed ones, and write the new token's 36 x 2,048 B: 36,864 x 1279 + 73,728 = 47,222,784 B (the helper,
    # counting 256 steps over c + 1 tokens, had 47,278,080: 0.1% of the KV). TPOT = weights / (fp4 fraction x
    # 3.35e12) + KV / (general fraction x 3.35e12) + step + 36 x layer cost (memory-bound: 1.06e10 FLOP). With the fit
    # of 2026-12-06 (0.5188, 0.8125, 1 ms, 0): 2.8786 + 0.0174 + 1 = 3.896 ms; the helper's own total, 3.896 ms.
    p = presets.load("vllm")
    fp4, general = p.format_bandwidth["fp4"], p.bandwidth_fraction
    assert fp4 < general  # gpt-oss's MXFP4 runs are slower a token than the dense runs' fraction prices them
    e = estimate(load_model("gpt-oss-120b"), load_hardware("h100-sxm"), batch=1, prompt_tokens=1024, engine="vllm")
    assert e.weight_bytes_streamed == pytest.approx(5_002_897_536, rel=1e-6)
    assert e.decode.bytes - e.weight_bytes_streamed == pytest.approx(47_222_784, rel=1e-6)
    step = p.step_overhead_s + 36 * p.layer_overhead_s
    hand = 5_002_897_536 / (fp4 * 3.35e12) + 47_222_784 / (general * 3.35e12) + step
    assert e.engine.tpot_s == pytest.approx(hand, rel=0.005)
    said = [n for n in e.notes if n.startswith("engine vllm: a preset")][0]
    assert f"{general:.2f} of peak bandwidth (fp4 weights {fp4:.2f})" in said
    # At batch 32 with 8k-token prompts the KV reads (32 x 18 full layers x ~8,300 tokens x 2,048 B, ~10 GB) are a
    # fifth of the step's bytes (32 tokens touch most experts): they stay at the general fraction; priced at the fp4
    # one they would add ~2 ms (7%) to the step.
    e = estimate(load_model("gpt-oss-120b"), load_hardware("h100-sxm"), batch=32, prompt_tokens=8192, engine="vllm")
    weights, kv = e.weight_bytes_streamed, e.decode.bytes - e.weight_bytes_streamed
    assert kv == pytest.approx(32 * 2048 * (18 * (8192 + 127) + 18 * 128 + 36), rel=1e-6)
    assert e.engine.tpot_s == pytest.approx(weights / (fp4 * 3.35e12) + kv / (general * 3.35e12) + step, rel=0.005)


def test_the_fit_prices_a_format_none_of_its_runs_has_at_the_general_fraction():
    # A fold of the held-out refits without an fp8 run cannot identify the fp8 fraction: leaving the DGX Spark out
    # leaves no fp8 run, so its two fp8 runs are priced at the general fraction (as a format without its own figure
    # is), not at the full fit's fp8 value, which would leak them into their own prediction. A format with one run
    # gets no fraction at all: left out, nothing would check it.
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    chosen = (
        "sglang-gptoss120b-h100-tp8-bf16-bs1",
        "sglang-spark-llama31-8b-fp8-bs1",
        "sglang-spark-llama31-70b-fp8-bs1",
    )
    cases = [c for c in serving_cases.cases("sglang") if c["id"] in chosen]
    pricer = fit_engines.Pricer("sglang", cases)
    assert pricer.formats == ("fp8",) and fit_engines.Pricer("sglang", cases[:2]).formats == ()
    bf16 = [c for c in cases if "bf16" in c["id"]]
    fitted = pricer.fit(cases, fit_engines.start("sglang", ("fp8",)))
    assert fitted["format_bandwidth:fp8"] != fitted["bandwidth_fraction"]
    _, by_device, _, _ = fit_engines.held_out(pricer, fitted)
    alone = fit_engines.rounded(fit_engines.best_fit(pricer, bf16))  # the spark fold: the H100 run alone
    assert "format_bandwidth:fp8" not in alone
    for c in cases:
        if "spark" in c["id"]:
            own = {**alone, "format_bandwidth:fp8": fitted["format_bandwidth:fp8"]}
            assert by_device[c["id"]] == pricer.residuals(c, alone) != pricer.residuals(c, own)


def _sglang_fit(chosen: tuple[str, ...]):
    """fit_engines, the chosen SGLang cases, their pricer, and the best fit on them all."""
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    cases = [c for c in serving_cases.cases("sglang") if c["id"] in chosen]
    pricer = fit_engines.Pricer("sglang", cases)
    return fit_engines, cases, pricer, fit_engines.best_fit(pricer, cases)


def test_a_device_fold_searches_afresh_not_from_the_full_fit():
    # Starting a fold at the optimum that saw the left-out device leaks it into its own prediction: vLLM's TPOT each
    # device left out read 6.6% from there and 50% from the fit's own starts. A device fold's residuals must not
    # depend on the full fit it is given; a case fold refines it, so its residuals may.
    chosen = ("sglang-gptoss120b-h100-tp8-bf16-bs1", "sglang-spark-llama31-8b-fp8-bs1", "sglang-spark-gptoss20b-c1")
    fit_engines, cases, pricer, fitted = _sglang_fit(chosen)
    elsewhere = {n: v * 0.5 + 0.01 for n, v in fitted.items()}  # every parameter somewhere else
    by_case, by_device, _, _ = fit_engines.held_out(pricer, fitted)
    by_case_elsewhere, by_device_elsewhere, _, _ = fit_engines.held_out(pricer, elsewhere)
    assert by_device == by_device_elsewhere and set(by_device) == set(chosen)
    assert by_case != by_case_elsewhere


def test_a_setup_is_left_out_whole_and_a_setup_of_one_run_is_its_case_fold():
    # A run left out alone keeps its twins in the fit (the same model on the same device at another load or dtype):
    # SGLang's two gpt-oss-120b runs on a B200 (MXFP4 and bf16) are one setup, left out together and refitted
    # afresh on the others; each DGX Spark run is a setup of its own, whose figure is its leave-one-case-out one.
    chosen = (
        "sglang-gptoss120b-b200-tp4-mxfp4-bs1",
        "sglang-gptoss120b-b200-tp4-bf16-bs1",
        "sglang-spark-llama31-8b-fp8-bs1",
        "sglang-spark-gptoss20b-c1",
    )
    fit_engines, cases, pricer, fitted = _sglang_fit(chosen)
    pair, spark = chosen[:2], chosen[2:]
    assert len({fit_engines.setup_of(c) for c in cases if c["id"] in pair}) == 1
    assert len({fit_engines.setup_of(c) for c in cases}) == 3
    by_case, _, _, _ = fit_engines.held_out(pricer, fitted)
    by_setup = fit_engines.held_out_setups(pricer, by_case)
    assert set(by_setup) == set(chosen) and all(by_setup[i] == by_case[i] for i in spark)
    rest = [c for c in cases if c["id"] in spark]
    q = fit_engines.rounded(fit_engines.best_fit(pricer, rest))
    for c in [c for c in cases if c["id"] in pair]:
        assert by_setup[c["id"]] == pricer.residuals(c, q)
    assert any(by_setup[i] != by_case[i] for i in pair)  # its twin no longer in the fit moves it


def test_a_bad_format_bandwidth_names_the_file_and_field(tmp_path, monkeypatch):
    from roofline.errors import RooflineError
    from roofline.specs import catalog

    (tmp_path / "engines").mkdir()
    monkeypatch.setattr(catalog, "data_dir", lambda: tmp_path)
    stored = (ROOT / "engines" / "sglang.yaml").read_text()
    assert "\n  fp8: 0." in stored
    # an unknown dtype; bf16 (the general fraction's own); a fraction above 1; a bool
    for bad in ("\n  fp9: 0.", "\n  bf16: 0.", "\n  fp8: 1.5 #", "\n  fp8: true #"):
        (tmp_path / "engines" / "sglang.yaml").write_text(stored.replace("\n  fp8: 0.", bad, 1))
        with pytest.raises(RooflineError, match=r"sglang\.yaml: key .format_bandwidth.: expected a mapping of quant"):
            presets.load("sglang")


def test_a_bad_device_fold_names_the_file_and_field(tmp_path, monkeypatch):
    from roofline.errors import RooflineError
    from roofline.specs import catalog

    (tmp_path / "engines").mkdir()
    monkeypatch.setattr(catalog, "data_dir", lambda: tmp_path)
    stored = (ROOT / "engines" / "sglang.yaml").read_text()
    assert "\n  b200:\n    compute_fraction: " in stored
    # a parameter that is not a number; a device whose fold is not a mapping
    for bad in ("\n  b200:\n    compute_fraction: fast #", "\n  b200: 0.9\n  b201:\n    compute_fraction: "):
        (tmp_path / "engines" / "sglang.yaml").write_text(stored.replace("\n  b200:\n    compute_fraction: ", bad, 1))
        with pytest.raises(RooflineError, match=r"sglang\.yaml: key .device_folds.: expected a mapping of device"):
            presets.load("sglang")


def test_each_device_figure_is_the_median_of_the_stored_device_folds():
    # The "each device left out" error a preset prints off its devices is the median |predicted / measured - 1| over
    # its runs' figures as their device's fold priced them, which the YAML keeps (holdout_device), so the figure can
    # be checked, and broken down by device (docs/reality.md), from the file alone.
    import math
    import statistics

    from roofline.specs import presets as specs

    groups = load("fit_engines").GROUPS
    for name in ("vllm", "vllm-0.10", "vllm-legacy", "sglang"):
        p = specs.load(name)
        assert {k.split(" ")[0] for k in p.holdout_device} == set(p.cases)
        # every figure is scored by its device's fold, but a TTFT whose fold has no TTFT run left (SGLang's, all on
        # its H100; every vLLM fold keeps one)
        scored = {k.removesuffix(" (device left out)") for k in p.holdout_device}
        unscored = set(p.residuals) - scored
        if name == "sglang":
            ttfts = {k for k in p.residuals if k.split(" ")[1].startswith("ttft")}
            assert ttfts and unscored == ttfts
        else:
            assert not unscored
        for group, e in p.errors.items():
            figures = [abs(math.exp(r) - 1) for k, r in p.holdout_device.items() if k.split(" ")[1] in groups[group]]
            if not figures:  # no fold could score the metric
                assert e["device"] is None, (name, group)
                continue
            assert e["device"] == pytest.approx(statistics.median(figures), abs=5e-4), (name, group)


def test_a_device_fold_without_a_ttft_left_does_not_score_ttft():
    # Without a TTFT among its runs a fit holds the per-request cost and the prefill rate at their start (START's
    # 10 ms, a guess), so a device fold left with none would score its device's TTFTs against that guess. SGLang's
    # TTFT runs are all on one H100: leaving it out keeps their TPOT and throughput scored, not their TTFT.
    chosen = ("gpustack-h100-qwen3-8b-c4-sglang", "sglang-spark-llama31-8b-fp8-bs1", "sglang-spark-gptoss20b-c1")
    fit_engines, cases, pricer, fitted = _sglang_fit(chosen)
    fit_engines.STARTS = ()  # which figures a fold scores does not depend on where its search begins: START alone
    by_case, by_device, _, _ = fit_engines.held_out(pricer, fitted)
    h100 = "gpustack-h100-qwen3-8b-c4-sglang"
    measured = set(next(c for c in cases if c["id"] == h100)["measured"])
    assert {"ttft_ms_mean", "tpot_ms_mean", "output_tok_s"} <= measured == set(by_case[h100])
    assert set(by_device[h100]) == {m for m in measured if not m.startswith("ttft")}
    assert set(by_device["sglang-spark-gptoss20b-c1"]) == set(by_case["sglang-spark-gptoss20b-c1"])


def test_each_stored_device_fold_reprices_its_runs_as_stored():
    # Each device figure can be checked from the YAML alone: the stored parameters of a device's fold (device_folds,
    # the refit without it) price that device's runs to the stored residuals (holdout_device), not to the full fit's
    # (residuals). SGLang's MI350X and B200 folds (two batch-1 runs each) and vllm-legacy's H200 fold (three batches).
    from roofline.specs import presets as specs

    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    pricers = {e: fit_engines.Pricer(e, serving_cases.cases(e)) for e in ("sglang", "vllm")}  # the fit's KV reserve
    chosen = (("sglang", "sglang", "mi350x"), ("sglang", "sglang", "b200"), ("vllm-legacy", "vllm", "h200"))
    for name, engine, device in chosen:
        p, pricer = specs.load(name), pricers[engine]
        mine = [c for c in pricer.cases if c["hardware"] == device and c["id"] in p.cases]
        assert mine and device in p.device_folds
        moved = False
        for c in mine:
            for m, r in pricer.residuals(c, p.device_folds[device]).items():
                held = p.holdout_device[f"{c['id']} {m} (device left out)"]
                assert r == pytest.approx(held, abs=1e-3), (c["id"], m)
                moved |= abs(held - p.residuals[f"{c['id']} {m}"]) > 1e-3
        assert moved, device  # the fold priced them apart from the full fit


def test_a_requests_time_outside_the_engine_spreads_as_a_gamma():
    # request_overhead_cv 0.5: gamma of shape 1 / 0.5^2 = 4 and mean m. Its quantiles in units of m are those of
    # chi-square with 2k = 8 degrees of freedom / 8 (tables): median 7.344 / 8 = 0.918, p99 20.090 / 8 = 2.511.
    import statistics

    from roofline.calc.prepare import prepare, with_preset
    from roofline.calc.simulate import request_overheads, run_simulation
    from roofline.calc.workload import lengths, open_loop

    preset = presets.load("vllm")._replace(request_overhead_s=0.010, request_overhead_cv=0.5)
    draws = sorted(request_overheads(preset, 40_000))
    assert statistics.fmean(draws) == pytest.approx(0.010, rel=0.01)
    assert statistics.pstdev(draws) / statistics.fmean(draws) == pytest.approx(0.5, rel=0.03)
    assert draws[20_000] == pytest.approx(0.00918, rel=0.02) and draws[39_600] == pytest.approx(0.02511, rel=0.04)
    assert request_overheads(preset._replace(request_overhead_cv=0.0), 3) == [0.010] * 3
    assert request_overheads(preset, 5) == request_overheads(preset, 5)  # the same run, the same draws
    # In a simulation at a vanishing load (one 100-token request a second, none overlapping), the engine's TTFT is
    # the same for every request, so the spread of TTFT is the overhead's: p99 - p50 = (2.511 - 0.918) x 10 ms.
    p = with_preset(prepare(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), None), preset)
    requests = open_loop(1.0, "constant", 1.0, 4000, lengths(None, 100, "prompt"), lengths(None, 2, "output"), 0)
    s = run_simulation(p, requests, warmup=0, capacity=False)
    assert s.ttft_s["p99"] - s.ttft_s["p50"] == pytest.approx(0.01593, rel=0.08)
    flat = run_simulation(with_preset(p, preset._replace(request_overhead_cv=0.0)), requests, warmup=0, capacity=False)
    assert s.ttft_s["mean"] == pytest.approx(flat.ttft_s["mean"], abs=0.0005)  # the same mean cost
    assert flat.ttft_s["p99"] - flat.ttft_s["p50"] < 1e-6


def test_the_fits_loss_is_squared_near_zero_and_linear_far_off():
    # pseudo-Huber at scale 0.1: 0.01 x (sqrt(1 + (r / 0.1)^2) - 1). r = 0.01: 0.01 x 0.0049876 = 4.9876e-5 (r^2 / 2
    # = 5e-5); r = 1: 0.01 x (sqrt(101) - 1) = 0.090499 (0.1 x |r| - 0.01 = 0.09), where a square would be 1.
    fit_engines = load("fit_engines")
    assert fit_engines.robust(0.01) == pytest.approx(4.9876e-5, rel=1e-4)
    assert fit_engines.robust(-1.0) == pytest.approx(0.090499, rel=1e-4) == fit_engines.robust(1.0)


def test_the_overhead_draws_are_their_own_stream():
    # They must not replay the workload's draws (both once came from Random(0): at CV 1 with Poisson arrivals a
    # request's overhead was exactly mean x its arrival gap x rate), and --seed moves them with the workload.
    import random

    from roofline.calc.simulate import request_overheads

    preset = presets.load("vllm")._replace(request_overhead_s=0.010, request_overhead_cv=1.0)
    rng = random.Random(0)
    gaps = [rng.expovariate(1.0) for _ in range(5)]
    draws = request_overheads(preset, 5, seed=0)
    assert all(abs(d - 0.010 * g) > 1e-12 for d, g in zip(draws, gaps))
    assert request_overheads(preset, 5, seed=1) != draws and request_overheads(preset, 5, seed=0) == draws
    assert request_overheads(preset._replace(request_overhead_cv=1e-200), 2) == [0.010, 0.010]  # no hang, no overflow


def test_the_fits_folds_in_worker_processes_come_back_in_order(monkeypatch):
    # benchmarks/fit_engines.py runs its folds in forked workers (main() sets JOBS to the core count): each fold's
    # result must land with its own fold, whatever order the workers finish in, and a worker runs its own nested
    # search (best_fit's four starts) in place rather than forking again.
    import importlib
    import multiprocessing

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    fit_engines = importlib.import_module("fit_engines")  # as `python benchmarks/fit_engines.py` has it: a worker's
    monkeypatch.setattr(fit_engines, "JOBS", 2)  # task is found by its module's name, so the module must be importable
    squares = fit_engines.parallel(lambda x: x * x, [3, 1, 4, 1, 5, 9, 2, 6])
    assert squares == [9, 1, 16, 1, 25, 81, 4, 36]
    inner = fit_engines.parallel(
        lambda x: (x, multiprocessing.current_process().daemon, fit_engines.parallel(lambda y: -y, [x, x + 1])), [7, 8]
    )
    assert inner == [(7, True, [-7, -8]), (8, True, [-8, -9])]  # each ran in a worker, its inner map in place
    monkeypatch.setattr(fit_engines, "JOBS", 1)
    assert fit_engines.parallel(lambda x: multiprocessing.current_process().daemon, [1, 2]) == [False, False]


def test_a_chunked_prompt_pays_the_presets_step_cost_once_a_chunk():
    # An audit (2026-12-07): estimate --chunk-tokens added a preset's step cost once to TTFT where the prompt takes one
    # step a chunk (simulate charged each). Llama-3.1-8B, prompt 1024 at batch 1, 513 tokens a step: 512 prompt
    # tokens beside the one decode, so ceil(1024 / 512) = 2 prefill steps (vLLM's chunked prefill).
    from roofline.calc.estimate import estimate_at
    from roofline.calc.prepare import prepare

    p = presets.load("vllm-legacy")
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    e = estimate(m, h, batch=1, prompt_tokens=1024, output_tokens=64, engine="vllm-legacy", chunk_tokens=513)
    step = p.step_overhead_s + 32 * p.layer_overhead_s  # 32 layers (config.json); no ROCm on an H100
    setup = prepare(m, h, engine="vllm-legacy", chunk_tokens=513).preset_setup  # the preset's kernels, no costs
    kernels = estimate_at(setup, 1, 1024, 64).ttft_s
    assert e.engine.ttft_s == pytest.approx(kernels + 2 * step + p.request_overhead_s, rel=1e-9)


def test_a_preset_makes_no_prediction_for_speculative_decoding():
    # None of the presets' published runs drafted (engines/*.yaml: "not captured"); their step cost charged once a
    # token gave a figure with the preset's error bar as if measured (an audit, 2026-12-07).
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=4, engine="vllm", draft="llama-3.2-1b")
    assert e.engine is None and any("no preset prediction with speculative decoding" in n for n in e.notes)


def test_a_pool_larger_than_the_bounds_is_said_with_both_capacities():
    # TensorRT-LLM's pool is 0.95 of the memory the weights leave, more than the bound's 0.9 of memory: Llama-3.1-8B
    # on an H100 SXM (80 GiB = 85.899e9 B; weights 16.061e9 B; KV 131,072 B a token x 1,280 tokens = 167.77e6 B a
    # sequence): the bound holds (0.9 x 85.899e9 - 16.061e9) / 167.77e6 = 365 sequences, the preset
    # 0.95 x (85.899e9 - 16.061e9) / 167.77e6 = 395. Its figures at 380 are not faster than the bound's at 380, but
    # it holds batches the bound's memory fraction does not: said, with the fraction that bounds the same memory.
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=380, engine="trtllm")
    assert (e.max_batch, e.engine.max_batch, e.fits) == (365, 395, False)
    assert e.engine.tpot_s >= e.tpot_s
    share = 0.95 + 0.05 * 16.061e9 / 85.899e9  # f x C - w = 0.95 x (C - w)
    said = next(n for n in e.notes if "holds 395 sequences" in n)
    assert "holds 365" in said and f"--memory-fraction {share:.4g}" in said
    vllm = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=8, engine="vllm")
    # vLLM's pool: 0.9 x 85.899e9 - 16.061e9 - 1.721e9 reserve = 59.53e9 B / 167.77e6 = 354 sequences, under the bound
    assert vllm.engine.max_batch == 354 and not any("--memory-fraction" in n for n in vllm.notes)


def test_simulates_per_request_times_are_the_clients_with_a_presets_request_cost():
    # The per-request CSV's first-token and finish times left out a preset's request cost that TTFT and E2E carry
    # (an audit, 2026-12-07: first token - arrival 9.6 ms against a TTFT p50 of 25 ms).
    from roofline.calc.simulate import simulate

    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    s = simulate(m, h, rate=0.1, requests=21, prompt_tokens=512, output_tokens=16, engine="vllm", warmup=0)
    rows = s.per_request
    ttfts = sorted(r["first_token_s"] - r["arrival_s"] for r in rows)
    assert ttfts[10] == pytest.approx(s.ttft_s["p50"], rel=1e-9)  # the median of 21
    assert all(r["request_overhead_s"] > 0 for r in rows)


@pytest.mark.parametrize(
    "stated, device",
    [
        ("NVIDIA H100 SXM 80GB", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA H100", "h100-sxm"),  # no form named: the SXM part (both forms hold 80 GiB)
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL 94GB", None),  # a form named that is not bundled is not the SXM part (a review, 2026-12-07)
        ("NVIDIA A100 (memory size not stated)", None),  # 40 or 80 GB: the KV pool differs, so not guessed
        ("AMD Instinct MI325X 256GB", "mi325x"),
        ("AMD Instinct MI350", "mi350x"),
        ("NVIDIA RTX PRO 6000 Blackwell (96 GB)", "rtx-pro-6000"),
        ("NVIDIA DGX Spark (GB10, 273 GB/s)", "dgx-spark"),
        ("Intel Gaudi 3", None),
    ],
)
def test_a_runs_hardware_is_read_as_a_bundled_device(stated, device):
    assert load("price_runs").device_of(stated) == device


@pytest.mark.parametrize(
    "stated, model, flags",
    [
        ("meta-llama/Llama-2-70b-chat-hf", "llama-2-70b", {}),
        ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b", {}),
        ("Qwen/Qwen3-8B-FP8", "qwen3-8b", {"quant": "fp8"}),
        ("Qwen/Qwen3-14B-AWQ", "qwen3-14b", {"quant": "awq"}),
        ("neuralmagic/Meta-Llama-3-8B-Instruct-FP8", "llama-3.1-8b", {"quant": "fp8"}),  # Llama 3's layers
        ("lmsys/gpt-oss-120b-bf16", "gpt-oss-120b", {"weight_dtype": "bf16"}),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b", {}),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b", {}),
        ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", None, {"quant": "nvfp4"}),  # hybrid Mamba: none
    ],
)
def test_a_runs_checkpoint_is_read_as_a_bundled_model(stated, model, flags):
    assert load("price_runs").model_of(stated) == (model, flags)


@pytest.mark.parametrize(
    "stated, weight_dtype, flags",
    [
        ("meta-llama/Llama-3.3-70B-Instruct", "nvfp4", {"quant": "nvfp4"}),
        ("meta-llama/Llama-3.3-70B-Instruct", "int8 (W8A8)", {"unread": "weight format 'int8 (W8A8)'"}),
        ("meta-llama/Llama-3.1-8B-Instruct", "bf16 weights, fp8 kv", {}),  # the KV's format is not the weights'
        ("meta-llama/Llama-3.1-8B-Instruct (--quantization fp8)", "", {"quant": "fp8"}),
        ("openai/gpt-oss-120b", "mxfp4 experts (checkpoint default)", {}),
    ],
)
def test_a_runs_weight_format_is_read_or_refused(stated, weight_dtype, flags):
    # A review (2026-12-07): any "fp8" in the text set fp8 weights, and nvfp4 or int8 weights were priced as bf16.
    assert load("price_runs").model_of(stated, weight_dtype)[1] == flags


def test_pricing_a_run_from_its_record_reproduces_the_fits_own_pricing():
    # GPUStack's Qwen3-8B on one H100 SXM under vLLM 0.11.0, a closed loop of 4 over 100 ShareGPT prompts (means 232.6
    # in, 220.6 out): read from its record alone by price_runs' rules, it is the setup benchmarks/serving_cases.py
    # gives it by hand, and `simulate --engine vllm-0.10` prices it as the fit did (its stored in-sample residuals,
    # log(predicted / measured), rounded to 4 decimals in engines/vllm-0.10.yaml).
    import json

    price_runs = load("price_runs")
    record = next(
        c
        for c in json.loads((ROOT / "benchmarks/data/serving-train.json").read_text())["cases"]
        if c["id"] == "gpustack-h100-qwen3-8b-c4-vllm"
    )
    run = price_runs.setup(record)
    assert {k: run[k] for k in ("engine", "model", "hardware", "tp", "concurrency", "requests")} == {
        "engine": "vllm-0.10", "model": "qwen3-8b", "hardware": "h100-sxm", "tp": 1, "concurrency": 4, "requests": 100
    }  # fmt: skip
    assert (run["prompt_tokens"], run["output_tokens"], run["prompt_dist"]) == (233, 221, "lognormal:1")
    checked = price_runs.check([record])["priced"][record["id"]]["ratio"]
    stored = presets.load("vllm-0.10").residuals
    for metric, ratio in checked.items():
        assert math.log(ratio) == pytest.approx(stored[f"{record['id']} {metric}"], abs=6e-5), metric


def test_a_run_the_rules_cannot_read_says_why():
    price_runs = load("price_runs")
    base = {"engine": "vllm", "engine_version": "0.15.1", "model": "meta-llama/Llama-3.1-8B", "tp": 1, "count": 1,
            "hardware": "NVIDIA H100", "input_tokens": 1000, "output_tokens": 200, "concurrency": 8}  # fmt: skip
    assert price_runs.setup({**base, "count": 2}) == "2 devices for tp 1: data parallelism"
    assert price_runs.setup({**base, "input_tokens": "256..125000 (sweep)"}) == "lengths not stated as numbers"
    assert price_runs.setup({**base, "request_rate": 5.0}) == "a rate with a concurrency cap"
    assert price_runs.setup({**base, "engine": "tgi"}) == "no preset for engine 'tgi'"
    assert price_runs.setup({**base, "model": ""}) == "no bundled model for ''"  # not a traceback
    odd = price_runs.check([{"engine": "vllm"}, 3])["not_priced"]  # no id, not an object: said, not a traceback
    assert odd == {"run 1": "no bundled model for None", "run 2": "not a JSON object"}
    assert price_runs.setup({**base, "weight_dtype": "int4 (w4a16)"}).endswith("not one of roofline's formats")
    batch = price_runs.setup({**base, "arrival": "offline batch of 8", "dataset": "100 prompts"})
    assert (batch["concurrency"], batch["requests"]) == (8, 8)  # one batch of 8, not a loop over the dataset
    assert price_runs.engine_of({"engine": "vllm", "engine_version": "vllm/vllm-openai:v0.10.1"}) == "vllm-0.10"
    drafted = {**base, "notes": "FEATURES: SPECULATIVE DECODING. serve command: --speculative-algorithm EAGLE3"}
    assert price_runs.setup(drafted) == "speculative: no preset's runs had it"
    open_loop = price_runs.setup({**base, "concurrency": None, "request_rate": 5.0, "arrival": "constant rate"})
    assert (open_loop["rate"], open_loop["arrival"], open_loop["requests"], open_loop["engine"]) == (
        5.0, "constant", 300, "vllm"  # a minute of arrivals; 0.15 schedules asynchronously
    )  # fmt: skip


@pytest.mark.parametrize(
    "engine, stated, version, full",
    [
        ("vllm", "0.19.1", (0, 19), True),  # scheduler_reserve_full_isl = True from vLLM 0.19 (config/scheduler.py)
        ("vllm", "vllm/vllm-openai:v0.23.0", (0, 23), True),  # a container tag
        ("vllm", "0.18.0", (0, 18), False),  # 0.18's sdist has no such rule: the first chunk
        ("vllm", "0.15.1", (0, 15), False),
        ("vllm", "not stated (CI build of vLLM main)", None, False),
        ("sglang", "0.5.2", None, None),  # its own default: the whole input (PrefillAdder.add_one_req)
    ],
)
def test_a_published_run_is_admitted_by_its_builds_rule(engine, stated, version, full):
    # price_runs reads the build from the run's text, the fit from serving_cases' parsed version: the same rule
    assert load("price_runs").full_isl_of({"engine": engine, "engine_version": stated}) is full
    fit_engines, serving_cases = load("fit_engines"), load("serving_cases")
    case = serving_cases.cases(engine)[0]
    pricer = fit_engines.Pricer(engine, [case])
    assert pricer.scheduler({**case, "version": version}).reserve_full_isl is (full is not False)
